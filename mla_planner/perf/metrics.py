"""The seed article's five metrics, computed for a layout + knobs + workload (plus TTFT).

  concurrency         requests in flight the deployment sustains: per DP rank the largest batch B with
                      B x (tokens a request holds on average) <= the KV pool (memory.py, the engine's own
                      accounting), B <= max_num_seqs, and mean time per output token <= the TPOT target
                      and TTFT (its queue behind other prompts included: perf.request_times.first_token_s)
                      <= the TTFT target;
                      x dp x replicas. A request holds input + output/2 tokens on average over its decode
                      (Workload.mean_decode_context), rounded up to whole KV blocks. Under an arrival
                      rate it is what runs at the steady state (operating_batch, Little's law with the
                      predicted latencies), and that batch sets every figure below; `capacity_per_dp_rank`
                      keeps the largest B (what max_num_seqs is sized for)
  throughput          output tokens/s = concurrency / the serving time per token (a decode round + the chunk
                      rounds of every request prefilled meanwhile, B x chunks / R for R = output_len / the
                      tokens a round gains (1; 1 + a with MTP), over those tokens; serving_round_s)
  decode step         one engine iteration at that concurrency (step.decode_step: round / micro-batches)
  tokens/s per user   1 / mean TPOT; mean TPOT = (decode round + the stalls the other requests' prefill
                      chunks add) / the tokens a round gains: round + (B - 1) x stall / R on one DP rank
                      (each request is prefilled once per R rounds; its own prefill is in its TTFT);
                      DP-attention ranks of a MoE model wait for each other's chunks, so there the round
                      carries the chunk rounds of the rank with the most (chunk_rounds_per_round)
  network wait share  share of the GPUs' time spent in collectives over the serving run (stage mean): per
                      round a GPU runs the collectives of m decode micro-batches, + B x (the extra
                      collectives of a request's prefill chunks) / output_len, over the serving round - the
                      same mix of decode-only rounds and rounds that carry a prefill chunk as throughput.
                      `decode_network_wait_share` is the share without prefill chunks
                      (step.DecodeStep.network_share)
  memory utilization  effective use of the instance's GPU memory: one copy of the weights + one copy of
                      each live token's KV at the sustained concurrency, over all of it; copies do not count
                      (the latent every TP rank replicates, weights every DP-attention rank replicates).
                      `memory_in_use` is the plain share: (weights + live KV) per GPU / GPU memory
  TTFT                chunked prefill of the prompt tokens the prefix cache misses, input_len x
                      (1 - prefix_hit_rate), riding the decode rounds (prefill.prefill); a hit skips its
                      blocks' prefill (vLLM automatic prefix caching / SGLang radix cache); plus the wait
                      behind other requests' prompts that Little's law leaves (perf.request_times.first_token_s)
  alone_tpot          time per output token of one request on an idle deployment: the latency floor,
                      where launch overheads (--enforce-eager) and collective latencies show most
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import ceil

from mla_planner.core.errors import PlanError
from mla_planner.engines.cuda_graphs import graph_batch_cap
from mla_planner.engines.profile import profile
from mla_planner.memory.report import memory_report
from mla_planner.memory.results import MemoryReport
from mla_planner.perf.batch_search import largest_under
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs, Workload, decode_query_len
from mla_planner.specs.layout import Layout, layout_problems
from mla_planner.perf.stalls import chunk_rounds_per_round, coupled_ranks  # noqa: F401  (re-exported for tests and callers)
from mla_planner.perf.request_times import (decode_steps, mean_tpot_s, network_wait_share,
                                            operating_batch, serving_round_s, time_in_system_s,
                                            tokens_gained, ttfts_s)
from mla_planner.engines.parallel import uses_deepep
from mla_planner.memory.accounting import evaluate as memory_evaluate
from mla_planner.perf.prefill import Prefill
from mla_planner.perf.step import DecodeStep, decode_step
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.sizing import kv_bytes_per_token, weight_bytes_breakdown
from mla_planner.specs.gpu import GPU
from mla_planner.specs.topology import Topology


@dataclass(frozen=True)
class Metrics:
    layout: Layout
    concurrency: int                      # requests in flight, whole deployment
    concurrency_per_dp_rank: int          # requests running per DP rank (the steady state under a rate)
    concurrency_limit: str                # kv, tpot, ttft (one output token), max_num_seqs,
                                          # max_num_batched_tokens, deepep_dispatch, cuda_graphs or none
    throughput_tokens_per_s: float
    throughput_tokens_per_s_per_gpu: float
    step_s: float
    tpot_s: float                         # mean time per output token, prefill stalls included
    tokens_per_s_per_user: float
    network_wait_share: float             # over the serving run, prefill chunks included
    decode_network_wait_share: float      # of one decode step without a prefill chunk
    memory_utilization: float             # distinct bytes / instance memory (see the module docstring)
    memory_in_use: float                  # (weights + live KV) per GPU / GPU memory
    ttft_s: float
    alone_tpot_s: float                   # one request on an idle deployment (B = 1, no prefill stalls)
    decode: DecodeStep
    prefill: Prefill
    memory: MemoryReport
    meets_targets: bool
    notes: list = field(default_factory=list)
    overload: float = 0.0                 # offered load / what the deployment takes within the targets, when > 1
    capacity_per_dp_rank: int = 0         # the largest batch per DP rank within the targets (max_num_seqs)
    ttft_longest_s: float = 0.0           # TTFT of the longest (p99) prompt: the one held to the TTFT target


def tokens_per_request(workload: Workload, block_size: int) -> int:
    """KV tokens a running request holds on average: input + output/2, rounded up to whole blocks."""
    return ceil(workload.mean_decode_context / block_size) * block_size


def _why_one_misses(spec: ModelSpec, layout: Layout, workload: Workload, alone_s: float) -> str:
    """When the decode step alone would meet the target, it is the prefill chunks that stretch it."""
    if alone_s * 1e3 > workload.tpot_ms:
        return f" (alone a request decodes at {alone_s * 1e3:,.1f} ms per token)"
    ranks = coupled_ranks(spec, layout)
    return (f": alone a request decodes at {alone_s * 1e3:,.1f} ms per token, but the prefill chunks of "
            + (f"all {ranks} coupled DP ranks stall every rank" if ranks > 1 else "the requests that follow stretch it")
            + " (prefill/decode disaggregation would remove that)")


def _largest_batch(spec, topo, layout, knobs, workload, calib, cap: int, hint: int = 0) -> int:
    """Largest B in [1, cap] with mean TPOT <= target (mean TPOT grows with B); 0 if even B=1 misses."""
    return largest_under(lambda b: mean_tpot_s(spec, topo, layout, knobs, workload, calib, b)[0],
                         workload.tpot_ms / 1e3, cap, hint=hint)


def _memory_shares(spec: ModelSpec, layout: Layout, knobs: Knobs, mem: MemoryReport, batch: int,
                   ctx: int) -> tuple[float, float]:
    """(distinct weights + live KV / instance memory; weights + live KV per GPU / GPU memory, stage mean)."""
    if not mem.per_gpu:
        return 0.0, 0.0
    used = [(g.weights_bytes + batch * ctx * g.kv_bytes_per_token) / g.total_bytes for g in mem.per_gpu]
    distinct = (weight_bytes_breakdown(spec, include_mtp=knobs.mtp)["total"]
                + layout.dp * batch * ctx * kv_bytes_per_token(spec, knobs.kv_cache_dtype))
    return distinct / (layout.instance_gpus * mem.per_gpu[0].total_bytes), sum(used) / len(used)


def in_flight(batch_per_dp_rank: int, layout: Layout, workload: Workload) -> int:
    """Requests in flight over the deployment: the batch on every DP rank of every replica, but never
    more than the offered concurrency (ranks beyond it sit idle)."""
    total = batch_per_dp_rank * layout.dp * layout.replicas
    return min(total, workload.concurrency) if workload.concurrency else total


def batch_limit(layout: Layout, knobs: Knobs, mem: MemoryReport, workload: Workload, gpu: GPU) -> tuple[int, str]:
    """The most requests a DP rank can run, and what limits it: the KV pool at the workload's lengths,
    max_num_seqs, (vLLM) the step's token budget: every running request decodes one token of
    max_num_batched_tokens (vLLM 0.33 `config/scheduler.py` refuses a budget below max_num_seqs), 1 + k with
    MTP, (SGLang with DeepEP) the 1,024 tokens its low-latency dispatch takes per step, or the CUDA-graph capture
    range (cuda_graphs.graph_batch_cap), past which decode runs eagerly."""
    per_request = tokens_per_request(workload, knobs.block_size)
    kv = mem.requests_fit(per_request) if mem.fits else 0
    caps = [(kv, "kv"), (knobs.max_num_seqs, "max_num_seqs")]
    if profile(knobs.engine).step_budget_caps_prompts:   # one budget per step: the decodes count against it
        caps.append((knobs.max_num_batched_tokens // decode_query_len(knobs), "max_num_batched_tokens"))
    cap = profile(knobs.engine).deepep_decode_cap
    if cap and uses_deepep(layout, gpu):   # DeepEP's low-latency dispatch limit
        caps.append((cap // decode_query_len(knobs), "deepep_dispatch"))
    if knobs.cuda_graphs:    # the step model prices graph replay, so the micro-batch stays in the captured range
        caps.append((graph_batch_cap(knobs.engine, gpu, layout, knobs) * layout.pp, "cuda_graphs"))
    return min(caps, key=lambda c: c[0])


def evaluate(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, workload: Workload,
             calib: Calibration, batch_hint: int = 0, over_target: int = 0) -> Metrics:
    """The five metrics (+ TTFT) for one layout; PlanError when the layout cannot exist. `batch_hint`
    (the batch found under nearby knobs) and `over_target` (a batch known to miss the TPOT target, e.g.
    where the decode step alone does) only speed up the search for the largest batch."""
    problems = layout_problems(layout, spec, topo.gpus_per_node, topo.total_gpus)
    if problems:
        raise PlanError(f"layout {layout.label}: " + "; ".join(problems))
    mem = memory_evaluate(spec, topo, layout, knobs)   # memoised; the full report only for its ways out
    mem = mem if mem.fits else memory_report(spec, topo, layout, knobs)
    notes = list(calib.notes) + [f"memory: {r}" for r in mem.reasons]
    cap, limit = batch_limit(layout, knobs, mem, workload, topo.gpu)
    timed = knobs
    if knobs.mtp and not workload.tpot_applies:    # nothing to draft: the one token comes with the prefill
        timed = replace(knobs, mtp=False)
        notes.append("MTP: a one-token request has no decode step to speed up; timed without it")
    top = min(cap, over_target) if over_target else cap
    seen: dict[int, tuple[float, float]] = {}

    def ttfts(b: int) -> tuple[float, float]:       # (typical, p99) TTFT at batch b, each priced once
        if b not in seen:
            seen[b] = ttfts_s(spec, topo, layout, timed, workload, calib, b)
        return seen[b]
    worst = lambda b: ttfts(b)[1]   # noqa: E731
    if not workload.tpot_applies:
        batch = largest_under(worst, workload.ttft_ms / 1e3, top, batch_hint) if cap else 0
        notes.append("one output token per request: no TPOT; a request's first token is its last, so its TTFT is "
                     "its whole time in the system, held to the TTFT target")
        if cap and not batch:
            notes.append(f"even one request per DP rank misses the TTFT target of {workload.ttft_ms:g} ms")
    else:
        batch = _largest_batch(spec, topo, layout, timed, workload, calib, top, batch_hint) if cap else 0
    if cap and batch < cap:
        limit = "tpot" if workload.tpot_applies else "ttft"
    if workload.tpot_applies and batch > 1 and worst(batch) > workload.ttft_ms / 1e3:
        # prompts queue behind each other: the batch the TPOT target allows would hold them (the p99 prompt
        # included) past the TTFT target
        within = largest_under(worst, workload.ttft_ms / 1e3, batch)
        batch, limit = (within, "ttft") if within else (batch, limit)
    alone = decode_step(spec, topo, layout, timed, 1, workload.mean_decode_context, calib,
                        mtp_acceptance=workload.mtp_acceptance).tpot_s
    if cap and not batch and workload.tpot_applies:
        notes.append(f"even one request per DP rank misses the TPOT target of {workload.tpot_ms:g} ms"
                     + _why_one_misses(spec, layout, workload, alone))
    if not cap:
        notes.append("the KV pool cannot hold one request of this workload")
        limit = "none"
    tpot, d, p = mean_tpot_s(spec, topo, layout, timed, workload, calib, max(batch, 1))
    per_token_s, rounds = serving_round_s(spec, layout, max(batch, 1), workload, d, p, knobs.engine)
    ctx = workload.mean_decode_context
    util, in_use = _memory_shares(spec, layout, knobs, mem, batch, ctx)
    conc = in_flight(batch, layout, workload)
    tput = conc / per_token_s if batch else 0.0
    first_s, ttft_s = ttfts(max(batch, 1))
    held, overload, op = batch * layout.dp * layout.replicas, 0.0, batch
    if batch and workload.request_rate_per_s:
        # an open arrival stream: output tokens/s cannot exceed what arrives, and a deployment slower than
        # the arrivals grows its queue (and every TTFT) without bound
        offered = workload.request_rate_per_s * workload.output_len
        if held / per_token_s < offered:
            overload = offered * per_token_s / held
            notes.append(f"serves at most {held / per_token_s / workload.output_len:,.2f} requests/s, below the "
                         f"offered {workload.request_rate_per_s:g}/s: its queue grows without bound, so TTFT misses "
                         "the target")
        tput = min(tput, offered)
        op = operating_batch(spec, topo, layout, timed, workload, calib, batch) if not overload else batch
        if op < batch:   # the figures of the requests actually running, not of the most the targets allow
            tpot, d, p = mean_tpot_s(spec, topo, layout, timed, workload, calib, op)
            per_token_s, rounds = serving_round_s(spec, layout, op, workload, d, p, knobs.engine)
            util, in_use = _memory_shares(spec, layout, knobs, mem, op, ctx)
            first_s, ttft_s = ttfts(op)   # at the batch that runs
            little = ceil(workload.request_rate_per_s * time_in_system_s(spec, topo, layout, timed, workload, calib,
                                                                         op) - 1e-9)
            conc = min(in_flight(op, layout, workload), max(little, 1))
    elif batch and workload.concurrency and held < workload.concurrency:
        overload = workload.concurrency / held
        notes.append(f"holds {held:,} of the {workload.concurrency:,} requests offered at once within the targets; "
                     "the others queue, so their TTFT misses the target")
    longest = workload.input_len_max or workload.input_len
    if batch and longest > workload.input_len:   # the TTFT target holds for the longest (p99) prompt too
        notes.append(f"a p99 prompt ({longest:,} tokens) gets its first token after {ttft_s * 1e3:,.0f} ms")
    meets = bool(batch) and mem.fits and ttft_s <= workload.ttft_ms / 1e3 and not overload
    if batch and ttft_s > workload.ttft_ms / 1e3:
        which = "TTFT" if ttft_s == first_s else f"the p99 prompt's TTFT ({longest:,} tokens)"
        notes.append(f"{which} {ttft_s * 1e3:,.0f} ms misses the {workload.ttft_ms:g} ms target")
    if knobs.max_model_len < workload.max_context_len:
        notes.append(f"max-model-len {knobs.max_model_len} is below the workload's {workload.max_context_len} tokens")
    net_share = network_wait_share(d, p, rounds, per_token_s, tokens_gained(d.tokens_per_step, workload),
                                   decode_steps(rounds, p, knobs.engine))
    return Metrics(layout, conc, op, limit, tput, tput / layout.total_gpus, d.step_s, tpot,
                   1.0 / tpot if batch else 0.0, net_share,
                   d.network_share, util, in_use, first_s, alone, d, p, mem,
                   meets, notes, overload, batch, ttft_s)
