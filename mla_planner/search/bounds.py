"""Screening bounds of the plan search: an upper bound on the output tokens/s per GPU a layout can reach
(the decode step alone, at the largest batch its KV pool holds, under the engine's layer split or, under PP,
the KV-balanced one tuning may adopt), and the same bound tightened by the TPOT target. search.py tunes
layouts in the order of these bounds and stops where none can beat the best tuned."""

from __future__ import annotations


from math import ceil

from mla_planner.engines.profile import profile
from mla_planner.memory.accounting import evaluate as memory_evaluate, safe_memory_fraction
from mla_planner.perf.metrics import in_flight, tokens_per_request
from mla_planner.perf.prefill import Prefill, chunk_budget
from mla_planner.perf.request_times import decode_steps, prompt_misses, tokens_gained
from mla_planner.perf.step import decode_step
from mla_planner.search.attention_backend import Rejected
from mla_planner.search.limits import kv_balanced
from mla_planner.search.tuning import Overrides, chunk_candidates, draft_knobs
from mla_planner.specs.knobs import Knobs, tokens_per_step


def screen(spec, topo, layout, engine, kv, workload, calib, pinned: Overrides,
            per_rank: bool = False) -> tuple[float, Knobs, int]:
    """Upper bound on output tokens/s per GPU (the decode step alone, up to the batch the KV pool holds with
    the draft knobs, or with the KV-balanced split where that bounds higher), those knobs and that batch; raises
    Rejected when the layout cannot serve. `per_rank`: SGLang's dense parts per DP rank (Knobs.dense_per_rank)."""
    knobs, _ = draft_knobs(spec, topo, layout, engine, kv, workload, pinned, per_rank)
    mem = memory_evaluate(spec, topo, layout, knobs)      # the verdict only: no search for ways out
    if not mem.fits:
        raise Rejected(mem.reasons[0] if mem.reasons else "does not fit")
    batch = min(knobs.max_num_seqs, mem.requests_fit(tokens_per_request(workload, knobs.block_size)))
    if batch < 1:
        raise Rejected(f"the KV pool ({mem.kv_capacity_tokens:,} tokens) cannot hold one "
                       f"{workload.mean_decode_context:,}-token request")
    bounds = [(_decode_bound(spec, topo, layout, knobs, batch, workload, calib), knobs, batch)]
    # where the pool limits the batch, tuning may adopt the KV-balanced split (choose_split): bound it too
    alt = _balanced(spec, topo, layout, knobs, workload) if batch < knobs.max_num_seqs else None
    if alt:
        bounds.append((_decode_bound(spec, topo, layout, *alt, workload, calib), *alt))
    return max(bounds, key=lambda t: t[0])


def _balanced(spec, topo, layout, knobs: Knobs, workload) -> tuple[Knobs, int] | None:
    """Under PP, the split that balances the stages' KV pools (memory.pp_split.balance, what tuning's choose_split
    tries when the pool limits the batch) at its safe fraction, with the batch its pool holds; None when it
    is the engine's own split or does not fit."""
    if layout.pp == 1:
        return None
    alt = kv_balanced(spec, topo, layout, knobs, lambda k: safe_memory_fraction(spec, topo, layout, k))
    if alt is None:
        return None
    mem = memory_evaluate(spec, topo, layout, alt)
    batch = min(alt.max_num_seqs, mem.requests_fit(tokens_per_request(workload, alt.block_size)))
    return (alt, batch) if mem.fits and batch >= 1 else None


def _decode_bound(spec, topo, layout, knobs: Knobs, top: int, workload, calib) -> float:
    """max over B <= top of in_flight(B) / (decode tpot(B) x vLLM's least steps per round) / GPUs: no tuned
    batch B* <= top does better, as its serving time per token (stalls and budget steps included) is at least
    that. Past the batch where vLLM's budget fills (_vllm_budget_knee) the ratio falls, so the points above it
    are dropped. B / tpot(B) grows with B (each roofline
    term is affine or concave in B) except where pipeline micro-batches fill up: B sequences over pp stages
    run as ceil(B / pp)-row micro-batches, so a round costs as much at k x pp + 1 as at (k + 1) x pp and
    B / tpot dips there. The maximum is therefore at `top` or at the last full row below it
    (pp x floor(top / pp)), or, when the offered concurrency caps the requests in flight, at the batch where
    the cap starts, the one after, or the last full row below it."""
    ctx = workload.mean_decode_context
    ends = [top]
    if workload.concurrency:
        knee = workload.concurrency // (layout.dp * layout.replicas)
        ends += [b for b in (knee, knee + 1) if 1 <= b < top]
    full = _vllm_budget_knee(layout, knobs, top, workload, topo.gpu)     # past it B / (tpot x steps) falls with B
    if full < top:   # ... so nothing beyond full + 1 bounds higher: tpot grows, a step's chunks shrink
        ends = [b for b in ends if b <= full] + [b for b in (full, full + 1) if b >= 1]
    points = {p for e in ends for p in (e, layout.pp * (e // layout.pp)) if 1 <= p <= top}
    bound = 0.0
    for b in points:
        d = decode_step(spec, topo, layout, knobs, b, ctx, calib, mtp_acceptance=workload.mtp_acceptance)
        steps = _vllm_steps_at_least(layout, knobs, b, workload, topo.gpu)
        bound = max(bound, in_flight(b, layout, workload) / (d.tpot_s * steps))
    return bound / layout.total_gpus


def _vllm_steps_at_least(layout, knobs: Knobs, batch: int, workload, gpu) -> float:
    """A lower bound on vLLM's steps per decode round (perf.request_times.decode_steps): the prompt chunks a DP rank
    needs per round on average, batch x chunks per request / rounds per request (the coupled ranks' E[max] is
    no less), over the chunks one step's budget carries; 1 for SGLang. No prefill is priced, so it is cheap.
    It grows with the batch (more chunks, and a smaller budget left after the decodes). The budget is the
    largest tuning may choose (tuning.chunk_candidates), not the draft's."""
    if not profile(knobs.engine).step_budget_caps_prompts:
        return 1.0
    budget = max(knobs.max_num_batched_tokens, *chunk_candidates(knobs.engine, layout, gpu))
    chunk = chunk_budget(knobs, layout, batch, budget)
    prompt = prompt_misses(workload.input_len, workload.prefix_hit_rate)   # the fewest tuning could prefill
    chunks = ceil(prompt / chunk)
    rounds = workload.output_len / tokens_gained(tokens_per_step(knobs, workload.mtp_acceptance), workload)
    return decode_steps(batch * chunks / rounds, Prefill(prompt, chunk, chunks, 0.0, 0.0), knobs.engine)


def _vllm_budget_knee(layout, knobs: Knobs, top: int, workload, gpu) -> int:
    """The largest batch <= top at which vLLM still needs one step per round (0 where even one needs more):
    beyond it steps grow about as fast as the batch, so B / (tpot x steps) stops growing, and the bound's
    maximum lies at the knee or just past it rather than at `top`."""
    if _vllm_steps_at_least(layout, knobs, top, workload, gpu) <= 1.0:
        return top
    lo, hi = 0, top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _vllm_steps_at_least(layout, knobs, mid, workload, gpu) <= 1.0 else (lo, mid)
    return lo


def target_bound(spec, topo, layout, knobs: Knobs, top: int, workload, calib, best: float) -> tuple[float, int]:
    """The decode bound tightened by the TPOT target, searched only as far as deciding it against `best`:
    a feasible batch has decode tpot <= target, so the bound is the decode bound at the largest such
    batch B*. Each probe B narrows it: if tpot(B) <= target, B* >= B and the bound is at least what B
    gives (above `best`: stop, the layout must be tuned); if not, B* < B and the bound is at most the
    decode bound up to B (not above `best`: stop, screened out). Otherwise bisect by regula falsi until
    the bracket is within 5 %, and return the decode bound at its top (an upper bound). Also returns the
    smallest batch seen over the target (0 if none): mean TPOT is higher still there, so it bounds
    tuning's batch search."""
    ctx, target = workload.mean_decode_context, workload.tpot_ms / 1e3
    gpus = layout.total_gpus

    def tpot(b: int) -> float:
        return decode_step(spec, topo, layout, knobs, b, ctx, calib, mtp_acceptance=workload.mtp_acceptance).tpot_s

    f_top = tpot(top)
    if f_top <= target:
        return _decode_bound(spec, topo, layout, knobs, top, workload, calib), 0
    f_lo = tpot(1)
    if f_lo > target:
        return 0.0, 1
    lo, hi, f_hi = 1, top, f_top
    while hi - lo > max(1.0, 0.05 * hi):
        if in_flight(lo, layout, workload) / f_lo / gpus > best:
            return in_flight(lo, layout, workload) / f_lo / gpus, hi
        upper = _decode_bound(spec, topo, layout, knobs, hi, workload, calib)
        if upper <= best:
            return upper, hi
        mid = min(max(lo + int((target - f_lo) * (hi - lo) / (f_hi - f_lo)), lo + 1), hi - 1)
        if hi - lo > 8 and (mid - lo) * 8 < hi - lo:     # regula falsi crawling along one end: bisect
            mid = (lo + hi) // 2
        value = tpot(mid)
        if value <= target:
            lo, f_lo = mid, value
        else:
            hi, f_hi = mid, value
    return _decode_bound(spec, topo, layout, knobs, hi, workload, calib), hi
