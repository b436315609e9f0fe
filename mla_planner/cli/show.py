"""`mla-plan show`: a model's derived facts, or a topology (the lists: cli/models.py, cli/topologies.py)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Optional

from rich.table import Table

from mla_planner.cli.params import Opt, Arg
from mla_planner.cli.common import JsonOpt, guard, human_bytes, print_json, weight_dtypes
from mla_planner.cli.console import console
from mla_planner.core.errors import PlanError
from mla_planner.engines.compressed_kv import cache_facts, is_compressed
from mla_planner.specs import sizing
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.topology import load_topology


@guard
def show_cmd(model: Annotated[Optional[str], Arg(help="Model: built-in name, YAML spec, config.json "
                                                            "or snapshot folder.")] = None,
             topology: Annotated[Optional[str], Opt("--topology", "-t", help="Show a topology "
                                                             "(built-in name or YAML file) instead.")] = None,
             model_opt: Annotated[Optional[str], Opt("--model", "-m", help="The model, as the other "
                                                              "commands take it (same as MODEL).")] = None,
             as_json: JsonOpt = False) -> None:
    """Show a model's derived facts (parameters, weight bytes, KV bytes per token) or a topology."""
    if model and model_opt and model != model_opt:
        raise PlanError(f"show: MODEL '{model}' and --model '{model_opt}' differ; give one")
    model = model or model_opt
    if topology and model:
        raise PlanError("show: give a MODEL or --topology, not both (one `show` per thing)")
    if topology:
        return _show_topology(topology, as_json)
    if not model:
        raise PlanError("show: give a MODEL (e.g. `mla-plan show deepseek-v3`) or --topology FILE")
    loaded = load_model(model)
    facts = model_facts(loaded.spec)
    facts["model_path"] = loaded.model_path
    if as_json:
        return print_json(facts)
    _render_model(facts)


def model_facts(spec) -> dict:
    draft_params, draft_bytes = sizing.draft_params_and_bytes(spec)
    return {"spec": spec.to_dict(),
            "params": dict(sizing.param_breakdown(spec)),
            "activated_params": dict(sizing.activated_param_breakdown(spec)),
            "mtp_params": sizing.mtp_params(spec),
            "draft_params": draft_params, "draft_weight_bytes": draft_bytes,
            "weight_bytes": dict(sizing.weight_bytes_breakdown(spec)),
            "weight_bytes_with_mtp": sizing.weight_bytes_breakdown(spec, include_mtp=True)["total"],
            "vision_params": spec.vision_params, "vision_weight_bytes": sizing.vision_weight_bytes(spec),
            "weight_bytes_by_format": dict(sizing.weight_bytes_by_format(spec)),
            "weight_bytes_by_dtype": dict(sizing.weight_bytes_by_dtype(spec)),
            "kv_cache": dict(sizing.kv_table(spec)),
            "kv_groups": sizing.kv_group_table(spec),
            **({"compressed_kv": cache_facts(spec)} if is_compressed(spec) else {})}


NOT_SERVED = "(nothing: not a config.json; emit needs --model-path)"


def _render_model(f: dict) -> None:
    spec, out = f["spec"], console()
    served = f["model_path"] or NOT_SERVED
    out.print(f"[bold]{spec['name']}[/bold]  ({spec['attention'].upper()}, {spec['num_hidden_layers']} layers, "
              f"{spec['num_attention_heads']} heads, weights {weight_dtypes(spec)})  served as {served}")
    t = Table("component", "parameters", "activated / token", "weight bytes", title="Parameters and weights")
    for group, n in f["params"].items():
        t.add_row(group, f"{n:,}", f"{f['activated_params'].get(group, 0):,}", human_bytes(f["weight_bytes"][group]))
    t.add_row("activated without input embedding", "", f"{f['activated_params']['total_without_embedding']:,}", "")
    if f["mtp_params"]:
        t.add_row("MTP module (separate)", f"{f['mtp_params']:,}", "", human_bytes(f["weight_bytes_with_mtp"]
                                                                                  - f["weight_bytes"]["total"]))
    if f["draft_params"]:
        t.add_row("DSpark draft (separate)", f"{f['draft_params']:,}", "", human_bytes(f["draft_weight_bytes"]))
    if f["vision_params"]:
        t.add_row("vision encoder (separate)", f"{f['vision_params']:,}", "", human_bytes(f["vision_weight_bytes"]))
    out.print(t)
    w = Table("stored as", "weight bytes", "spread evenly over 8 GPUs", title="Weights in other formats (main model)")
    for fmt, n in f["weight_bytes_by_format"].items():
        w.add_row(fmt, human_bytes(n), human_bytes(n / 8))
    out.print(w)
    d = Table("stored as", "weight bytes", title="Weights by storage dtype (main model, scales included)")
    for dtype, n in f["weight_bytes_by_dtype"].items():
        d.add_row(dtype, human_bytes(n))
    out.print(d)
    k = Table("cache format", "bytes / token / layer", "bytes / token (all layers)", "128K-token sequence",
              title="KV cache per token (one rank holding the whole cache)")
    for fmt, row in f["kv_cache"].items():
        k.add_row(fmt, f"{row['bytes_per_token_layer']:,.0f}", f"{row['bytes_per_token']:,.0f}",
                  human_bytes(row["bytes_per_token"] * 131072))
    layers = f["spec"]["num_hidden_layers"]
    partial = [g for g in f["kv_groups"] if g["layers"] != layers]
    if partial:
        k.caption = "; ".join(f"{g['name']} on {g['layers']:g} of the {layers} layers" for g in partial) + \
            (" (and the MTP layer)" if f["spec"]["num_nextn_predict_layers"] and all(g["mtp"] for g in partial)
             else "") + \
            ": bytes / token / layer is the average over all layers"
    out.print(k)
    if "compressed_kv" in f:
        _render_compressed(f["compressed_kv"])


def _render_compressed(c: dict) -> None:
    """DeepSeek-V4's caches per layer kind, and what the engines make of them."""
    out = console()
    kinds = ", ".join(f"{n} {k.upper()}" for k, n in c["layer_kinds"].items() if n)
    t = Table("cache", "layers", "bytes / row", "tokens / row", "kept", title=f"Caches per layer kind ({kinds})")
    for row in c["caches"]:
        t.add_row(row["name"], str(row["layers"]), f"{row['row_bytes']:,}", str(row["tokens_per_row"]),
                  f"last {row['window_tokens']} tokens (per request)" if row["window_tokens"] else "every row")
    out.print(t)
    v = c["vllm"]
    g = Table("vLLM group", "page bytes / block", "block tokens", "window",
              title=f"vLLM 0.33: every block id costs {v['bytes_per_block']:,} B (the widest group; "
                    f"{v['bytes_per_block_fp4_indexer']:,} B with the FP4 indexer cache), "
                    f"{v['marginal_bytes_per_token']:,.0f} B per token of context")
    for row in v["groups"]:
        g.add_row(row["name"], f"{row['page_bytes']:,}", str(row["block_tokens"]), str(row["window_tokens"] or "-"))
    out.print(g)
    for r in v["blocks_per_request"]:
        out.print(f"  one request reserves {r['blocks']:,} blocks at --max-model-len {r['max_model_len']:,}, "
                  f"--max-num-batched-tokens {r['max_num_batched_tokens']:,}")
    s = c["sglang"]
    out.print(f"SGLang 0.5.23: {s['bytes_per_full_token']:,.2f} B per full-pool token ({s['page_tokens']}-token pages, "
              f"SWA pool {s['swa_full_tokens_ratio']:g} of it), plus {human_bytes(s['fixed_state_bytes'])} of C128 state "
              f"rings for {s['max_running_requests']} request slots")


def _show_topology(ref: str, as_json: bool) -> None:
    t = load_topology(ref)
    data = asdict(t)
    data.update(gpu_arch=t.gpu.arch, gpu_arch_id=t.gpu.arch_id, total_gpus=t.total_gpus, domain_gpus=t.domain_gpus,
                intra_bytes_per_s=t.intra_bytes_per_s,
                nic_bytes_per_s_per_node=t.nic_bytes_per_s_per_node, nvls=t.uses_nvls)
    if as_json:
        return print_json(data)
    g = t.gpu
    table = Table("field", "value", title=f"{t.name}: {t.description}")
    domain = [("NVLink domain", f"{t.nvlink_domain_nodes} hosts x {t.gpus_per_node} GPUs = {t.domain_gpus} GPUs "
                                f"({t.domains} domain{'s' if t.domains > 1 else ''})")] if t.nvlink_domain_nodes > 1 else []
    for key, val in [("nodes x GPUs", f"{t.nodes} x {t.gpus_per_node} = {t.total_gpus}"), *domain,
                     ("GPU", f"{g.name} ({g.vendor.upper() if g.vendor == 'amd' else 'NVIDIA'} {g.arch_id}, "
                             f"{g.arch})"), ("GPU memory", human_bytes(g.memory_bytes)),
                     ("HBM bandwidth", f"{g.hbm_bytes_per_s / 1e12:.2f} TB/s"),
                     ("dense bf16 / fp8",
                      f"{g.bf16_flops_per_s / 1e12:,.0f} / {g.fp8_flops_per_s / 1e12:,.0f} TFLOP/s"),
                     ("inside node", f"{t.intra_node.kind}, {t.intra_bytes_per_s / 1e9:,.0f} GB/s per GPU per "
                                     f"direction, {t.intra_node.latency_us} us" + (", NVLS" if t.uses_nvls else "")),
                     ("between nodes", "-" if not t.inter_node else
                      f"{t.inter_node.fabric}, {t.inter_node.nics_per_node} x {t.inter_node.nic_gbit_per_s:g} Gb/s "
                      f"= {t.nic_bytes_per_s_per_node / 1e9:,.0f} GB/s per node "
                      f"({t.nic_gbit_per_s_per_gpu:g} Gb/s per GPU), {t.inter_node.latency_us} us")]:
        table.add_row(key, val)
    console().print(table)
