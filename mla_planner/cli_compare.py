"""`mla-plan compare`: the five metrics (+ TTFT) for several layouts side by side, with ratios vs the first."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Annotated, Optional

import typer
from rich.table import Table

from .calibration import load_calibration
from .cli_common import DEFAULT_MODEL, DEFAULT_TOPOLOGY, JsonOpt, ModelOpt, TopologyOpt, console, guard, print_json
from .engine_memory import default_memory_fraction, engine_default_knobs
from .errors import PlanError
from .knobs import ENGINES, KV_DTYPES, Workload
from .layout import parse_layout
from .knobs import Knobs
from .layout import Layout
from .memory import evaluate as memory_evaluate
from .metrics import Metrics, evaluate
from .models import load_model
from .spec import ModelSpec
from .topology import load_topology

# (label, key of `summary`, format)
ROWS = [("GPUs", "gpus", "{:,.0f}"),
        ("concurrent requests", "concurrency", "{:,.0f}"),
        ("throughput (output tok/s)", "throughput_tokens_per_s", "{:,.0f}"),
        ("throughput per GPU (tok/s)", "throughput_tokens_per_s_per_gpu", "{:,.0f}"),
        ("decode step (ms)", "step_ms", "{:,.2f}"),
        ("time per output token (ms)", "tpot_ms", "{:,.2f}"),
        ("tokens/s per user", "tokens_per_s_per_user", "{:,.1f}"),
        ("network wait share", "network_wait_pct", "{:.1f} %"),
        ("effective memory utilization", "memory_utilization_pct", "{:.1f} %"),
        ("memory in use (weights + live KV)", "memory_in_use_pct", "{:.1f} %"),
        ("TTFT (ms)", "ttft_ms", "{:,.0f}"),
        ("TPOT, one request alone (ms)", "alone_tpot_ms", "{:,.2f}"),
        ("KV capacity (tokens / DP rank)", "kv_capacity_tokens", "{:,.0f}")]


def summary(m: Metrics) -> dict:
    """The flat numbers of one layout (what the table and --json show)."""
    return {"layout": m.layout.label, "gpus": m.layout.total_gpus, "concurrency": m.concurrency,
            "concurrency_per_dp_rank": m.concurrency_per_dp_rank, "concurrency_limit": m.concurrency_limit,
            "throughput_tokens_per_s": m.throughput_tokens_per_s,
            "throughput_tokens_per_s_per_gpu": m.throughput_tokens_per_s_per_gpu,
            "step_ms": m.step_s * 1e3, "tpot_ms": m.tpot_s * 1e3, "tokens_per_s_per_user": m.tokens_per_s_per_user,
            "network_wait_pct": m.network_wait_share * 100, "memory_utilization_pct": m.memory_utilization * 100,
            "memory_in_use_pct": m.memory_in_use * 100, "ttft_ms": m.ttft_s * 1e3,
            "alone_tpot_ms": m.alone_tpot_s * 1e3,
            "kv_capacity_tokens": m.memory.kv_capacity_tokens, "meets_targets": m.meets_targets,
            "notes": list(m.notes)}


def detail(m: Metrics) -> dict:
    """Per-stage and per-layer named terms of the decode step at the sustained concurrency."""
    d = m.decode
    return {"micro_batch": d.micro_batch, "micro_batches": d.micro_batches, "context_len": d.context_len,
            "stages": [asdict(s) for s in d.stages], "layers": {k: asdict(v) for k, v in d.layers.items()},
            "prefill": asdict(m.prefill), "layout_fields": asdict(m.layout)}


def knobs_for(spec: ModelSpec, topo, layout: Layout, base: Knobs, fraction: float | None) -> tuple[Knobs, str]:
    """The knobs one layout runs with: the given memory fraction, else the engine's default for the layout,
    lowered to the memory model's safe fraction when the default would run out of memory (with a note)."""
    if fraction is not None:
        return replace(base, memory_fraction=fraction), ""
    default = default_memory_fraction(base.engine, spec, topo, layout, base)
    knobs = replace(base, memory_fraction=default)
    report = memory_evaluate(spec, topo, layout, knobs)
    if report.fits or not report.per_gpu or not 0 < report.safe_fraction < default:
        return knobs, ""
    return (replace(knobs, memory_fraction=report.safe_fraction),
            f"memory fraction {report.safe_fraction:.3f} used: the engine default {default:g} runs out of memory")


def _cell(value: float, first: float, fmt: str, ratio: bool) -> str:
    text = fmt.format(value)
    if ratio and first:
        text += f"  ({value / first:.2f}x)"
    return text


def render(rows: list[dict], title: str) -> None:
    table = Table("metric", *[r["layout"] for r in rows], title=title)
    for label, key, fmt in ROWS:
        table.add_row(label, *[_cell(r[key], rows[0][key], fmt, i > 0) for i, r in enumerate(rows)])
    table.add_row("limited by", *[r["concurrency_limit"] for r in rows])
    table.add_row("meets targets", *["yes" if r["meets_targets"] else "NO" for r in rows])
    out = console()
    out.print(table)
    for r in rows:
        for note in r["notes"]:
            out.print(f"  {r['layout']}: {note}")


@guard
def compare_cmd(layouts: Annotated[Optional[list[str]], typer.Option(
                    "--layout", "-l", help='A layout to compare, e.g. "tp=16" or "tp=8,pp=2" (repeat; the first '
                    'is the baseline for the ratios).')] = None,
                model: ModelOpt = DEFAULT_MODEL, topology: TopologyOpt = DEFAULT_TOPOLOGY,
                engine: Annotated[str, typer.Option("--engine", "-e", help="vllm or sglang.")] = "vllm",
                input_len: Annotated[int, typer.Option("--input-len", help="Prompt tokens per request.")] = 2048,
                output_len: Annotated[int, typer.Option("--output-len", help="Output tokens per request.")] = 512,
                tpot_ms: Annotated[float, typer.Option("--tpot-ms", help="Target time per output token.")] = 50.0,
                ttft_ms: Annotated[float, typer.Option("--ttft-ms", help="Target time to first token.")] = 3000.0,
                kv_cache_dtype: Annotated[str, typer.Option("--kv-cache-dtype",
                                                            help="bf16, fp8 or fp8_ds_mla.")] = "bf16",
                enforce_eager: Annotated[bool, typer.Option("--enforce-eager", help="No CUDA graphs "
                                                            "(each kernel launched from the CPU).")] = False,
                max_num_seqs: Annotated[Optional[int], typer.Option("--max-num-seqs", help="Running requests "
                                                                    "per DP rank (engine default).")] = None,
                memory_fraction: Annotated[Optional[float], typer.Option("--memory-fraction", help="vLLM "
                                           "--gpu-memory-utilization / SGLang --mem-fraction-static (engine "
                                           "default).")] = None,
                calibration: Annotated[Optional[str], typer.Option("--calibration", help="Calibration file from "
                                                                   "`mla-plan verify --write-calibration`.")] = None,
                as_json: JsonOpt = False) -> None:
    """Compare layouts on the seed article's metrics: concurrency, throughput, decode step, network wait,
    memory utilization (+ TPOT per user and TTFT), computed from the step and memory models."""
    if not layouts:
        raise PlanError('compare: give at least one --layout, e.g. --layout "tp=16" --layout "tp=8,pp=2"')
    if engine not in ENGINES:
        raise PlanError(f"--engine must be one of {', '.join(ENGINES)}, got '{engine}'")
    if kv_cache_dtype not in KV_DTYPES:
        raise PlanError(f"--kv-cache-dtype must be one of {', '.join(KV_DTYPES)}, got '{kv_cache_dtype}'")
    if min(input_len, output_len) < 1 or min(tpot_ms, ttft_ms) <= 0:
        raise PlanError("--input-len/--output-len must be >= 1 and --tpot-ms/--ttft-ms > 0")
    if memory_fraction is not None and not 0 < memory_fraction <= 1:
        raise PlanError(f"--memory-fraction must be in (0, 1], got {memory_fraction:g}")
    if max_num_seqs is not None and max_num_seqs < 1:
        raise PlanError(f"--max-num-seqs must be >= 1, got {max_num_seqs}")
    spec, topo = load_model(model).spec, load_topology(topology)
    calib = load_calibration(calibration, topo)
    workload = Workload(input_len=input_len, output_len=output_len, tpot_ms=tpot_ms, ttft_ms=ttft_ms)
    base = engine_default_knobs(engine, spec, topo, kv_cache_dtype=kv_cache_dtype, cuda_graphs=not enforce_eager,
                                max_num_seqs=max_num_seqs, max_model_len=workload.max_context_len)
    results, rows = [], []
    for text in layouts:
        layout = parse_layout(text)
        knobs, note = knobs_for(spec, topo, layout, base, memory_fraction)
        m = evaluate(spec, topo, layout, knobs, workload, calib)
        results.append((m, knobs))
        rows.append(summary(m) | {"notes": ([note] if note else []) + list(m.notes)})
    if as_json:
        return print_json({"model": spec.name, "topology": topo.name, "engine": engine, "workload": asdict(workload),
                           "layouts": [r | {"knobs": asdict(k), "detail": detail(m)}
                                       for r, (m, k) in zip(rows, results)]})
    render(rows, f"{spec.name} on {topo.name} ({engine}), {input_len} in / {output_len} out, "
                 f"TPOT target {tpot_ms:g} ms")
