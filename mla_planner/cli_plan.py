"""`mla-plan plan`: search every layout, choose the launch knobs, rank, explain. Parse, call, render."""

from __future__ import annotations

from math import inf
from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml

from .backends import default_engine
from .calibration import load_calibration
from .cli_common import (DEFAULT_MODEL, DEFAULT_TOPOLOGY, JsonOpt, MtpAcceptanceOpt, MtpOpt, check_acceptance,
                         check_context, check_mtp, check_output_file, guard, print_json, lower_case)
from .errors import PlanError
from .knobs import ENGINES, MTP_ACCEPTANCE, Workload
from .layout import layout_problems, parse_layout
from .models import load_model
from .pareto import png_plot
from .plan import to_plan
from .planfile import Plan, meets_targets, plan_to_dict
from .search import SearchResult, search
from .topology import load_topology
from .yamlio import path_kind
from .tuning import Overrides
from .tuning_mtp import MtpHint, mtp_hint

Opt = typer.Option


def parse_length(text: str, flag: str) -> tuple[int, int]:
    """`2048` (fixed) or `p50=1024,p90=4096,p99=8192` -> (typical = p50, longest = the highest percentile)."""
    try:
        if "=" not in text:
            value = int(text)
            if value < 1:
                raise ValueError
            return value, value
        pairs = [(float(k.strip().removeprefix("p")), int(v)) for k, v in (p.split("=") for p in text.split(","))]
        pct = dict(pairs)
        ordered = [pct[k] for k in sorted(pct)]
        if len(pct) != len(pairs) or 50 not in pct or min(ordered) < 1 or ordered != sorted(ordered) \
                or not all(0 < k <= 100 for k in pct):
            raise ValueError
    except ValueError:
        raise PlanError(f"{flag} '{text}': expected a positive token count or percentiles like "
                        "'p50=1024,p90=4096,p99=8192' (p50 required, and p99 or above, e.g. p99.9 or p100 for the "
                        "longest; each percentile once, lengths not decreasing)") from None
    if max(pct) < 99:
        raise PlanError(f"{flag} '{text}': give p99 too: the longest length sizes --max-model-len, and the engine "
                        f"refuses longer requests (p{max(pct):g} would turn away {100 - max(pct):g} % of them)")
    return pct[50], pct[max(pct)]


RANK_BY = ("per-gpu", "total")


def workload_from(input_len: str, output_len: str, concurrency: Optional[int], request_rate: Optional[float],
                  ttft_ms: float, tpot_ms: float, prefix_hit_rate: float,
                  mtp_acceptance: float = MTP_ACCEPTANCE) -> Workload:
    inp, inp_max = parse_length(input_len, "--input-len")
    out, out_max = parse_length(output_len, "--output-len")
    if concurrency is not None and concurrency < 1:
        raise PlanError("--concurrency must be a positive number of requests")
    if not (0 < ttft_ms < inf and 0 < tpot_ms < inf):
        raise PlanError("--ttft-ms and --tpot-ms must be positive, finite milliseconds")
    if concurrency is not None and request_rate is not None:
        raise PlanError("give --concurrency or --request-rate, not both")
    if not 0 <= prefix_hit_rate < 1:
        raise PlanError("--prefix-hit-rate must be in [0, 1)")
    check_acceptance(mtp_acceptance)
    if request_rate is not None:
        if not 0 < request_rate < inf:
            raise PlanError("--request-rate must be positive (requests per second)")
        # Little's law: requests in flight = arrival rate x time in system (TTFT + output x TPOT at target)
        in_flight = request_rate * (ttft_ms + out * tpot_ms) / 1e3
        if not in_flight < 1e9:
            raise PlanError(f"--request-rate {request_rate:g}: implies more than a billion requests in flight")
        concurrency = concurrency or max(1, round(in_flight))
    return Workload(inp, out, inp_max, out_max, concurrency, request_rate, ttft_ms, tpot_ms, prefix_hit_rate,
                    mtp_acceptance)


def run_plan(model: str, topology: str, workload: Workload, engine: Optional[str], kv_cache_dtype: Optional[str],
             layouts: Optional[list[str]], calibration: Optional[Path],
             pinned: Overrides = Overrides(),
             rank_by: str = "per-gpu") -> tuple[Plan, SearchResult, tuple, MtpHint | None]:
    loaded, topo = load_model(model), load_topology(topology)
    check_context(loaded.spec, workload)
    calib = load_calibration(calibration, topo)
    if engine and engine not in ENGINES:
        raise PlanError(f"--engine must be one of {', '.join(ENGINES)}, got '{engine}'")
    kv = {"auto": None, None: None, "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8"}.get(kv_cache_dtype, "bad")
    if kv == "bad":
        raise PlanError(f"--kv-cache-dtype must be auto, bf16 or fp8 (fp8_e4m3), got '{kv_cache_dtype}'")
    chosen = [parse_layout(text, topo) for text in layouts] if layouts else None
    if chosen:
        problems = [(lay, layout_problems(lay, loaded.spec, topo.gpus_per_node, topo.total_gpus)) for lay in chosen]
        if all(p for _, p in problems):   # nothing the user asked for can exist: bad input, not "no fit"
            raise PlanError("; ".join(f"layout {lay.label}: {', '.join(p)}" for lay, p in problems))
    if pinned.block_size is not None and pinned.block_size < 1:
        raise PlanError("--block-size must be a positive number of tokens")
    check_mtp(loaded.spec, pinned.mtp)
    if rank_by not in RANK_BY:
        raise PlanError(f"--rank-by must be one of {', '.join(RANK_BY)}, got '{rank_by}'")
    result = search(loaded.spec, topo, workload, calib, (engine,) if engine else ENGINES, kv, chosen, pinned=pinned,
                    rank_by=rank_by, model_path=loaded.model_path or None)
    notes = tuple(calib.notes)
    hint = mtp_hint(loaded.spec, topo, result.options, workload, calib, pinned)
    notes += (hint.text,) if hint else ()
    return to_plan(loaded.spec, loaded.model_path, topo, workload, result), result, notes, hint


@guard
def plan_cmd(
    model: Annotated[Optional[str], Opt("--model", "-m", help="Built-in name, YAML spec, config.json or snapshot "
                                        f"folder (default: {DEFAULT_MODEL}).")] = None,
    topology: Annotated[Optional[str], Opt("--topology", "-t", help="Built-in topology or a topology YAML "
                                           f"(default: {DEFAULT_TOPOLOGY}).")] = None,
    input_len: Annotated[str, Opt("--input-len", help="Prompt tokens: '2048' or 'p50=1024,p99=8192'.")] = "2048",
    output_len: Annotated[str, Opt("--output-len", help="Output tokens: '512' or 'p50=256,p99=2048'.")] = "512",
    concurrency: Annotated[Optional[int], Opt("--concurrency", help="Requests in flight you expect "
                                                                   "(default: as many as the targets allow).")] = None,
    request_rate: Annotated[Optional[float], Opt("--request-rate", help=(
        "Arrivals per second. Little's law at the targets caps the requests in flight (and sizes max-num-seqs); "
        "the figures are at the model's own steady state, where in flight = rate x (TTFT + output x TPOT)."))] = None,
    ttft_ms: Annotated[float, Opt("--ttft-ms", help="Time-to-first-token target, ms (held by the p99 "
                                                     "prompt when --input-len gives percentiles).")] = 3000.0,
    tpot_ms: Annotated[float, Opt("--tpot-ms", help="Time-per-output-token target, ms (50 ms = 20 tok/s "
                                  "per user).")] = 50.0,
    prefix_hit_rate: Annotated[float, Opt("--prefix-hit-rate", help=(
        "Share of prompt tokens served from the prefix cache, 0..1: only the misses are prefilled, which cuts "
        "TTFT and the prefill chunks that stall decode (it can change the best layout); shared blocks are not "
        "counted as extra KV room."))] = 0.0,
    engine: Annotated[Optional[str], Opt("--engine", "-e",
        callback=lower_case, help="Only vllm or only sglang (default: both).")] = None,
    kv_cache_dtype: Annotated[str, Opt("--kv-cache-dtype", help="auto (search bf16 and fp8), bf16 or fp8.")]
    = "auto",
    rank_by: Annotated[str, Opt("--rank-by", callback=lower_case, help="Rank those meeting the targets by output "
                                "tokens/s per GPU "
                                "(per-gpu: the GPUs a layout leaves idle do not count against it) or in all "
                                "(total: the most from this cluster).")] = "per-gpu",
    layout: Annotated[Optional[list[str]], Opt("--layout", "-l", help="Restrict the search to these layouts, e.g. "
                                               "--layout tp=16 --layout tp=8,pp=2.")] = None,
    block_size: Annotated[Optional[int], Opt("--block-size", help="Pin the KV block / page size; backends that "
                                             "reject it are skipped (FlashMLA needs 64, CUTLASS MLA 128).")] = None,
    enforce_eager: Annotated[bool, Opt("--enforce-eager", help="Plan without CUDA graphs (priced, and warned "
                                       "about).")] = False,
    mtp: MtpOpt = False,
    mtp_acceptance: MtpAcceptanceOpt = MTP_ACCEPTANCE,
    top: Annotated[int, Opt("--top", help="Candidates to show.")] = 5,
    explain: Annotated[bool, Opt("--explain", help="Also list rejected layouts with one-line reasons.")] = False,
    as_json: JsonOpt = False,
    as_yaml: Annotated[bool, Opt("--yaml", help="Print the full plan as YAML.")] = False,
    plot: Annotated[Optional[Path], Opt("--plot", help="Write the Pareto plot as PNG (needs the plot extra: "
                                        "pip install 'mla-plan\\[plot]').")]
    = None,
    emit: Annotated[Optional[Path], Opt("--emit", help="Write launch scripts for the best candidate here.")] = None,
    calibration: Annotated[Optional[Path], Opt("--calibration", help="Efficiency factors measured by "
                                               "`mla-plan verify --write-calibration`.")] = None,
) -> None:
    """Search every layout of MODEL on TOPOLOGY, choose every launch knob, rank, explain.

    With no arguments: DeepSeek-V3 on the seed article's 2 x 8 H100 InfiniBand cluster.

    Exit status: 0 a candidate meets the targets; 1 none does (the closest are still shown, --emit writes nothing) or nothing fits; 2 bad input.

    Examples:

      mla-plan plan -m deepseek-r1 -t cluster.yaml --input-len p50=1024,p99=8192

      mla-plan plan -e sglang -l tp=16 -l tp=8,pp=2 --explain

      mla-plan plan --json > plan.json    (then: mla-plan emit --plan plan.json --out launch/)
    """  # noqa: E501
    is_default = model is None and topology is None
    model = DEFAULT_MODEL if model is None else model
    topology = DEFAULT_TOPOLOGY if topology is None else topology
    if top < 1:
        raise PlanError("--top must be at least 1")
    if as_json and as_yaml:
        raise PlanError("give --json or --yaml, not both")
    if plot is not None:
        check_output_file(plot, "--plot")
    if emit is not None and path_kind(emit) == "dir" and any(emit.iterdir()):
        raise PlanError(f"--emit {emit}: is not empty; choose an empty folder")
    if emit is not None and not str(emit).strip():
        raise PlanError("--emit: give a folder name")
    workload = workload_from(input_len, output_len, concurrency, request_rate, ttft_ms, tpot_ms, prefix_hit_rate,
                             mtp_acceptance)
    pinned = Overrides(block_size=block_size, cuda_graphs=not enforce_eager, mtp=mtp)
    plan, result, notes, hint = run_plan(model, topology, workload, engine, kv_cache_dtype, layout, calibration,
                                         pinned, rank_by)
    data = plan_to_dict(plan)
    data["notes"] = list(notes)
    if hint:
        data["mtp"] = hint.data
    data["rank_by"] = rank_by
    front = [result.points[i] for i in result.pareto]
    data["pareto"] = [{"candidate": p.option + 1, "batch_per_dp_rank": p.batch_per_dp_rank,
                       "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu, "tokens_per_s": p.tokens_per_s,
                       "tokens_per_s_per_user": p.tokens_per_s_per_user}
                      for p in front]
    if plot:
        _plot(plot, plan, result, rank_by)
        notes = (*notes, f"--plot: the Pareto plot is in {plot}")
        data["notes"] = list(notes)
    meets = meets_targets(plan)
    if emit and meets:
        from .launch import emit_plan
        from .cli_emit import warn_weightless
        emit_plan(plan, 1, plan.candidates[0].knobs.engine, emit)
        warn_weightless(plan.model_path)
    elif emit:
        notes = (*notes, f"--emit {emit}: nothing written, as no candidate meets the targets (`mla-plan emit "
                         "--plan` on a saved plan writes one anyway)")
        data["notes"] = list(notes)
    if not plan.candidates:
        from .plan import nothing_fits_advice
        data["nothing_fits"] = nothing_fits_advice(plan.spec, plan.topology, workload,
                                                   engine or default_engine(plan.spec, plan.topology.gpu))
    data["meets_targets"] = meets
    if as_json or as_yaml:
        print_json(data) if as_json else typer.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
    else:
        from .plan_render import render_plan
        render_plan(plan, result, top, explain, is_default,
                    emit if meets else None, notes, data.get("nothing_fits", []), rank_by)
    if not meets:
        raise typer.Exit(1)


def _plot(path: Path, plan: Plan, result: SearchResult, rank_by: str = "per-gpu") -> None:
    points = [(p.throughput(rank_by), p.tokens_per_s_per_user) for p in result.points]
    labels = []
    for p in result.points:
        c = plan.candidates[p.option]
        labels.append(f"#{p.option + 1} {c.layout.label} {c.knobs.engine} {c.knobs.kv_cache_dtype} "
                      f"B={p.batch_per_dp_rank}")
    png_plot(path, points, labels, result.pareto,
             "output tokens/s in all" if rank_by == "total" else "output tokens/s per GPU")


def reasons_summary(rejected: list[dict], limit: int = 5) -> list[str]:
    """One line per distinct reason, in the order they were found (the most telling first), with how
    many layout/engine/KV combinations it stopped and a few of their layouts."""
    by_reason: dict[str, list[str]] = {}
    for r in rejected:
        by_reason.setdefault(r["reason"], []).append(r["layout"])
    out = []
    for why, lays in list(by_reason.items())[:limit]:
        names = list(dict.fromkeys(lays))
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        out.append(f"{why} ({len(lays)} combination{'s' if len(lays) > 1 else ''}: {shown})")
    return out


def rejected_summary(rejected: list[dict], limit: int = 40) -> list[str]:
    """One line per distinct (layout, reason), most informative first, naming the engine/KV combinations
    it stopped (a layout can fail for different reasons under each)."""
    seen: dict[tuple, list[str]] = {}
    for r in rejected:
        combo = "any engine" if r["engine"] == "any" else f"{r['engine']} {r['kv_dtype']}"
        seen.setdefault((r["layout"], r["reason"]), []).append(combo)
    return [f"{lay} [{', '.join(dict.fromkeys(combos))}]: {why}" for (lay, why), combos in list(seen.items())[:limit]]
