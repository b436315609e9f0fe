"""The seed article's five metrics, computed for a layout + knobs + workload (plus TTFT).

  concurrency         requests in flight the deployment sustains: per DP rank the largest batch B with
                      B x (tokens a request holds on average) <= the KV pool (memory.py, the engine's own
                      accounting), B <= max_num_seqs, and mean time per output token <= the TPOT target;
                      x dp x replicas. A request holds input + output/2 tokens on average over its decode
                      (Workload.mean_decode_context), rounded up to whole KV blocks.
  throughput          output tokens/s = concurrency / mean TPOT (total, and per GPU)
  decode step         one engine iteration at that concurrency (step.decode_step: tpot / micro-batches)
  tokens/s per user   1 / mean TPOT; mean TPOT = decode round + the stalls prefill chunks add, spread over
                      output_len tokens: tpot + B x stall / output_len (each of the B requests of a DP rank
                      is prefilled once per output_len rounds)
  network wait share  share of the GPUs' time spent in collectives over the serving run (stage mean): per
                      round a GPU runs the collectives of m decode micro-batches, + B x (the extra
                      collectives of a request's prefill chunks) / output_len, over mean TPOT - the same mix
                      of decode-only rounds and rounds that carry a prefill chunk as throughput.
                      `decode_network_wait_share` is the share without prefill chunks
                      (step.DecodeStep.network_share)
  memory utilization  effective use of the instance's GPU memory: one copy of the weights + one copy of
                      each live token's KV at the sustained concurrency, over all of it; copies do not count
                      (the latent every TP rank replicates, weights every DP-attention rank replicates).
                      `memory_in_use` is the plain share: (weights + live KV) per GPU / GPU memory
  TTFT                chunked prefill of the prompt tokens the prefix cache misses, input_len x
                      (1 - prefix_hit_rate), riding the decode rounds (step.prefill); a hit skips its
                      blocks' prefill (vLLM automatic prefix caching / SGLang radix cache)
  alone_tpot          time per output token of one request on an idle deployment: the latency floor,
                      where launch overheads (--enforce-eager) and collective latencies show most
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil

from .calibration import Calibration
from .errors import PlanError
from .knobs import Knobs, Workload
from .layout import Layout, layout_problems
from .memory import MemoryReport, memory_report
from .sizing import kv_bytes_per_token, weight_bytes_breakdown
from .spec import ModelSpec
from .step import DecodeStep, Prefill, decode_step, prefill
from .topology import Topology


@dataclass(frozen=True)
class Metrics:
    layout: Layout
    concurrency: int                      # requests in flight, whole deployment
    concurrency_per_dp_rank: int
    concurrency_limit: str                # "kv", "tpot", "max_num_seqs" or "none"
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


def tokens_per_request(workload: Workload, block_size: int) -> int:
    """KV tokens a running request holds on average: input + output/2, rounded up to whole blocks."""
    return ceil(workload.mean_decode_context / block_size) * block_size


def prefill_tokens(workload: Workload, knobs: Knobs) -> int:
    """Prompt tokens that must be computed: the misses of the prefix cache (at least one token)."""
    hit = workload.prefix_hit_rate if knobs.prefix_caching else 0.0
    return max(1, ceil(workload.input_len * (1.0 - hit)))


def mean_tpot_s(spec, topo, layout, knobs, workload, calib, batch: int) -> tuple[float, DecodeStep, Prefill]:
    """Mean time per output token at `batch` running requests per DP rank, prefill stalls included."""
    ctx = workload.mean_decode_context
    d = decode_step(spec, topo, layout, knobs, batch, ctx, calib)
    p = prefill(spec, topo, layout, knobs, prefill_tokens(workload, knobs), calib, batch, ctx)
    return d.tpot_s + batch * p.stall_s / max(workload.output_len, 1), d, p


def network_wait_share(d: DecodeStep, p: Prefill, batch: int, workload: Workload, mean_tpot: float) -> float:
    """Collective time / wall time of a GPU over the serving run, stage mean: every decode round a GPU runs
    the collectives of the m micro-batches (DecodeStep.network_share x tpot), and each of the B requests
    adds its prefill chunks' extra collectives once per output_len rounds (the same amortisation as the
    stall in mean TPOT)."""
    net_s = d.network_share * d.tpot_s + batch * p.stall_network_s / max(workload.output_len, 1)
    return min(1.0, net_s / mean_tpot) if mean_tpot else 0.0


def _largest_batch(spec, topo, layout, knobs, workload, calib, cap: int) -> int:
    """Largest B in [1, cap] with mean TPOT <= target (mean TPOT grows with B); 0 if even B=1 misses."""
    target = workload.tpot_ms / 1e3
    ok = lambda b: mean_tpot_s(spec, topo, layout, knobs, workload, calib, b)[0] <= target  # noqa: E731
    if not ok(1):
        return 0
    lo, hi = 1, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


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


def _limits(layout: Layout, knobs: Knobs, mem: MemoryReport, workload: Workload) -> tuple[int, str]:
    per_request = tokens_per_request(workload, knobs.block_size)
    kv = mem.kv_capacity_tokens // per_request if mem.fits else 0
    return (kv, "kv") if kv <= knobs.max_num_seqs else (knobs.max_num_seqs, "max_num_seqs")


def evaluate(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, workload: Workload,
             calib: Calibration) -> Metrics:
    """The five metrics (+ TTFT) for one layout; PlanError when the layout cannot exist."""
    problems = layout_problems(layout, spec, topo.gpus_per_node, topo.total_gpus)
    if problems:
        raise PlanError(f"layout {layout.label}: " + "; ".join(problems))
    mem = memory_report(spec, topo, layout, knobs)
    notes = list(calib.notes) + [f"memory: {r}" for r in mem.reasons]
    cap, limit = _limits(layout, knobs, mem, workload)
    batch = _largest_batch(spec, topo, layout, knobs, workload, calib, cap) if cap else 0
    if cap and batch < cap:
        limit = "tpot"
    if cap and not batch:
        notes.append(f"even one request per DP rank misses the TPOT target of {workload.tpot_ms:g} ms")
    if not cap:
        notes.append("the KV pool cannot hold one request of this workload")
        limit = "none"
    tpot, d, p = mean_tpot_s(spec, topo, layout, knobs, workload, calib, max(batch, 1))
    ctx = workload.mean_decode_context
    util, in_use = _memory_shares(spec, layout, knobs, mem, batch, ctx)
    conc = in_flight(batch, layout, workload)
    tput = conc / tpot if batch else 0.0
    meets = bool(batch) and mem.fits and p.ttft_s <= workload.ttft_ms / 1e3
    if batch and p.ttft_s > workload.ttft_ms / 1e3:
        notes.append(f"TTFT {p.ttft_s * 1e3:,.0f} ms misses the {workload.ttft_ms:g} ms target")
    if knobs.max_model_len < workload.max_context_len:
        notes.append(f"max-model-len {knobs.max_model_len} is below the workload's {workload.max_context_len} tokens")
    alone = decode_step(spec, topo, layout, knobs, 1, workload.mean_decode_context, calib).tpot_s
    return Metrics(layout, conc, batch, limit, tput, tput / layout.total_gpus, d.step_s, tpot,
                   1.0 / tpot if batch else 0.0, network_wait_share(d, p, max(batch, 1), workload, tpot),
                   d.network_share, util, in_use, p.ttft_s, alone, d, p, mem,
                   meets, notes)
