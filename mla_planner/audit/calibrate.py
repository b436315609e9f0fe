"""Calibration from what users measure: bench.sh's results at two or more concurrencies (read by
audit/bench_results.py), fitted to the step model. A file from another model, GPU or engine than the plan's candidate
is refused. Each run is priced as the server runs it: bench.sh's in-flight requests split among the replicas it names
behind its endpoint, spread over each one's DP ranks, at most the launched max_num_seqs on each.

Two factors explain how mean TPOT moves with the batch and are fitted: a per-step fixed cost (the kernel launch
gap under CUDA graphs, `graph_kernel_overhead_s`, which stands in for the engine's host overhead, the same per step;
or without them the host time each layer costs, `eager_layer_host_s`) and the routed experts' weight streaming
(`moe_hbm_efficiency`, or `int4_moe_hbm_efficiency` for int4 weight-only experts, whose cost grows with the experts
a batch touches). Each is searched in log space within
its bounds, by the Nelder-Mead simplex on the mean squared log error of the predicted TPOT; the fitted error is
reported with the factors. Where the results carry a mean TTFT (both engines' write `mean_ttft_ms`), the part of it
outside the forwards (`ttft_host_s`, a constant per request the TTFT adds) is measured less predicted without it at
the lowest concurrency (as data/efficiency.yaml's default was set), each run's TTFT priced as the benchmark runs it:
its first wave of prompts at once, then the steady state (perf/closed_loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import ceil, exp, log, sqrt

from mla_planner.audit.bench_results import BenchRun
from mla_planner.core.errors import PlanError
from mla_planner.launch.command import REPLICAS_TAG
from mla_planner.launch.sglang import server_totals
from mla_planner.memory.ways_out import fraction_knobs
from mla_planner.perf.closed_loop import closed_loop_mean_ttft_s, first_wave
from mla_planner.perf.layer_work import Op, tensor_precision
from mla_planner.perf.metrics import evaluate
from mla_planner.search.planfile import Candidate, Plan
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Workload

BOUNDS = {"moe_hbm_efficiency": (0.1, 1.0), "int4_moe_hbm_efficiency": (0.1, 1.0),
          "graph_kernel_overhead_s": (0.2e-6, 200e-6), "eager_layer_host_s": (1e-5, 2e-2), "ttft_host_s": (1e-4, 1.0)}
STEP = 0.3              # the starting simplex: each factor 35 % above its current value (log space)
TOLERANCE = 1e-5        # stop when the simplex is this small (log space: 0.001 % of each factor)
MAX_ITERATIONS = 300
MAX_FIT_LOG_ERROR = 0.35    # a fit whose typical error (rms log) stays above this explains nothing: not written
FALLING = 0.8               # a TPOT below 0.8x the one at a lower load is not the batch's doing (a cold first run?)


@dataclass(frozen=True)
class Fit:
    factors: dict[str, float]
    runs: list[BenchRun]
    before_s: list[float]       # predicted mean TPOT per run with the factors the plan used
    after_s: list[float]        # ... and with the fitted ones
    rms_log_error: float        # of the fit (exp(x) - 1 ~ the typical relative error)
    notes: list[str]
    ttft_after_s: list = field(default_factory=list)   # predicted mean TTFT per run with the fitted factors (None:
                                                       # the result gives no TTFT)


def check_runs(runs: list[BenchRun], plan: Plan, cand: Candidate) -> list[str]:
    """Refuse results from another engine, model or GPU; notes for what a result does not say."""
    notes = []
    for r in runs:
        if r.engine != cand.knobs.engine:
            raise PlanError(f"{r.path}: a {r.engine} benchmark, but the candidate runs {cand.knobs.engine}")
        if r.model is not None and not same_model(r.model, plan.model_path):
            raise PlanError(f"{r.path}: benchmarks {r.model}, but the plan serves {plan.model_path}")
        if r.gpu is not None and r.gpu != plan.topology.gpu.name:
            raise PlanError(f"{r.path}: measured on {r.gpu}, but the plan's GPU is {plan.topology.gpu.name}")
        if r.gpu is None:
            notes.append(f"{r.path} does not name its GPU (bench.sh of an older mla-plan?): taken as "
                         f"{plan.topology.gpu.name}")
        notes += _load_notes(r, cand)
    if len({running_per_dp_rank(cand, r.concurrency) for r in runs}) < 2:
        raise PlanError("calibrate needs results at two or more concurrencies (CONCURRENCY=N ./bench.sh) that run "
                        "different batches on the server (not both above its max_num_seqs)")
    return notes


def same_model(served: str, planned: str) -> bool:
    """Whether the benchmark's model is the plan's: the same id or folder, or a local copy of it (a path whose last
    name is the id's: `/models/DeepSeek-V3` for deepseek-ai/DeepSeek-V3), case aside."""
    a, b = served.rstrip("/").lower(), planned.rstrip("/").lower()
    local = any(x.startswith(("/", "./", "../", "~")) for x in (a, b))
    return a == b or (local and a.rsplit("/", 1)[-1] == b.rsplit("/", 1)[-1])


def _load_notes(r: BenchRun, cand: Candidate) -> list[str]:
    """What a run's load says of it: refused where most requests failed or it names more replicas than the candidate
    runs; a note where some failed, where a balancer split it, or where it does not say and the candidate has
    several replicas (each 'in flight' below is then per replica)."""
    shared = r.replicas or 1
    if r.failed and r.failed >= r.completed:
        raise PlanError(f"{r.path}: {r.failed:,} of its requests failed and {r.completed:,} completed: "
                        "the server did not serve this benchmark; see its log (`mla-plan check-log`)")
    if shared > cand.layout.replicas:
        raise PlanError(f"{r.path}: ran through {r.replicas} replicas ({REPLICAS_TAG}), but the candidate runs "
                        f"{cand.layout.replicas}")
    notes = [f"{r.path}: {r.failed:,} requests failed; the TPOT is the completed ones'"] if r.failed else []
    if shared > 1:
        notes.append(f"{r.path} ran through a balancer in front of {r.replicas} replicas: priced as {r.concurrency:,} "
                     "in flight on each")
    elif r.replicas is None and cand.layout.replicas > 1:
        notes.append(f"{r.path} is taken as one replica's load (no {REPLICAS_TAG}: bench.sh of an older mla-plan, "
                     f"or its own server); through a balancer, run bench.sh with REPLICAS={cand.layout.replicas}")
    return notes


def running_per_dp_rank(cand: Candidate, concurrency: int) -> int:
    """Requests one DP rank runs when bench.sh keeps `concurrency` in flight against the server (one replica): the
    server spreads them over its DP ranks and runs at most the launched max_num_seqs on each (the rest queue)."""
    return min(ceil(concurrency / cand.layout.dp), cand.knobs.max_num_seqs)


def _setting(plan: Plan, cand: Candidate, run: BenchRun):
    """(layout, workload, knobs) of one replica with `run.concurrency` requests of the run's lengths in flight, the
    candidate's knobs and the plan's MTP acceptance."""
    layout = replace(cand.layout, replicas=1)
    workload = Workload(input_len=run.input_len, output_len=run.output_len, tpot_ms=1e6, ttft_ms=1e9,
                        mtp_acceptance=plan.workload.mtp_acceptance)
    knobs = replace(cand.knobs, max_num_seqs=running_per_dp_rank(cand, run.concurrency),
                    max_num_batched_tokens=max(cand.knobs.max_num_batched_tokens, cand.knobs.max_num_seqs),
                    max_model_len=max(cand.knobs.max_model_len, workload.max_context_len))
    knobs, _ = fraction_knobs(plan.spec, plan.topology, layout, knobs, knobs.memory_fraction)
    return layout, workload, knobs


def predicted_tpot_s(plan: Plan, cand: Candidate, run: BenchRun, calib: Calibration) -> float:
    """Mean TPOT of the run (`_setting`)."""
    layout, workload, knobs = _setting(plan, cand, run)
    return evaluate(plan.spec, plan.topology, layout, knobs, workload, calib).tpot_s


def predicted_ttft_s(plan: Plan, cand: Candidate, run: BenchRun, calib: Calibration) -> float:
    """Mean TTFT of the run as the benchmark measures it: its first `concurrency` prompts at once, packed into
    forwards of the server's token budget, then the steady state's TTFT (perf/closed_loop.py)."""
    layout, workload, knobs = _setting(plan, cand, run)
    m = evaluate(plan.spec, plan.topology, layout, knobs, workload, calib)
    flag = server_totals(layout, knobs)[1] if knobs.engine == "sglang" else knobs.max_num_batched_tokens  # the flag
    wave = first_wave(plan.spec, plan.topology, layout, knobs, workload, calib, run.concurrency, flag)
    return closed_loop_mean_ttft_s(m.ttft_s, wave, run.concurrency, max(run.prompts, run.concurrency))


def falling_notes(runs: list[BenchRun]) -> list[str]:
    """Runs whose mean TPOT falls well below a run's at a lower load: a bigger batch never decodes faster, so one of
    the two was not measured as the other (a cold first run with its JIT and graph capture, another server)."""
    by_load = sorted(runs, key=lambda r: r.concurrency)
    return [f"mean TPOT falls as the load rises ({a.mean_tpot_s * 1e3:.1f} ms at {a.concurrency:,} in flight, "
            f"{b.mean_tpot_s * 1e3:.1f} ms at {b.concurrency:,}): was {a.path} a cold first run? rerun it after a "
            "warm-up" for a, b in zip(by_load, by_load[1:])
            if b.concurrency > a.concurrency and b.mean_tpot_s < FALLING * a.mean_tpot_s]


def _loss(plan, cand, runs, calib) -> float:
    errors = [log(predicted_tpot_s(plan, cand, r, calib) / r.mean_tpot_s) for r in runs]
    return sum(e * e for e in errors) / len(errors)


def _moves_nothing(plan, cand, runs, calib, name: str, before: list[float]) -> bool:
    """Whether changing factor `name` by the simplex's first step leaves every run's predicted TPOT where it was
    (a host-bound eager step hides the GPU's work): such a factor is not fitted, as the runs say nothing of it."""
    moved = replace(calib, **{name: getattr(calib, name) * exp(STEP)})
    return all(abs(predicted_tpot_s(plan, cand, r, moved) / b - 1) < 1e-9 for r, b in zip(runs, before))


def _nelder_mead(f, start: list[float], lows: list[float], highs: list[float]) -> list[float]:
    """The minimiser of f over the box [lows, highs] (log space), by the Nelder-Mead simplex (reflection 1,
    expansion 2, contraction and shrink 1/2), each trial point clipped into the box."""
    clip = (lambda x: [min(max(v, lo), hi) for v, lo, hi in zip(x, lows, highs)])
    simplex = [start] + [clip([v + (STEP if i == j else 0.0) for j, v in enumerate(start)]) for i in range(len(start))]
    values = [f(x) for x in simplex]
    for _ in range(MAX_ITERATIONS):
        order = sorted(range(len(simplex)), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if max(abs(a - b) for x in simplex[1:] for a, b in zip(x, simplex[0])) < TOLERANCE:
            break
        centre = [sum(x[j] for x in simplex[:-1]) / (len(simplex) - 1) for j in range(len(start))]
        worst = simplex[-1]
        trial = (lambda t: clip([c + t * (c - w) for c, w in zip(centre, worst)]))
        reflected = trial(1.0)
        fr = f(reflected)
        if fr < values[0]:
            expanded = trial(2.0)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = trial(-0.5)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                simplex = [simplex[0]] + [[(a + b) / 2 for a, b in zip(simplex[0], x)] for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[min(range(len(simplex)), key=values.__getitem__)]


def fit(plan: Plan, cand: Candidate, runs: list[BenchRun], calib: Calibration) -> Fit:
    notes = check_runs(runs, plan, cand)
    experts = Op("moe.experts", 0.0, 0.0, "moe", tensor_precision(plan.spec.expert_dtype))   # as the step prices them
    names = ("graph_kernel_overhead_s" if cand.knobs.cuda_graphs else "eager_layer_host_s",) + \
        ((experts.hbm_factor,) if plan.spec.is_moe else ())
    before = [predicted_tpot_s(plan, cand, r, calib) for r in runs]
    flat = [n for n in names if _moves_nothing(plan, cand, runs, calib, n, before)]
    names = tuple(n for n in names if n not in flat)
    notes += [f"{n} does not move the predicted TPOT of these runs (a host-bound step hides it): not fitted, not "
              "written" for n in flat]
    if not names:
        raise PlanError("calibrate: no factor the step model fits moves the predicted TPOT of these runs")
    if len(runs) <= len(names):
        notes.append(f"{len(runs)} results fix {len(names)} factors exactly: the fitted error says nothing until "
                     "another result is added")
    start = [log(min(max(getattr(calib, n), BOUNDS[n][0]), BOUNDS[n][1])) for n in names]
    best = _nelder_mead(lambda x: _loss(plan, cand, runs, replace(calib, **{n: exp(v) for n, v in zip(names, x)})),
                        start, [log(BOUNDS[n][0]) for n in names], [log(BOUNDS[n][1]) for n in names])
    current = {n: exp(v) for n, v in zip(names, best)}
    fitted = replace(calib, **current)
    after = [predicted_tpot_s(plan, cand, r, fitted) for r in runs]
    rms = sqrt(sum(log(a / r.mean_tpot_s) ** 2 for a, r in zip(after, runs)) / len(runs))
    timed = [r for r in runs if r.mean_ttft_s]
    if timed:   # every predicted TTFT adds ttft_host_s: it is the gap without it at the lowest load, where the
        low = min(r.concurrency for r in timed)         # queueing a loaded server adds (priced in part) is least
        lowest = [r for r in timed if r.concurrency == low]
        bare = replace(fitted, ttft_host_s=0.0)
        gap = sum(r.mean_ttft_s - predicted_ttft_s(plan, cand, r, bare) for r in lowest) / len(lowest)
        current["ttft_host_s"] = min(max(gap, BOUNDS["ttft_host_s"][0]), BOUNDS["ttft_host_s"][1])
        notes.append(f"ttft_host_s from the run(s) at {low} in flight, the lowest load (the part of a TTFT outside "
                     "the forwards; higher loads add queueing the model prices only in part)")
    for name, value in current.items():
        if min(abs(log(value / b)) for b in BOUNDS[name]) < 0.01:
            notes.append(f"{name} ended at its bound {value:.3g}: the results are not explained within the "
                         "factors' physical range (another cause: network, scheduler, a different engine build?)")
    notes += falling_notes(runs)
    final = replace(calib, **current)
    ttft_after = [predicted_ttft_s(plan, cand, r, final) if r.mean_ttft_s else None for r in runs]
    return Fit(dict(current), runs, before, after, rms, notes, ttft_after)
