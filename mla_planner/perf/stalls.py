"""How prefill chunks stall decode: which DP-attention ranks wait for each other, and how many chunk rounds
an average decode round carries (metrics.py prices the stall of each)."""

from __future__ import annotations

from math import ceil, exp, floor, lgamma, log, sqrt

from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec


def coupled_ranks(spec: ModelSpec, layout: Layout, batch: int = 0, workload: Workload | None = None) -> int:
    """DP-attention ranks that wait for each other every layer: they meet in the MoE (EP all-to-all or the
    DP gather/scatter), so a prefill chunk on one rank stalls them all (SGLang large-scale-EP blog, "DP
    Attention Imbalance"; vLLM DP+EP runs dummy batches to keep the ranks in step). Only ranks with
    requests prefill: with an offered concurrency below B x dp x replicas, ceil(concurrency per instance
    / B) of them."""
    if not spec.is_moe or layout.dp <= 1:
        return 1
    if workload is not None and workload.concurrency and batch:
        return max(1, min(layout.dp, ceil(workload.concurrency / layout.replicas / batch)))
    return layout.dp


def chunk_rounds_per_round(batch: int, chunks: int, rounds_per_request: float, ranks: int,
                           others_only: bool = False) -> float:
    """Expected prefill-chunk rounds a decode round carries, for stalls. One DP rank: each of its B requests
    needs `chunks` chunk rounds per `rounds_per_request` decode rounds (output_len, or output_len / the
    tokens a step gains with MTP), q = B x chunks / rounds_per_request (stalls add up): the engine's view,
    which sets throughput. A request's own prefill comes before its first token (TTFT), so what stretches its
    time per output token are the other requests' chunks: with `others_only`, its own rank contributes
    (B - 1) x chunks / rounds_per_request (0 for a request alone). Coupled ranks: their chunks in
    the same round overlap, so the round is stalled by the rank with the most; with chunk arrivals per rank
    Poisson, that is E[max] = sum_k (1 - F_own(k) x F(k)^(ranks - 1)). The sum starts 12 standard deviations
    below the smaller mean (every term before is 1 to within e^-72) with the pmfs in log space, so a large
    q neither underflows nor loops long."""
    per = max(rounds_per_request, 1.0)
    q = batch * chunks / per
    q_own = max(batch - 1, 0) * chunks / per if others_only else q
    if ranks <= 1 or q <= 0:
        return q_own
    k = max(0, floor(q_own - 12.0 * sqrt(q_own) - 30.0))
    top = q + 12.0 * sqrt(q) + 30.0

    def pmf_at(mean: float) -> float:
        return exp(-mean + k * log(mean) - lgamma(k + 1)) if mean > 0 else float(k == 0)

    pmf_own, pmf = pmf_at(q_own), pmf_at(q)
    total, cdf_own, cdf = float(k), pmf_own, pmf
    while k <= top:
        tail = 1.0 - cdf_own * cdf ** (ranks - 1)
        if tail < 1e-12 and k >= q:
            break
        total += tail
        k += 1
        pmf_own, pmf = (pmf_own * q_own / k if q_own > 0 else 0.0), pmf * q / k
        cdf_own, cdf = cdf_own + pmf_own, cdf + pmf
    return total
