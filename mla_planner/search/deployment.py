"""Aggregated or disaggregated: a disaggregated search result as the plan records it (its figures and the reasons
for each pool), and which kind of deployment wins on this cluster and workload, and why.

The two kinds are ranked by the same measure as the aggregated candidates (search/ranking.py): those meeting the
targets first, then output tokens/s per GPU (or in all). A lead inside the bands is a tie, as between aggregated
candidates: the bands overlap when the leader's pessimistic end is below the other's optimistic end.
"""

from __future__ import annotations

from dataclasses import dataclass

from mla_planner.core.errors import PlanError
from mla_planner.core.units import GiB
from mla_planner.search.candidate import DisaggCandidate, DisaggPerformance
from mla_planner.search.disagg import CROSSOVER_NODES, Disaggregated
from mla_planner.search.ranking import band_warnings
from mla_planner.specs.knobs import Workload

LIMITS = {"tpot": "the TPOT target", "kv": "its KV pool", "max_num_seqs": "max-num-seqs",
          "deepep_dispatch": "DeepEP's low-latency dispatch buffer", "cuda_graphs": "the CUDA-graph capture range",
          "concurrency": "the offered concurrency", "max_num_batched_tokens": "the step's token budget"}


def record(x: Disaggregated, workload: Workload) -> DisaggCandidate:
    """The plan's record of a disaggregated deployment: figures with their bands, and a reason per part."""
    s, p, t, d = x.split, x.prefill_rate, x.transfer, x.decode_rate
    figures = DisaggPerformance(
        gpus=s.gpus, requests_per_s=s.requests_per_s,
        throughput_tokens_per_s=s.throughput_tokens_per_s,
        throughput_tokens_per_s_per_gpu=s.throughput_tokens_per_s_per_gpu, tpot_s=s.tpot_s, ttft_s=s.ttft_s,
        ttft_longest_s=s.ttft_longest_s,
        queue_s=s.queue_s, prefill_s=p.lone_s, transfer_s=t.exposed_s, first_step_s=d.step.step_s, host_s=p.host_s,
        transfer_bytes_per_request=t.bytes_per_request, prefill_tokens_per_s_per_instance=p.tokens_per_s,
        prefill_utilization=s.prefill_utilization, decode_utilization=s.decode_utilization,
        decode_batch_per_dp_rank=d.batch_per_dp_rank, decode_limit=d.limit,
        decode_kv_capacity_tokens=d.kv_capacity_tokens, prefill_kv_capacity_tokens=p.kv_capacity_tokens,
        binding=s.binding, meets_targets=s.meets_targets,
        **x.bands)
    warnings = band_warnings(workload, s.tpot_s, figures.tpot_s_low, figures.tpot_s_high, s.ttft_longest_s,
                             figures.ttft_s_high * s.ttft_longest_s / s.ttft_s if s.ttft_s else 0.0) \
        if s.meets_targets else []
    return DisaggCandidate(x.prefill, x.decode, figures, reasons(x, workload), warnings)


def reasons(x: Disaggregated, workload: Workload) -> list[str]:
    """One line per part: each pool's layout and what it does, the transfer, the split and TTFT's parts."""
    s, p, t, d = x.split, x.prefill_rate, x.transfer, x.decode_rate
    pre, dec = x.prefill, x.decode
    nodes = lambda pool: f"{pool.nodes_per_instance} node" + ("s" if pool.nodes_per_instance > 1 else "")  # noqa: E731
    packed = (f"{p.prompts_per_forward} prompts of {p.prompt_tokens:,} tokens per forward per DP rank"
              if p.prompts_per_forward > 1 else f"one {p.prompt_tokens:,}-token prompt at a time per DP rank")
    out = [f"prefill: {pre.layout.label} over {nodes(pre)} per instance: {p.tokens_per_s:,.0f} prompt tokens/s at "
           f"full load ({packed}, a {pre.knobs.max_num_batched_tokens:,}-token budget); a lone prompt takes "
           f"{p.lone_s * 1e3:,.0f} ms",
           f"decode: {dec.layout.label} over {nodes(dec)} per instance: {d.batch_per_dp_rank} requests per DP rank at "
           f"{d.step.tpot_s * 1e3:.1f} ms per token, limited by {LIMITS.get(d.limit, d.limit)}; no prefill chunk "
           "stalls its steps",
           f"transfer: {t.bytes_per_request / GiB:.2f} GiB of KV per request ({t.bytes_per_gpu / GiB:.2f} GiB to each "
           f"of the {dec.layout.tp} receiving GPUs) in {t.seconds * 1e3:.1f} ms; TTFT waits for "
           f"{t.exposed_s * 1e3:.1f} ms of it"
           + (" (sent chunk by chunk as the prefill runs)" if t.exposed_s < t.seconds else ""),
           f"split {pre.instances}:{dec.instances} (prefill:decode instances, {pre.gpus}:{dec.gpus} GPUs): {s.requests_per_s:,.2f} "
           f"requests/s; the prefill pool is busy {s.prefill_utilization:.0%}, the decode pool "
           f"{s.decode_utilization:.0%}; " + _binding(x, workload),
           f"TTFT {s.ttft_s * 1e3:,.0f} ms = queue {s.queue_s * 1e3:,.0f} + prefill {p.lone_s * 1e3:,.0f} + transfer "
           f"{t.exposed_s * 1e3:,.1f} + first decode step {d.step.step_s * 1e3:,.1f} + outside the engines "
           f"{p.host_s * 1e3:,.0f} ms"
           + (f"; the p99 prompt's {s.ttft_longest_s * 1e3:,.0f} ms, held to the target"
              if s.ttft_longest_s > s.ttft_s + 1e-9 else "")]
    return out


def _binding(x: Disaggregated, workload: Workload) -> str:
    s = x.split
    if s.overload:
        return f"the offered {workload.request_rate_per_s:g} requests/s exceed what both pools serve"
    if s.binding == "decode":
        return "the decode pool sets the rate (more decode nodes would raise it)"
    if s.binding == "prefill":
        return "the prefill pool sets the rate: its queue would push TTFT past the target (more prefill nodes would " \
               "raise it)"
    return "both pools keep up with the offered rate"


@dataclass(frozen=True)
class Choice:
    """Which kind wins: `winner` "aggregated" or "disaggregated" (or "" when neither has a candidate), whether the
    lead is inside the bands (`tie`), and why."""
    winner: str
    tie: bool
    why: str


def choose(best_aggregated, stall_share: float, best_disaggregated: DisaggCandidate | None,
           rank_by: str = "per-gpu", twin: tuple | None = None, crossover: tuple | None = None) -> Choice:
    """Aggregated candidate #1 (a planfile.Candidate, or None) against disaggregated D1, by the ranking's
    measure; a lead inside the bands is a tie (module docstring). `stall_share`: the part of #1's mean time per
    output token spent on other requests' prefill chunks (`stall_share`). `twin`: (rank, candidate) of the aggregated
    candidate that runs D1's decode layout (same engine, instance shape), to say what prefill stalls cost it.
    `crossover`: (the fewest nodes on which disaggregated serving wins, or None; the cluster's nodes)
    (search.disagg.crossover_nodes)."""
    key = "throughput_tokens_per_s" if rank_by == "total" else "throughput_tokens_per_s_per_gpu"
    unit = "output tokens/s in all" if rank_by == "total" else "output tokens/s per GPU"
    a = best_aggregated.performance if best_aggregated else None
    d = best_disaggregated.performance if best_disaggregated else None
    if a is None and d is None:
        return Choice("", False, "")
    if d is None:
        return Choice("aggregated", False, "no disaggregated deployment fits this cluster")
    if a is None:
        return Choice("disaggregated", False, "no aggregated layout fits this cluster")
    if bool(a.meets_targets) != bool(d.meets_targets):
        winner = "aggregated" if a.meets_targets else "disaggregated"
        return Choice(winner, False, f"only the {winner} deployment meets the targets")
    va, vd = getattr(a, key), getattr(d, key)
    winner = "aggregated" if va >= vd else "disaggregated"
    lead, other = (a, d) if winner == "aggregated" else (d, a)
    tie = bool(a.meets_targets) and getattr(lead, key + "_low") <= getattr(other, key + "_high")
    why = (f"#1 {best_aggregated.layout.label} ({best_aggregated.knobs.engine}) serves {va:,.0f} {unit}, "
           f"D1 {best_disaggregated.label} {vd:,.0f}")
    if winner == "disaggregated":
        why += (f": D1's decode pool runs {d.decode_batch_per_dp_rank} requests per DP rank with no prefill chunk in "
                f"its steps, where #1's mean TPOT carries other requests' prefill chunks ({stall_share:.0%} of "
                f"its time per token)")
        if twin and twin[0] != 1:
            rank, cand = twin
            why += (f"; aggregated, D1's decode layout (#{rank} {cand.layout.label}) serves "
                    f"{getattr(cand.performance, key):,.0f}: with DP attention every prompt chunk on one rank stalls "
                    "the ranks its MoE all-to-all couples")
    elif d.binding in ("decode", "prefill"):
        other, busy = ("prefill", d.prefill_utilization) if d.binding == "decode" else ("decode", d.decode_utilization)
        why += (f": with {best_disaggregated.prefill.gpus + best_disaggregated.decode.gpus} GPUs split "
                f"{best_disaggregated.ratio}, D1's {d.binding} pool sets its rate while its {other} pool is busy "
                f"{busy:.0%}" + (": the split cannot balance the pools at this size (more nodes, longer prompts or "
                                 "a tighter TPOT favour disaggregation)" if busy < 0.8 else
                                 ": both pools are busy, and aggregated serving still does more per GPU here"))
    else:
        why += f": D1 serves what is offered ({d.binding}), aggregated serving does so on fewer GPUs' worth"
    if crossover and rank_by != "total":
        why += "; " + _crossover_words(*crossover)
    if tie:
        why += "; the lead is inside the bands (a tie: `mla-plan validate` has the model's errors)"
    return Choice(winner, tie, why)


def _crossover_words(nodes: int | None, here: int) -> str:
    """Where the verdict turns with the node count (per GPU, aggregated serving scales by replicas)."""
    if nodes is None:
        return (f"with this cluster's instance shapes disaggregated serving does not overtake up to "
                f"{CROSSOVER_NODES * here} nodes of this kind")
    if nodes > here:
        return f"with this cluster's instance shapes disaggregated serving overtakes from {nodes} nodes of this kind"
    return f"with this cluster's instance shapes disaggregated serving wins from {nodes} nodes of this kind up"


def decode_twin(candidates: list, d: DisaggCandidate) -> tuple | None:
    """(rank, candidate) of the best aggregated candidate running D1's decode instance (same engine and tp, dp, ep,
    no PP or DCP), or None."""
    shape = d.decode.layout
    for rank, c in enumerate(candidates, 1):
        L = c.layout
        if c.knobs.engine == d.engine and (L.tp, L.dp, L.ep, L.pp, L.dcp) == (shape.tp, shape.dp, shape.ep, 1, 1):
            return rank, c
    return None


def stall_share(metrics) -> float:
    """The part of an aggregated candidate's mean time per output token spent outside its decode round: other
    requests' prefill chunks (perf.metrics.Metrics: mean TPOT against the decode step's own at the same batch)."""
    if not metrics.tpot_s:
        return 0.0
    return max(0.0, 1.0 - metrics.decode.tpot_s / metrics.tpot_s)


def pick_disaggregated(plan, index: int, where: str) -> DisaggCandidate:
    """Disaggregated deployment `index` of a plan (search.planfile.Plan), 1-based as its table numbers them (D1, D2,
    ...)."""
    if not plan.disaggregated:
        raise PlanError(f"{where}: the plan has no disaggregated deployment (one needs 2+ nodes joined by RDMA and "
                        "pools that fit them, and a plan made with --no-disagg or --layout lists none; its notes say "
                        "why)")
    if not 1 <= index <= len(plan.disaggregated):
        raise PlanError(f"{where}: --disaggregated {index} is out of range 1..{len(plan.disaggregated)}")
    return plan.disaggregated[index - 1]
