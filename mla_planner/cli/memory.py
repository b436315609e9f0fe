"""`mla-plan memory`: will it fit, and how many KV tokens will the engine give me? Parse, call, render."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Annotated, Optional

from rich.table import Table

from mla_planner.engines.backends import default_engine, engine_version as planner_release
from mla_planner.cli.params import Opt
from mla_planner.cli.common import (DEFAULT_MODEL, DEFAULT_TOPOLOGY, GraphCapOpt, ImagesOpt, IndexerKvOpt, JsonOpt,
                                    ModelOpt, MtpDraftOpt, PpPartitionOpt, TopologyOpt, check_draft_tokens,
                                    check_images, check_mtp, guard, human_bytes, print_json, lower_case)
from mla_planner.cli.console import console
from mla_planner.cli.plannable import check_plannable
from mla_planner.engines.compressed_pool import indexer_choice_flag
from mla_planner.cli.options import (FRACTION_FLAG, KV_CAPACITY_LABEL, bounded, graph_cap_choice, knobs_from_flags,
                                     kv_knobs, partition_choice, positive)
from mla_planner.core.errors import PlanError
from mla_planner.engines.layouts import engine_layout_problem
from mla_planner.engines.memory_rules import engine_rules, parse_version
from mla_planner.engines.parallel import dense_per_rank_applies
from mla_planner.engines.sglang_defaults import sglang_reserve_words
from mla_planner.memory.report import memory_report
from mla_planner.memory.results import MemoryReport
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import KV_LAYOUTS, Layout, deepep_runs, layout_problems
from mla_planner.specs.topology import load_topology

LONG_CONTEXT_ENV = {"vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"}

IntOpt = Optional[int]
SGLANG_LOW_DEFAULT = 0.5   # below this SGLang's computed default fraction is worth a word


@guard
def memory_cmd(
    model: ModelOpt = DEFAULT_MODEL,
    topology: TopologyOpt = DEFAULT_TOPOLOGY,
    tp: Annotated[int, Opt("--tp", help="Tensor parallel size of attention (vLLM -tp per DP rank; "
                                    "SGLang --tp-size is tp x dp).")] = 8,
    pp: Annotated[int, Opt("--pp", help="Pipeline stages (vLLM -pp, SGLang --pp-size).")] = 1,
    dp: Annotated[int, Opt("--dp", help="Data-parallel attention ranks per stage (vLLM -dp, SGLang "
                                    "--attn-dp-size).")] = 1,
    ep: Annotated[IntOpt, Opt("--ep", help="Expert parallel size of the MoE (default: tp x dp over the EP "
                                       "all-to-all - DeepEP on NVIDIA, MoRI on AMD - when --dp > 1 and the cluster has "
                                       "NVLink / Infinity Fabric inside a node and RDMA between nodes, else 1: the MoE "
                                       "tensor-parallel; vLLM --enable-expert-parallel, SGLang --ep-size).")]
    = None,
    dcp: Annotated[int, Opt("--dcp", help="Decode context parallel size: the tp ranks split each "
                                     "sequence's cached tokens (vLLM -dcp, SGLang --dcp-size).")] = 1,
    kv_layout: Annotated[str, Opt("--kv-layout", help="How a TP group holds the latent cache: "
                                           "replicated (what both engines do) or latent-sharded (the "
                                           "seed's Route B, a planning figure).")] = "replicated",
    engine: Annotated[Optional[str], Opt("--engine", "-e", callback=lower_case,
                                        help="vllm (V1, 0.33 accounting) or sglang (0.5.23); default vllm, or "
                                             "SGLang for a checkpoint only SGLang loads.")] = None,
    gpu_memory_utilization: Annotated[Optional[float], Opt(
        "--gpu-memory-utilization", help="vLLM's --gpu-memory-utilization: share of total GPU memory for "
        "weights + activations + KV (+ CUDA graphs). Default 0.92 (0.9 before vLLM 0.20).")] = None,
    mem_fraction_static: Annotated[Optional[float], Opt(
        "--mem-fraction-static", help="SGLang's --mem-fraction-static: share of pre-load free memory for "
        "weights + KV pool. Default: SGLang's computed value for this GPU and layout.")] = None,
    kv_cache_dtype: Annotated[str, Opt("--kv-cache-dtype", help="--kv-cache-dtype: auto (= bf16; a sparse-attention model: the engine's default on the GPU), "
                                                "bf16, fp8 (576 B/token/layer) or fp8_ds_mla (656 B).")] = "auto",
    block_size: Annotated[IntOpt, Opt("--block-size", help="vLLM --block-size / SGLang --page-size, "
                                               "tokens per KV block (default: the engine's).")] = None,
    max_model_len: Annotated[IntOpt, Opt("--max-model-len", help="vLLM --max-model-len / SGLang "
                                                  "--context-length (default: the model's maximum).")] = None,
    max_num_seqs: Annotated[IntOpt, Opt("--max-num-seqs", help="vLLM --max-num-seqs / SGLang "
                                                 "--max-running-requests, per DP rank.")] = None,
    max_num_batched_tokens: Annotated[IntOpt, Opt(
        "--max-num-batched-tokens", help="vLLM --max-num-batched-tokens / SGLang --chunked-prefill-size, per "
        "DP rank (SGLang's flag is this x the DP-attention size): tokens of the profiled forward that sizes "
        "the activation peak.")] = None,
    cuda_graph_max_bs: GraphCapOpt = None,
    pp_layer_partition: PpPartitionOpt = None,
    images: ImagesOpt = False,
    mtp: Annotated[bool, Opt("--mtp", help="Serve with the MTP draft layer (vLLM --speculative-config, "
                                      "SGLang --speculative-algorithm EAGLE): its weights and KV on the last "
                                      "stage, its CUDA graphs.")] = False,
    mtp_draft_tokens: MtpDraftOpt = None,
    enforce_eager: Annotated[bool, Opt("--enforce-eager", help="No CUDA graphs (vLLM --enforce-eager, "
                                                "SGLang --cuda-graph-backend-decode disabled).")] = False,
    dense_per_rank: Annotated[bool, Opt(
        "--dense-per-rank", help="SGLang under DP attention at tp=1: the dense MLP layers and lm_head whole on every "
        "rank (--moe-dense-tp-size 1 --enable-dp-lm-head), not split over the stage.")] = False,
    indexer_kv_dtype: IndexerKvOpt = "auto",
    engine_version: Annotated[Optional[str], Opt(
        "--engine-version", help="Model an older release's accounting: vLLM from 0.8.0 (e.g. 0.8.4: vLLM < 0.10 "
        "charged the CUDA context and NCCL buffers to the budget and captured graphs after it), SGLang from 0.4.0 "
        "(before 0.5.3 with --mem-fraction-static given). Default: the release the planner reads (vLLM 0.33.0, "
        "SGLang 0.5.23); a newer one is priced as that.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per-GPU memory and the KV capacity the engine will report, with a FITS / DOES NOT FIT verdict.

    Counts like the engine: vLLM's gpu-memory-utilization budget (num_blocks = available // page //
    layers) or SGLang's mem-fraction-static; the MLA latent cache (576 values per token per layer) is
    NOT divided by TP, so the KV capacity does not grow with TP; DP attention, dcp and PP multiply it.

    Exit status: 0 FITS; 1 DOES NOT FIT (after the full report or JSON); 2 bad input or a layout that
    cannot exist.

    Examples:

      mla-plan memory -m deepseek-v3 -t 2x8xh100-ib --tp 8 --pp 2 --kv-cache-dtype fp8

      mla-plan memory -t 2x8xh200-ib -e sglang --tp 1 --dp 16 --ep 16 --max-model-len 32768 --json
    """
    spec, topo = load_model(model).spec, load_topology(topology)
    check_plannable(spec, "memory", topo.gpu)
    engine = engine or default_engine(spec, topo.gpu)
    engine_version, version_notes = release_choice(engine, engine_version)
    check_mtp(spec, mtp)
    check_draft_tokens(mtp_draft_tokens, mtp)
    check_images(spec, images)
    layout = _layout(tp, pp, dp, ep, dcp, kv_layout, topo)
    problems = layout_problems(layout, spec, topo.gpus_per_node, topo.total_gpus)
    if problems:
        raise PlanError(f"layout {layout.label} cannot exist on {topo.name}: {'; '.join(problems)}")
    cache, cache_notes = kv_knobs(spec, topo, layout, engine, kv_cache_dtype, block_size)
    knobs = knobs_from_flags(spec, topo, layout, engine, gpu_memory_utilization, mem_fraction_static,
                   dict(**cache, max_model_len=_model_len(spec, engine, max_model_len),
                        max_num_seqs=bounded("--max-num-seqs", max_num_seqs),
                        max_num_batched_tokens=bounded("--max-num-batched-tokens", max_num_batched_tokens),
                        mtp=mtp, mtp_draft_tokens=mtp_draft_tokens, images=images, cuda_graphs=not enforce_eager,
                        indexer_kv_dtype=indexer_choice_flag(
                            spec, engine, topo.gpu, indexer_kv_dtype),
                        cuda_graph_max_bs=graph_cap_choice(cuda_graph_max_bs, enforce_eager),
                        pp_layer_partition=partition_choice(pp_layer_partition, spec, layout)), engine_version)
    if dense_per_rank:
        if not dense_per_rank_applies(layout, engine):
            raise PlanError(f"--dense-per-rank applies to SGLang under DP attention at tp=1 only, not {engine} on "
                            f"{layout.label}")
        knobs = replace(knobs, dense_per_rank=True)
    if problem := engine_layout_problem(spec, topo, layout, engine, knobs.dense_per_rank):
        raise PlanError(f"layout {layout.label} cannot start on {engine}: {problem}")
    report = memory_report(spec, topo, layout, knobs, engine_version)
    report = replace(report, notes=version_notes + cache_notes + report.notes)
    if engine == "sglang" and gpu_memory_utilization is None and mem_fraction_static is None and \
            knobs.memory_fraction < SGLANG_LOW_DEFAULT:
        report = replace(report, notes=report.notes + [
            f"--mem-fraction-static {knobs.memory_fraction:g} is SGLang's own default here: "
            f"{sglang_reserve_words(topo.gpu, layout, knobs, spec)}; pass --mem-fraction-static yourself"
            + (f", e.g. the safe {report.safe_fraction:.3f}" if report.safe_fraction else "")])
    data = report_dict(report, spec.name, topo.name)
    print_json(data) if as_json else _render(report, data)
    if not report.fits:
        raise SystemExit(1)


def release_choice(engine: str, version: Optional[str]) -> tuple[Optional[str], list[str]]:
    """--engine-version as given, stripped and checked (a release number; not older than the planner models:
    engine_rules), with a note where it is newer than the release the planner reads and is priced as that one."""
    if version is None:
        return None, []
    version = version.strip()
    engine_rules(engine, version)
    newest = planner_release(engine)
    if parse_version(version) > parse_version(newest):
        return version, [f"{engine} {version} is newer than {newest}, the release the planner reads: priced with "
                         f"{newest}'s accounting"]
    return version, []


def _layout(tp: int, pp: int, dp: int, ep: Optional[int], dcp: int, kv_layout: str, topo) -> Layout:
    for flag, value in (("--tp", tp), ("--pp", pp), ("--dp", dp), ("--ep", ep), ("--dcp", dcp)):
        positive(flag, value)
    if kv_layout not in KV_LAYOUTS:
        raise PlanError(f"--kv-layout must be one of {', '.join(KV_LAYOUTS)}, got '{kv_layout}'")
    wide = dp > 1 and deepep_runs(topo, tp * dp)   # DP attention goes with EP over DeepEP where DeepEP runs
    return Layout(tp=tp, pp=pp, dp=dp, ep=ep or (tp * dp if wide else 1), dcp=dcp, kv_layout=kv_layout)


def _model_len(spec, engine: str, value: Optional[int]) -> Optional[int]:
    """Both engines refuse a context longer than the model's max_position_embeddings
    (vLLM 0.33.0 vllm/config/model.py, SGLang 0.5.23 sglang/srt/configs/model_config.py)."""
    positive("--max-model-len", value)
    if value is not None and value > spec.max_position_embeddings:
        raise PlanError(f"--max-model-len {value:,} exceeds {spec.name}'s max_position_embeddings "
                        f"{spec.max_position_embeddings:,}; {engine} refuses it unless {LONG_CONTEXT_ENV[engine]}")
    return value




def report_dict(r: MemoryReport, model: str, topology: str) -> dict:
    """The JSON form: the verdict, the engine-reported capacity, and each stage's terms."""
    return {"model": model, "topology": topology, "engine": r.engine, "engine_version": r.engine_version,
            "layout": asdict(r.layout), "layout_label": r.layout.label, "knobs": asdict(r.knobs),
            "memory_fraction_flag": FRACTION_FLAG[r.engine], "fits": r.fits,
            "kv_capacity_tokens": r.kv_capacity_tokens, "kv_tokens_per_replica": r.kv_tokens_per_replica,
            "kv_holding": r.kv_holding, "binding_stage": r.binding_stage, "max_concurrency": r.max_concurrency,
            "max_model_len_fit": r.max_model_len_fit, "safe_memory_fraction": r.safe_fraction or None,
            "no_safe_fraction": r.no_safe_fraction,
            "reasons": r.reasons, "blocking_reasons": r.reasons[:r.blocking],
            "findings": [asdict(f) for f in r.findings], "ways_out": r.ways_out, "notes": r.notes,
            **({"capacity_rule": r.capacity_rule} if r.capacity_rule else {}),
            "per_gpu": [asdict(g) for g in r.per_gpu]}


def _render(r: MemoryReport, d: dict) -> None:
    out, k = console(), r.knobs
    out.print(f"[bold]{d['model']}[/bold] on {d['topology']}, {r.layout.label}, {r.engine} {r.engine_version}: "
              f"{d['memory_fraction_flag']} {k.memory_fraction:g}, KV {k.kv_cache_dtype}, block {k.block_size}, "
              f"max-model-len {k.max_model_len:,}, max-num-batched-tokens {k.max_num_batched_tokens:,}")
    table = Table("term", *[f"stage {g.pp_stage} ({g.layers} layers)" for g in r.per_gpu],
                  title="Memory of one GPU per pipeline stage")
    names = list(dict.fromkeys(name for g in r.per_gpu for name in g.terms))
    names.sort(key=lambda name: not name.startswith("weights/"))  # stable: weights first, then the rest in order
    for name in names:
        table.add_row(name, *[human_bytes(g.terms.get(name, 0.0)) for g in r.per_gpu])
    table.add_row("[bold]total[/bold]", *[human_bytes(g.total_bytes) for g in r.per_gpu])
    out.print(table)
    for g in r.per_gpu:
        out.print(f"stage {g.pp_stage}: {g.kv_bytes_per_token:,.0f} B per cached token on each GPU, "
                  f"pool {human_bytes(g.kv_pool_bytes)} = {g.kv_tokens:,} tokens")
    out.print(f"{KV_CAPACITY_LABEL}: {r.kv_capacity_tokens:,} (binding stage {r.binding_stage})")
    out.print(f"KV tokens per replica: {r.kv_tokens_per_replica:,}; KV cache {r.kv_holding}")
    if r.capacity_rule:
        _render_capacity_rule(r)
    safe = f"safe {d['memory_fraction_flag']}: {r.safe_fraction:.3f}" if r.safe_fraction else r.no_safe_fraction
    out.print(f"max concurrency at --max-model-len {k.max_model_len:,}: {r.max_concurrency:,.2f}x; "
              f"largest max-model-len that fits: {r.max_model_len_fit:,}; {safe}", soft_wrap=True)
    verdict = "[bold green]FITS[/bold green]" if r.fits else "[bold red]DOES NOT FIT[/bold red]"
    out.print(verdict)
    for line, items in (("why", r.reasons[:r.blocking]), ("risk", r.reasons[r.blocking:]), ("way out", r.ways_out),
                        ("note", r.notes)):
        for item in items:
            out.print(f"  {line}: {item}", soft_wrap=True)


def _render_capacity_rule(r: MemoryReport) -> None:
    """DeepSeek-V4: what decides the capacity, in the engine's terms (engines/compressed_kv.py)."""
    c, k, out = r.capacity_rule, r.knobs, console()
    if r.engine == "sglang":
        how = (f"{c['full_tokens']:,} full-pool tokens at {c['bytes_per_full_token']:,.2f} B each (SWA pool "
               f"{c['swa_tokens']:,}), after {human_bytes(c['fixed_state_bytes'])} of C128 state rings for "
               f"{c['max_running_requests']} + 1 request slots")
    else:
        how = (f"{c['num_blocks']:,} blocks of {c['bytes_per_block']:,} B; one request reserves "
               f"{c['blocks_per_request']:,} of them, {c['fixed_blocks_per_request']:,} whatever its length (windows "
               f"and compressor states for {k.max_num_batched_tokens:,} x {c['in_flight_batches']} tokens in flight)")
    out.print(f"capacity: {c['concurrent_requests']:,.2f} concurrent requests of {k.max_model_len:,} tokens: {how}; "
              f"{c['marginal_bytes_per_token']:,.0f} B per further token of context", soft_wrap=True)
    out.print(f"  what moves it: {c['knob']}", soft_wrap=True)

