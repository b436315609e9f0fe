"""Would the model's own MTP layer (speculative decoding) pay on the plan's best candidate? One line saying so.

With MTP every step verifies 1 + k tokens per sequence in one forward and runs the drafter on the last
stage (step.mtp_draft); a sequence gains 1 + a + ... + a^k tokens per step (knobs.tokens_per_step). Where
decode streams weights and the latent cache (memory-bound: few requests, or TP's H/tp heads per rank) the
extra token is nearly free and the time per output token falls; where the step is compute-bound (DP
attention's H heads per rank, GPUs with little compute per byte such as the H20) it can cost more than it
gains: MTP "degraded R1 throughput on H20 at concurrency 32" (USER_PROBLEMS.md problem 29).

The search runs with MTP off unless `--mtp` asks for it: the gain rests on an acceptance rate only the
user's traffic can tell, and searching both ways would double the plan's time. So the plan tunes its best
candidate with MTP too and says what it would serve (MIN_MTP_GAIN decides whether to recommend it).
"""

from __future__ import annotations

from dataclasses import replace

from .knobs import Knobs, Workload, tokens_per_step
from .metrics import Metrics
from .tuning import Overrides, Rejected, Tuned, tune

MIN_MTP_GAIN = 0.03     # below it, the drafter's extra moving part (and engines' version-specific MTP bugs,
                        # USER_PROBLEMS.md problems 15 and 29) is not worth it


def mtp_pays(plain: Metrics, drafted: Metrics) -> bool:
    """MTP is worth it where it meets targets the plain engine misses, or serves MIN_MTP_GAIN more tokens/s."""
    if drafted.meets_targets != plain.meets_targets:
        return drafted.meets_targets
    return drafted.throughput_tokens_per_s > plain.throughput_tokens_per_s * (1 + MIN_MTP_GAIN)


def _serves(m: Metrics) -> str:
    return (f"{m.throughput_tokens_per_s:,.0f} tok/s at {m.concurrency_per_dp_rank} requests per DP rank, "
            f"{m.tpot_s * 1e3:.1f} ms per token" + ("" if m.meets_targets else " (missing the targets)"))


def mtp_hint(spec, topo, best: Tuned, kv_dtype: str, workload: Workload, calib, pinned: Overrides) -> str:
    """What `best` (tuned without MTP) would serve with its MTP layer drafting, tuned again with it; '' for a
    model without one."""
    if not spec.num_nextn_predict_layers or best.knobs.mtp:
        return ""
    layout, k = best.metrics.layout, best.knobs
    per_step = tokens_per_step(Knobs(mtp=True), workload.mtp_acceptance)
    what = f"MTP ({per_step:.2f} tokens per step at {workload.mtp_acceptance:.0%} acceptance, --mtp-acceptance)"
    try:
        drafted = tune(spec, topo, layout, k.engine, kv_dtype, workload, calib, replace(pinned, mtp=True)).metrics
    except Rejected as exc:
        return f"{what}: #1 could not serve with it: {exc}"
    plain = best.metrics
    if mtp_pays(plain, drafted):
        gain = drafted.throughput_tokens_per_s / plain.throughput_tokens_per_s - 1 if plain.throughput_tokens_per_s \
            else 0.0
        return (f"{what}: #1 would serve {_serves(drafted)}" + (f", {gain:+.0%}" if gain else "")
                + f", against {_serves(plain)} without: rerun with --mtp to search every layout with it")
    return (f"{what} would not pay on #1: {_serves(drafted)} with it, against {_serves(plain)} without"
            + ("" if drafted.throughput_tokens_per_s <= plain.throughput_tokens_per_s
               else f" (under the {MIN_MTP_GAIN:.0%} gain worth the drafter)"))
