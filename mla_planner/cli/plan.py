"""`mla-plan plan`: search every layout, choose the launch knobs, rank, explain. Parse, call, render."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import click

from mla_planner.engines.backends import default_engine
from mla_planner.cli.params import Opt
from mla_planner.cli.common import (DEFAULT_MODEL, DEFAULT_TOPOLOGY, ImagesOpt, JsonOpt, MtpAcceptanceOpt,
                                    MtpDraftOpt, MtpOpt, check_draft_tokens, check_output_file, guard, print_json,
                                    lower_case)
from mla_planner.cli.common import warn_weightless
from mla_planner.cli.options import bounded, workload_from
from mla_planner.cli.plan_render import render_plan
from mla_planner.cli.planning import run_plan
from mla_planner.core.errors import PlanError
from mla_planner.core.files import dump_yaml, path_kind, user_path
from mla_planner.launch.disagg_folder import emit_disaggregated
from mla_planner.launch.emit import emit_plan
from mla_planner.search.pareto import png_plot
from mla_planner.search.plan import nothing_fits_advice
from mla_planner.search.planfile import Plan, meets_targets, plan_to_dict
from mla_planner.search.run import SearchResult
from mla_planner.search.tuning import Overrides
from mla_planner.specs.knobs import MTP_ACCEPTANCE

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
        "the figures are at the model's own steady state, where in flight = rate x (TTFT + output x TPOT), the TTFT "
        "less the part of it outside the engine."))] = None,
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
    mtp_draft_tokens: MtpDraftOpt = None,
    mtp_acceptance: MtpAcceptanceOpt = MTP_ACCEPTANCE,
    images: ImagesOpt = False,
    redundant_experts: Annotated[int, Opt("--redundant-experts", help=(
        "EPLB: this many extra physical copies of routed experts per MoE layer on every layout with expert "
        "parallelism (the large-scale EP recipes run 32), their weights counted and the engines' flags emitted "
        "(SGLang --enable-eplb --ep-num-redundant-experts, vLLM --enable-eplb --eplb-config); the experts' load is "
        "priced as balanced either way."))] = 0,
    no_disagg: Annotated[bool, Opt("--no-disagg", help=(
        "Skip the disaggregated search: prefill and decode pools of whole nodes, the KV cache sent between them "
        "over RDMA (it runs on 2+ nodes joined by InfiniBand or RoCE, unless --layout pins the layouts)."))] = False,
    top: Annotated[int, Opt("--top", help="Candidates to show.")] = 5,
    explain: Annotated[bool, Opt("--explain", help="Also list rejected layouts with one-line reasons.")] = False,
    as_json: JsonOpt = False,
    as_yaml: Annotated[bool, Opt("--yaml", help="Print the full plan as YAML.")] = False,
    plot: Annotated[Optional[Path], Opt("--plot", help="Write the Pareto plot as PNG (needs the plot extra: "
                                        "pip install 'mla-plan[plot]').")]
    = None,
    emit: Annotated[Optional[Path], Opt("--emit", help="Write launch scripts for the best candidate here (the "
                                        "disaggregated D1 where it wins).")] = None,
    calibration: Annotated[Optional[Path], Opt("--calibration", help="Efficiency factors measured by "
                                               "`mla-plan verify --write-calibration`.")] = None,
) -> None:
    """Search every layout of MODEL on TOPOLOGY, choose every launch knob, rank, explain.

    With no arguments: DeepSeek-V3 on the seed article's 2 x 8 H100 InfiniBand cluster.

    On 2 or more nodes joined by RDMA it also plans disaggregated serving (prefill and decode pools of whole nodes)
    and says whether aggregated or disaggregated serving wins, and why.

    Exit status: 0 a candidate (aggregated or disaggregated) meets the targets; 1 none does (the closest are still shown, --emit writes nothing) or nothing fits; 2 bad input.

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
    plot, emit = (user_path(str(p)) if p is not None else None for p in (plot, emit))   # `~/x` quoted means home
    if plot is not None:
        check_output_file(plot, "--plot")
    if emit is not None and path_kind(emit) == "dir" and any(emit.iterdir()):
        raise PlanError(f"--emit {emit}: is not empty; choose an empty folder")
    if emit is not None and not str(emit).strip():
        raise PlanError("--emit: give a folder name")
    workload = workload_from(input_len, output_len, concurrency, request_rate, ttft_ms, tpot_ms, prefix_hit_rate,
                             mtp_acceptance)
    check_draft_tokens(mtp_draft_tokens, mtp)
    if not 0 <= redundant_experts <= 4096:
        raise PlanError(f"--redundant-experts must be 0 to 4,096 per MoE layer, got {redundant_experts}")
    pinned = Overrides(block_size=bounded("--block-size", block_size), cuda_graphs=not enforce_eager, mtp=mtp,
                       mtp_draft_tokens=mtp_draft_tokens,
                       images=images, redundant_experts=redundant_experts)
    plan, result, notes, hint = run_plan(model, topology, workload, engine, kv_cache_dtype, layout, calibration,
                                         pinned, rank_by, not no_disagg)
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
    disagg_meets = bool(plan.disaggregated and plan.disaggregated[0].performance.meets_targets)
    disagg_wins = disagg_meets and (plan.choice or {}).get("winner") == "disaggregated"
    if emit and disagg_wins:
        emit_disaggregated(plan, 1, emit)
        warn_weightless(plan.model_path)
        notes = (*notes, f"--emit {emit}: the launch folder of D1, the disaggregated deployment that wins here "
                         "(its README.md says what to start where; `mla-plan emit --plan` writes any other)")
        data["notes"] = list(notes)
    elif emit and meets:
        emit_plan(plan, 1, plan.candidates[0].knobs.engine, emit)
        warn_weightless(plan.model_path)
    elif emit:
        notes = (*notes, f"--emit {emit}: nothing written, as no candidate meets the targets (`mla-plan emit "
                         "--plan` on a saved plan writes one anyway)")
        data["notes"] = list(notes)
    if not plan.candidates:
        data["nothing_fits"] = nothing_fits_advice(plan.spec, plan.topology, workload,
                                                   engine or default_engine(plan.spec, plan.topology.gpu))
    data["meets_targets"] = meets or disagg_meets
    if as_json or as_yaml:
        print_json(data) if as_json else click.echo(dump_yaml(data), nl=False)
    else:
        render_plan(plan, result, top, explain, is_default,
                    emit if meets and not disagg_wins else None, notes, data.get("nothing_fits", []), rank_by)
    if not (meets or disagg_meets):
        raise SystemExit(1)


def _plot(path: Path, plan: Plan, result: SearchResult, rank_by: str = "per-gpu") -> None:
    points = [(p.throughput(rank_by), p.tokens_per_s_per_user) for p in result.points]
    labels = []
    for p in result.points:
        c = plan.candidates[p.option]
        labels.append(f"#{p.option + 1} {c.layout.label} {c.knobs.engine} {c.knobs.kv_cache_dtype} "
                      f"B={p.batch_per_dp_rank}")
    png_plot(path, points, labels, result.pareto,
             "output tokens/s in all" if rank_by == "total" else "output tokens/s per GPU")


