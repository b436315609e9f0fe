"""A request's times on a running deployment, per DP rank at a batch: the mean TPOT it sees, the serving
round the engine spends per output token (throughput), a one-token request's whole wait, its time in the
system, the batch an open arrival stream settles at (Little's law), and the network's share of the run.
The formulas are docs/step-model.md section 7's; metrics.py assembles the five metrics from them.
"""

from __future__ import annotations

from functools import lru_cache
from math import ceil

from mla_planner.engines.profile import profile
from mla_planner.perf.prefill import Prefill, prefill
from mla_planner.perf.stalls import chunk_rounds_per_round, coupled_ranks
from mla_planner.perf.step import DecodeStep, decode_step
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec


def prefill_tokens(workload: Workload, knobs: Knobs, input_len: int | None = None) -> int:
    """Prompt tokens that must be computed: the misses of the prefix cache (at least one token), for the
    typical prompt or `input_len`."""
    return prompt_misses(input_len or workload.input_len, workload.prefix_hit_rate if knobs.prefix_caching else 0.0)


def prompt_misses(input_len: int, hit_rate: float) -> int:
    """Prompt tokens the prefix cache misses at `hit_rate`, at least one."""
    return max(1, ceil(input_len * (1.0 - hit_rate)))


@lru_cache(maxsize=8192)
def mean_tpot_s(spec, topo, layout, knobs, workload, calib, batch: int) -> tuple[float, DecodeStep, Prefill]:
    """Mean time per output token of a request at `batch` running requests per DP rank: the decode round
    plus the stall of each chunk round of the other requests it carries (chunk_rounds_per_round x stall
    per chunk), over the tokens the round gains it (1, more with MTP); its own prefill is in its TTFT.
    Memoised: the batch search, the TTFT queue and the trade-off curve ask for the same batches."""
    ctx = workload.mean_decode_context
    d = decode_step(spec, topo, layout, knobs, batch, ctx, calib, mtp_acceptance=workload.mtp_acceptance)
    p = prefill(spec, topo, layout, knobs, prefill_tokens(workload, knobs), calib, batch, ctx)
    rounds = min(_chunk_rounds(spec, layout, batch, workload, d, p, True), step_chunk_cap(p, knobs.engine))
    return (d.round_s + hidden_stall_s(rounds, p, d)) / tokens_gained(d.tokens_per_step, workload), d, p


def step_chunk_cap(p: Prefill, engine: str) -> float:
    """The prompt chunks one engine step carries: chunks_per_step for vLLM, unbounded for SGLang (whose
    decodes wait out every chunk); a request's TPOT carries at most this many per round, the rest waits."""
    return chunks_per_step(p) if profile(engine).step_budget_caps_prompts else float("inf")


def chunks_per_step(p: Prefill) -> float:
    """Prompt chunks one vLLM step can carry: its budget left after the decodes (Prefill.chunk_tokens) over a
    chunk's tokens (several short prompts share a step; a long prompt's chunks fill one each). vLLM
    schedules the running requests' decodes first and fills the rest of `max_num_batched_tokens` with prompt
    tokens (v1/core/sched/scheduler.py), so a step never runs more prompt work than that: prompts that arrive
    faster wait, while every step still gains each running request a token. SGLang runs prefill batches
    apart from decode (no mixed chunks by default), so the decodes wait out every prompt's chunks instead."""
    return max(1.0, p.chunk_tokens / max(1, min(p.input_len, p.chunk_tokens)))


def tokens_gained(per_step: float, workload: Workload) -> float:
    """Output tokens a decode round gains a request: 1, or 1 + a + ... with MTP (`per_step`:
    DecodeStep.tokens_per_step, knobs.tokens_per_step), but never more than the request has to produce (one
    output token: the round that prefills it is its last, and MTP's drafts have nothing to speed up)."""
    return min(per_step, workload.output_len)


def time_in_system_s(spec, topo, layout, knobs, workload, calib, batch: int) -> float:
    """A request's time from arrival to its last token at `batch` running per DP rank: its first token
    (first_token_s, the queue included) and output_len - 1 mean TPOTs after it."""
    tpot = mean_tpot_s(spec, topo, layout, knobs, workload, calib, batch)[0]
    return first_token_s(spec, topo, layout, knobs, workload, calib, batch)[0] + (workload.output_len - 1) * tpot


def first_token_s(spec, topo, layout, knobs, workload, calib, batch: int) -> tuple[float, float]:
    """(TTFT, the part of it queued behind other requests' prompts) at `batch` running per DP rank, by Little's
    law with the model's own rates: each of the `batch` requests gains a token every serving_round_s, so a
    request spends output_len x that in the system; what its own prefill (prefill.prefill's TTFT) and its
    output_len - 1 gaps (mean TPOT) leave of that is its wait before its prefill. Where the decode rounds
    dominate this is a fraction of a chunk round; where prompts dominate (short outputs, a loose TPOT
    target: many chunk rounds per decode round) it is most of the TTFT. One output token: the whole time in
    the system is the TTFT."""
    tpot, d, p = mean_tpot_s(spec, topo, layout, knobs, workload, calib, batch)
    in_system = serving_round_s(spec, layout, batch, workload, d, p, knobs.engine)[0] * workload.output_len
    queue = max(0.0, in_system - (workload.output_len - 1) * tpot - p.ttft_s)
    return p.ttft_s + queue, queue


def ttfts_s(spec, topo, layout, knobs, workload, calib, batch: int) -> tuple[float, float]:
    """(TTFT of the typical prompt, TTFT of the longest (p99) one: its own prefill after the same queue) at
    `batch` running per DP rank, each with the part outside the forward passes (calib.ttft_host_s: the server's
    and client's per-request work, fit to a published sweep); the second is what the TTFT target holds."""
    first, queue = first_token_s(spec, topo, layout, knobs, workload, calib, batch)
    longest = workload.input_len_max or workload.input_len
    host = calib.ttft_host_s
    if longest <= workload.input_len:
        return first + host, first + host
    own = prefill(spec, topo, layout, knobs, prefill_tokens(workload, knobs, longest), calib, batch,
                  workload.mean_decode_context).ttft_s
    return first + host, max(first, queue + own) + host


def serving_round_s(spec: ModelSpec, layout: Layout, batch: int, workload: Workload, d: DecodeStep,
                    p: Prefill, engine: str) -> tuple[float, float]:
    """(seconds per output token of every running request, chunk rounds per decode round) over the serving
    run, as the engine spends it: the round plus the chunk rounds of every request prefilled meanwhile
    (chunk_rounds_per_round), over the tokens the round gains each request; throughput = requests in
    flight / these seconds. vLLM: where the prompts need more than one step's budget per round, the round
    takes that many steps (decode_steps), each carrying its budget of prompt work."""
    rounds = _chunk_rounds(spec, layout, batch, workload, d, p)
    steps = decode_steps(rounds, p, engine)
    return (steps * d.round_s + hidden_stall_s(rounds, p, d, steps)) / tokens_gained(d.tokens_per_step, workload), \
        rounds


def hidden_stall_s(chunk_rounds: float, p: Prefill, d: DecodeStep, steps: float = 1.0) -> float:
    """What `chunk_rounds` prefill chunks of `p` (stall_s / chunks each on the GPUs) add to `steps` rounds of decode
    step `d`: a chunk rides a round and hides in the time its GPUs sit idle there for overlapped host work
    (DecodeStep.idle_s, perf/host.py); with fewer chunks than rounds each hides only in its own round, with more they
    share them all."""
    if not d.idle_s:
        return chunk_rounds * p.stall_s / p.chunks
    chunk_s = p.stall_s / p.chunks
    if chunk_rounds <= steps:
        return chunk_rounds * max(0.0, chunk_s - d.idle_s)
    return max(0.0, chunk_rounds * chunk_s - steps * d.idle_s)


def decode_steps(rounds: float, p: Prefill, engine: str) -> float:
    """Engine steps per decode round: 1, or for vLLM as many as its budget needs for the prompt chunks that
    arrive per round (chunks_per_step); the decodes ride every one of them."""
    return max(1.0, rounds / step_chunk_cap(p, engine))


def _chunk_rounds(spec: ModelSpec, layout: Layout, batch: int, workload: Workload, d: DecodeStep, p: Prefill,
                  others_only: bool = False) -> float:
    """A request runs output_len / tokens_gained decode rounds between its prefills."""
    return chunk_rounds_per_round(batch, p.chunks, workload.output_len / tokens_gained(d.tokens_per_step, workload),
                                  coupled_ranks(spec, layout, batch, workload), others_only)


def network_wait_share(d: DecodeStep, p: Prefill, rounds: float, per_token_s: float, gained: float,
                       steps: float) -> float:
    """Collective time / wall time of a GPU over the serving run, stage mean: every decode round a GPU runs
    the collectives of the m micro-batches (DecodeStep.network_share x round), and each chunk round the
    round carries (`serving_round_s`) adds the chunk's extra collectives; per output token (the round's
    time over the tokens it gains), over the serving run's time per token. Coupled DP ranks waiting for
    another rank's chunk count as stalled, not as network."""
    net_s = (steps * d.network_share * d.round_s + rounds * p.stall_network_s / p.chunks) / gained
    return min(1.0, net_s / per_token_s) if per_token_s else 0.0


def operating_batch(spec, topo, layout, knobs, workload, calib, batch: int) -> int:
    """Requests running per DP rank under an open arrival stream, by Little's law with the model's own
    latencies: B = lambda x time_in_system_s(B) (TTFT, its queue included, + (output_len - 1) x TPOT), lambda
    the arrivals per DP rank. Iterated
    down from `batch` (the most that meet the targets, where the latencies are at most the targets, so
    the right side is at most what the CLI's Little's law at the targets gave); both latencies grow with
    B, so the sequence falls monotonically to the largest fixed point. Rounded up: a fractional request
    still occupies the batch part of the time."""
    lam = workload.request_rate_per_s / (layout.dp * layout.replicas)
    b = batch
    for _ in range(64):
        nxt = min(batch, max(1, ceil(lam * time_in_system_s(spec, topo, layout, knobs, workload, calib, b) - 1e-9)))
        if nxt >= b:
            break
        b = nxt
    return b
