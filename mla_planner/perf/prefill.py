"""Prefill (time to first token) with chunked prefill, riding the decode rounds of the step model (step.py).

The step's token budget (max_num_batched_tokens) goes to the decoding micro-batch first (1 + k tokens a
sequence with MTP), the rest to one request's chunk (vLLM's scheduler order); each chunk rides one round, so
the rounds that carry a chunk are longer than decode-only ones by the `stall` metrics.py spreads over the
other requests' tokens (less what the GPUs' idle time for overlapped host work hides: request_times.py). The
prompt's own rounds wait for the host work (perf/host.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from mla_planner.perf.host import with_host_s
from mla_planner.perf.layer_work import Batch
from mla_planner.perf.step import forward_stages, mean_network_s, round_s
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs, decode_query_len
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


@dataclass(frozen=True)
class Prefill:
    input_len: int
    chunk_tokens: int
    chunks: int
    ttft_s: float                  # all chunks, each riding one pipeline round (with the host work it waits for)
    stall_s: float                 # how much longer the decode rounds got on the GPUs while the chunks ran
    stall_network_s: float = 0.0   # the extra collective seconds the chunks add to a GPU's rounds, averaged
                                   # over the stages (eager: may hide under CPU launches and exceed stall_s)


def prefill(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, input_len: int, calib: Calibration,
            decode_batch: int = 0, context_len: int = 0, layers_per_stage: list[int] | None = None) -> Prefill:
    """Chunked prefill of one request while `decode_batch` sequences per DP rank keep decoding.

    The step's token budget (max_num_batched_tokens) goes to the micro-batch's decodes first, the rest to the
    chunk (vLLM's scheduler order); chunks of one request run one after another, each riding one round.
    Full chunks differ only in the prefix their attention reads, which grows linearly, so their rounds are
    summed with the trapezoid rule over the first and last full chunk (exact where a round is linear in
    the prefix; every round is priced when there are at most two full chunks)."""
    m = min(max(decode_batch, 1), layout.pp)
    micro = ceil(decode_batch / m) if decode_batch else 0
    q = decode_query_len(knobs)
    chunk = chunk_budget(knobs, layout, decode_batch)
    base = None
    if decode_batch:
        _, base = forward_stages(spec, topo, layout, knobs, Batch(micro, context_len, q_len=q), calib,
                                 layers_per_stage)
    base_round = round_s(base, m) if base else 0.0
    base_net = mean_network_s(base) if base else 0.0

    def round_at(prefix: int, tokens: int) -> tuple[float, float]:
        """(round seconds, extra collective seconds per GPU, stage mean) of a round carrying this chunk:
        each stage runs the chunk's micro-batch once instead of a decode-only one."""
        _, st = forward_stages(spec, topo, layout, knobs, Batch(micro, context_len, tokens, prefix, q), calib,
                               layers_per_stage)
        if not base:
            return sum(s.total_s for s in st), mean_network_s(st)
        return round_s(st, m, base), mean_network_s(st) - base_net

    def hosted(gpu_s: float) -> float:    # the round as the request waits for it: with the host work (perf/host.py)
        return with_host_s(gpu_s, decode_batch + 1, calib, knobs.host_overlap) if base else gpu_s

    full, rest = divmod(input_len, chunk)
    if full <= 2:
        rounds = [round_at(i * chunk, chunk) for i in range(full)]
        full_s, full_net, full_ttft = sum(r[0] for r in rounds), sum(r[1] for r in rounds), sum(hosted(r[0])
                                                                                             for r in rounds)
    else:
        first, last = round_at(0, chunk), round_at((full - 1) * chunk, chunk)
        full_s, full_net = full * (first[0] + last[0]) / 2, full * (first[1] + last[1]) / 2
        full_ttft = full * (hosted(first[0]) + hosted(last[0])) / 2
    tail = round_at(full * chunk, rest) if rest else (0.0, 0.0)
    n = full + (1 if rest else 0)
    return Prefill(input_len, chunk, ceil(input_len / chunk), full_ttft + (hosted(tail[0]) if rest else 0.0),
                   full_s + tail[0] - n * base_round, full_net + tail[1])


def chunk_budget(knobs: Knobs, layout: Layout, decode_batch: int, budget: int | None = None) -> int:
    """Prompt tokens a step has room for: the token budget (max_num_batched_tokens, or `budget`) less the
    decoding micro-batch's tokens (1 + k a sequence with MTP), at least one."""
    m = min(max(decode_batch, 1), layout.pp)
    micro = ceil(decode_batch / m) if decode_batch else 0
    return max((budget or knobs.max_num_batched_tokens) - micro * decode_query_len(knobs), 1)


def prefill_time_s(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, input_len: int,
                   calib: Calibration, decode_batch: int = 0, context_len: int = 0) -> float:
    """Time to first token of an `input_len`-token prompt (see `prefill`)."""
    return prefill(spec, topo, layout, knobs, input_len, calib, decode_batch, context_len).ttft_s
