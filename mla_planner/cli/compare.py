"""`mla-plan compare`: the five metrics (+ TTFT) for several layouts side by side, with ratios vs the first."""

from __future__ import annotations

from dataclasses import asdict, replace
from math import inf
from pathlib import Path
from typing import Annotated, Optional

import click

from mla_planner.engines.compressed_pool import indexer_choice_flag
from mla_planner.engines.backends import default_engine, int8_checkpoint_problem, mtp_verify_problem, usable_backends
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.calibration import int4_experts_note, load_calibration
from mla_planner.cli.params import Opt, typed_options
from mla_planner.cli.common import (DEFAULT_MODEL, DEFAULT_TOPOLOGY, GraphCapOpt, ImagesOpt, IndexerKvOpt, JsonOpt,
                                    ModelOpt, MtpAcceptanceOpt, MtpDraftOpt, PpPartitionOpt, TopologyOpt,
                                    check_acceptance, check_context, check_draft_tokens, check_images, check_mtp,
                                    guard, print_json, lower_case)
from mla_planner.cli.compare_render import render, verdict
from mla_planner.cli.options import (bounded, fraction_from_flags, graph_cap_choice, kv_dtype_choice, kv_knobs,
                                     parse_length, partition_choice)
from mla_planner.engines.layouts import engine_layout_problem, mtp_layout_problem
from mla_planner.search.candidate_warnings import ttft_headroom_note
from mla_planner.engines.memory_rules import SGLANG_SPECULATIVE_MAX_RUNNING, engine_default_knobs
from mla_planner.cli.plannable import check_plannable
from mla_planner.core.errors import PlanError
from mla_planner.engines.parallel import uses_ep_all_to_all, dense_per_rank_applies
from mla_planner.memory.ways_out import fraction_knobs, split_note
from mla_planner.perf.bands import beside, collective_band, kv_band, performance_bands
from mla_planner.perf.metrics import Metrics, evaluate
from mla_planner.perf.step import step_breakdown_s
from mla_planner.search.planfile_read import read_plan
from mla_planner.search.pick import pick
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import ENGINES, MTP_ACCEPTANCE, Knobs, Workload
from mla_planner.specs.layout import Layout, parse_layout, query_heads_per_rank
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import load_topology

# what --plan fixes: its candidates' knobs and its workload (the calibration may still be given)
PLAN_SETS = ("model", "topology", "engine", "input_len", "output_len", "tpot_ms", "ttft_ms", "kv_cache_dtype",
             "enforce_eager", "mtp", "mtp_draft_tokens", "mtp_acceptance", "images", "dense_per_rank", "max_num_seqs",
             "indexer_kv_dtype", "block_size", "max_num_batched_tokens", "pp_layer_partition", "cuda_graph_max_bs",
             "gpu_memory_utilization", "mem_fraction_static", "memory_fraction")
SERVING_ONLY = {"step_s", "collectives_s", "tpot_s", "network_wait_share", "decode_network_wait_share", "ttft_s",
                "ttft_longest_s", "alone_tpot_s"}


def summary(m: Metrics, topo) -> dict:
    """The flat numbers of one layout (what the table and --json show), named as `plan`'s JSON names them, each
    decode figure and the KV capacity with its band beside it (perf/bands.py) where the layout serves."""
    figures, bands = _summary(m), {}
    if m.concurrency:
        bands = performance_bands(m, topo)
        bands["kv_capacity_tokens_low"], bands["kv_capacity_tokens_high"] = kv_band(m.memory.kv_capacity_tokens)
        bands["collectives_s_low"], bands["collectives_s_high"] = collective_band(figures["collectives_s"], m.layout,
                                                                                  topo)
    return beside(figures, bands)


def _summary(m: Metrics) -> dict:
    return {"layout": m.layout.label, "gpus": m.layout.total_gpus, "concurrency": m.concurrency,
            "concurrency_per_dp_rank": m.concurrency_per_dp_rank, "concurrency_limit": m.concurrency_limit,
            "throughput_tokens_per_s": m.throughput_tokens_per_s,
            "throughput_tokens_per_s_per_gpu": m.throughput_tokens_per_s_per_gpu,
            "step_s": m.step_s, "collectives_s": step_breakdown_s(m.decode)["collectives_s"], "tpot_s": m.tpot_s,
            "tokens_per_s_per_user": m.tokens_per_s_per_user,
            "network_wait_share": m.network_wait_share, "decode_network_wait_share": m.decode_network_wait_share,
            "memory_utilization": m.memory_utilization,
            "memory_in_use": m.memory_in_use, "ttft_s": m.ttft_s, "ttft_longest_s": m.ttft_longest_s,
            "alone_tpot_s": m.alone_tpot_s,
            "kv_capacity_tokens": m.memory.kv_capacity_tokens, "meets_targets": m.meets_targets,
            "step_breakdown_s": step_breakdown_s(m.decode),
            "notes": list(m.notes)} | _not_serving(m)


def _not_serving(m: Metrics) -> dict:
    """A layout that serves nothing has no step, latencies or network share (None; '-' in the table), and,
    when it does not even fit, no TPOT alone either."""
    if m.concurrency:
        return {}
    gone = SERVING_ONLY - ({"alone_tpot_s"} if m.memory.fits else set())
    return dict.fromkeys(gone | {"step_breakdown_s"})


def detail(m: Metrics) -> dict:
    """Per-stage and per-layer named terms of the decode step at the sustained concurrency."""
    d = m.decode
    return {"micro_batch": d.micro_batch, "micro_batches": d.micro_batches, "context_len": d.context_len,
            "stages": [asdict(s) for s in d.stages], "layers": {k: asdict(v) for k, v in d.layers.items()},
            "prefill": asdict(m.prefill), "layout_fields": asdict(m.layout)}


def _mtp_verify_note(spec: ModelSpec, topo, layout: Layout, knobs: Knobs) -> str:
    """Where the engine's backend would verify MTP's tokens through its prefill path (plan does not plan MTP
    there; backends.mtp_verify_problem), say that the priced decode is not what runs."""
    if attention_of(spec).backend_family != "mla":
        return ""
    heads = query_heads_per_rank(spec, layout)
    found = [b for b in usable_backends(knobs.engine, topo.gpu, knobs.kv_cache_dtype, layout.dcp, heads)
             if b.accepts_block(knobs.block_size)]
    problem = mtp_verify_problem(found[0], layout.dcp) if found else ""
    return f"slower than priced here: {problem}" if problem else ""


def _fraction(engine: str, util: Optional[float], static: Optional[float], alias: Optional[float]) -> Optional[float]:
    """The fraction under memory's engine-named flags; --memory-fraction is their hidden old name."""
    if alias is None:
        return fraction_from_flags(engine, util, static)
    if util is not None or static is not None:
        raise PlanError("--memory-fraction is the old name of --gpu-memory-utilization / --mem-fraction-static; "
                        "give one of them")
    if not 0 < alias <= 1:
        raise PlanError(f"--memory-fraction must be in (0, 1], got {alias:g}")
    return alias


@guard
def compare_cmd(ctx: click.Context, layouts: Annotated[Optional[list[str]], Opt(
                    "--layout", "-l", help='A layout to compare, e.g. "tp=16" or "tp=8,pp=2" (repeat; the first '
                    'is the baseline for the ratios).')] = None,
                model: ModelOpt = DEFAULT_MODEL, topology: TopologyOpt = DEFAULT_TOPOLOGY,
                engine: Annotated[Optional[str], Opt("--engine", "-e",
                    callback=lower_case, help="vllm or sglang (default: vllm, or SGLang for a checkpoint only SGLang "
                                              "loads).")] = None,
                input_len: Annotated[str, Opt("--input-len", help="Prompt tokens: '2048' or "
                                                       "'p50=1024,p99=8192'.")] = "2048",
                output_len: Annotated[str, Opt("--output-len", help="Output tokens: '512' or "
                                                        "'p50=256,p99=2048'.")] = "512",
                tpot_ms: Annotated[float, Opt("--tpot-ms", help="Target time per output token.")] = 50.0,
                ttft_ms: Annotated[float, Opt(
                    "--ttft-ms", help="Target time to first token, ms (held by the p99 prompt when --input-len gives "
                    "percentiles).")] = 3000.0,
                kv_cache_dtype: Annotated[str, Opt("--kv-cache-dtype", help="auto (= bf16; a sparse-attention model: the engine's default on the GPU), bf16, fp8 "
                                                            "or fp8_ds_mla.")] = "auto",
                enforce_eager: Annotated[bool, Opt("--enforce-eager", help="No CUDA graphs "
                                                            "(the host dispatches every layer of every step).")] = False,
                mtp: Annotated[bool, Opt("--mtp", help="Serve with the model's own drafter (its MTP layer or "
                                                  "DSpark draft; speculative decoding; SGLang then defaults to 48 "
                                                  "running requests, DeepSeek-V4 to its 256).")] = False,
                mtp_draft_tokens: MtpDraftOpt = None,
                indexer_kv_dtype: IndexerKvOpt = "auto",
                mtp_acceptance: MtpAcceptanceOpt = MTP_ACCEPTANCE,
                images: ImagesOpt = False,
                dense_per_rank: Annotated[bool, Opt(
                    "--dense-per-rank", help="SGLang under DP attention at tp=1: the dense MLP layers and lm_head on "
                    "each rank's own tokens (--moe-dense-tp-size 1 --enable-dp-lm-head), not split over the stage "
                    "with every rank's tokens gathered (plan tries both).")] = False,
                max_num_seqs: Annotated[Optional[int], Opt("--max-num-seqs", help="Running requests "
                                                                    "per DP rank (engine default).")] = None,
                block_size: Annotated[Optional[int], Opt("--block-size", help="vLLM --block-size / "
                                                                  "SGLang --page-size (engine default).")] = None,
                max_num_batched_tokens: Annotated[Optional[int], Opt(
                    "--max-num-batched-tokens", help="vLLM --max-num-batched-tokens / SGLang --chunked-prefill-size "
                    "per DP rank (engine default); with --block-size, --max-num-seqs and the memory fraction, "
                    "a plan candidate's knobs.")] = None,
                pp_layer_partition: PpPartitionOpt = None,
                cuda_graph_max_bs: GraphCapOpt = None,
                gpu_memory_utilization: Annotated[Optional[float], Opt(
                    "--gpu-memory-utilization", help="vLLM's --gpu-memory-utilization (default: 0.92, lowered to "
                    "the safe fraction when that runs out of memory).")] = None,
                mem_fraction_static: Annotated[Optional[float], Opt(
                    "--mem-fraction-static", help="SGLang's --mem-fraction-static (default: SGLang's computed "
                    "value per layout, lowered to the safe fraction when that runs out of memory).")] = None,
                memory_fraction: Annotated[Optional[float], Opt("--memory-fraction", hidden=True)] = None,
                calibration: Annotated[Optional[str], Opt("--calibration", help="Calibration file from "
                                                                   "`mla-plan calibrate` or `verify "
                                                                   "--write-calibration`; with --plan it replaces the "
                                                                   "calibration the plan recorded.")] = None,
                plan: Annotated[Optional[Path], Opt(
                    "--plan", "-p", help="Compare a plan file's candidates instead, with their own knobs and the "
                    "plan's workload (pick them with -c; default the first three).")] = None,
                candidates: Annotated[Optional[list[int]], Opt(
                    "--candidate", "-c", help="With --plan: a candidate number (repeat).")] = None,
                as_json: JsonOpt = False) -> None:
    """Compare layouts on the seed article's metrics: concurrency, throughput, decode step, network wait,
    memory utilization (+ TPOT per user and TTFT), computed from the step and memory models.

    --json uses `plan`'s metric names and units (seconds, shares 0..1); the table shows ms and %.

    Exit status: 0 compared (a layout that misses its targets says so in the table); 2 bad input.

    Examples:

      mla-plan compare -m deepseek-v2 -t 2x8xh100-ib -l tp=16 -l tp=8,pp=2

      mla-plan compare -t 2x8xh200-ib -l tp=8,pp=2 -l tp=1,dp=16,ep=16 -e sglang --tpot-ms 30 --json

      mla-plan compare --plan plan.json -c 1 -c 3    (a plan's candidates, exactly as planned)
    """
    if plan is not None:
        if layouts:
            raise PlanError("compare: give --plan (and -c) or --layout, not both")
        if ignored := typed_options(ctx, PLAN_SETS):
            raise PlanError(f"{', '.join(ignored)}: the plan file sets these (its candidates' knobs and its "
                            "workload): give --plan or them, not both")
        return _compare_plan(plan, candidates, calibration, as_json)
    if candidates:
        raise PlanError("compare: --candidate picks from a --plan file")
    if not layouts:
        raise PlanError('compare: give at least one --layout, e.g. --layout "tp=16" --layout "tp=8,pp=2"')
    if engine is not None and engine not in ENGINES:
        raise PlanError(f"--engine must be one of {', '.join(ENGINES)}, got '{engine}'")
    kv_dtype_choice(kv_cache_dtype)        # a value the planner knows, before any work
    (inp, inp_max), (out, out_max) = parse_length(input_len, "--input-len"), parse_length(output_len, "--output-len")
    if not (0 < tpot_ms < inf and 0 < ttft_ms < inf):
        raise PlanError("--tpot-ms and --ttft-ms must be positive, finite milliseconds")
    spec, topo = load_model(model).spec, load_topology(topology)
    check_plannable(spec, "compare", topo.gpu)
    if engine is None:
        engine = default_engine(spec, topo.gpu)
    elif (problem := int8_checkpoint_problem(engine, spec, topo.gpu)):
        raise PlanError(problem)
    fraction = _fraction(engine, gpu_memory_utilization, mem_fraction_static, memory_fraction)
    calib = load_calibration(calibration, topo)
    check_acceptance(mtp_acceptance)
    workload = Workload(input_len=inp, output_len=out, input_len_max=inp_max, output_len_max=out_max,
                        tpot_ms=tpot_ms, ttft_ms=ttft_ms, mtp_acceptance=mtp_acceptance)
    check_context(spec, workload)
    check_mtp(spec, mtp)
    check_draft_tokens(mtp_draft_tokens, mtp)
    check_images(spec, images)
    if dense_per_rank and engine != "sglang":
        raise PlanError("--dense-per-rank is SGLang's choice: vLLM always runs the dense parts on each DP rank's "
                        "own tokens")
    seqs = bounded("--max-num-seqs", max_num_seqs)
    chunk = bounded("--max-num-batched-tokens", max_num_batched_tokens)
    graphs = graph_cap_choice(cuda_graph_max_bs, enforce_eager)
    results, rows = [], []
    parsed = [parse_layout(text, topo) for text in layouts]
    stages = len(pp_layer_partition.split(",")) if pp_layer_partition else 0
    if stages and not any(lay.pp == stages > 1 for lay in parsed):
        raise PlanError(f"--pp-layer-partition {pp_layer_partition}: none of the layouts has {stages} pipeline stages")
    for layout in parsed:
        cache, cache_notes = kv_knobs(spec, topo, layout, engine, kv_cache_dtype, block_size)
        base = engine_default_knobs(engine, spec, topo, layout.dp, uses_ep_all_to_all(layout), **cache,
                                    cuda_graphs=not enforce_eager, max_num_seqs=seqs,
                                    max_num_batched_tokens=chunk, cuda_graph_max_bs=graphs,
                                    max_model_len=workload.max_context_len, mtp=mtp, images=images,
                                    mtp_draft_tokens=mtp_draft_tokens, indexer_kv_dtype=indexer_choice_flag(
                                        spec, engine, topo.gpu, indexer_kv_dtype),
                                    pp_layer_partition=partition_choice(pp_layer_partition, spec, layout)
                                    if layout.pp == stages else None)
        per_rank = dense_per_rank and dense_per_rank_applies(layout, engine)
        knobs, note = fraction_knobs(spec, topo, layout, replace(base, dense_per_rank=per_rank), fraction)
        m = evaluate(spec, topo, layout, knobs, workload, calib)
        results.append((m, knobs))
        split = split_note(spec, topo, layout, knobs, m.memory) if m.memory.fits else ""   # `plan` may adopt it
        start = (engine_layout_problem(spec, topo, layout, engine, per_rank)
                 or (mtp_layout_problem(engine, layout, spec.drafter) if mtp else ""))
        start = f"will not start as priced here: {start}" if start else ""
        verify = _mtp_verify_note(spec, topo, layout, knobs) if mtp else ""
        capped = (f"SGLang resets --max-running-requests to {SGLANG_SPECULATIVE_MAX_RUNNING} with speculative "
                  "decoding (for the whole server): give --max-num-seqs for more"
                  if mtp and engine == "sglang" and seqs is None
                  and attention_of(spec).backend_family != "mla-compressed" else "")   # V4's hook sets 256 first
        moot = ("--dense-per-rank does not apply here (DP attention at tp=1 only)"
                if dense_per_rank and not per_rank else "")
        label = layout.label + (" (dense per rank)" if knobs.dense_per_rank else "")
        ttft = ttft_headroom_note(m.ttft_longest_s, m.meets_targets, workload)
        int4 = int4_experts_note(calib, spec.expert_dtype)
        notes = cache_notes + [n for n in (start, verify, note, split, capped, moot, ttft, int4) if n] + \
            list(m.notes)
        rows.append(summary(m, topo) | {"layout": label, "memory_fraction": knobs.memory_fraction, "notes": notes})
    _show(rows, results, {"model": spec.name, "topology": topo.name, "engine": engine, "workload": asdict(workload)},
          f"{spec.name} on {topo.name} ({engine}), {input_len} in / {output_len} out, TPOT target {tpot_ms:g} ms, "
          f"TTFT target {workload.ttft_ms:g} ms" + (f", MTP at {mtp_acceptance:.0%} acceptance" if mtp else ""),
          as_json)


def _show(rows: list[dict], results: list, head: dict, title: str, as_json: bool) -> None:
    """The comparison as JSON (`head`, then each layout's row, knobs and detail, and the verdict) or a table."""
    if as_json:
        return print_json(head | {"layouts": [r | {"knobs": asdict(k), "detail": detail(m)}
                                              for r, (m, k) in zip(rows, results)], "verdict": verdict(rows)})
    render(rows, title)


def _compare_plan(path: Path, numbers: Optional[list[int]], calibration: Optional[str], as_json: bool) -> None:
    """A plan file's candidates side by side, each with its own knobs, under the plan's workload (and a
    calibration file when given), the first the baseline."""
    p = read_plan(path)
    numbers = numbers or list(range(1, min(3, len(p.candidates)) + 1))
    calib, results, rows = load_calibration(calibration, p.topology, p.calibration), [], []
    for n in numbers:
        cand = pick(p, n, f"{path}")
        m = evaluate(p.spec, p.topology, cand.layout, cand.knobs, p.workload, calib)
        results.append((m, cand.knobs))
        ttft = ttft_headroom_note(m.ttft_longest_s, m.meets_targets, p.workload)
        rows.append(summary(m, p.topology) | {"layout": f"#{n} {cand.layout.label} {cand.knobs.engine} {cand.knobs.kv_cache_dtype}",
                                  "memory_fraction": cand.knobs.memory_fraction,
                                  "notes": ([ttft] if ttft else []) + list(m.notes)})
    w = p.workload
    _show(rows, results, {"model": p.spec.name, "topology": p.topology.name, "plan": str(path),
                          "workload": asdict(w)},
          f"{p.spec.name} on {p.topology.name}, candidates of {path.name}, {w.input_len} in / {w.output_len} out, "
          f"TPOT target {w.tpot_ms:g} ms, TTFT target {w.ttft_ms:g} ms", as_json)
