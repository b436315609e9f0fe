"""Would the model's own MTP layer (speculative decoding) pay on the plan's best candidate? One line saying so.

With MTP every step verifies 1 + k tokens per sequence in one forward and runs the drafter on the last
stage (step.mtp_draft); a sequence gains 1 + a + ... + a^k tokens per step (knobs.tokens_per_step). Where
decode streams weights and the latent cache (memory-bound: few requests, or TP's H/tp heads per rank) the
extra token is nearly free and the time per output token falls; where the step is compute-bound (DP
attention's H heads per rank, GPUs with little compute per byte such as the H20) it can cost more than it
gains: MTP "degraded R1 throughput on H20 at concurrency 32" (vllm-project/vllm#27726).

The search runs with MTP off unless `--mtp` asks for it: the gain rests on an acceptance rate only the
user's traffic can tell, and searching both ways would double the plan's time. So the plan tunes its best
candidate again with MTP (or the next best, where the best cannot run it) and says what it would serve
against #1 (mtp_pays decides whether to recommend it); a plan made with --mtp says what #1 serves without.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mla_planner.perf.metrics import Metrics
from mla_planner.search.attention_backend import Rejected
from mla_planner.search.tuning import Overrides, tune
from mla_planner.specs.knobs import Knobs, Workload, tokens_per_step

MTP_HINT_TRIES = 3      # candidates tried, best first, until one can run MTP
MIN_MTP_GAIN = 0.03     # below it, the drafter's extra moving part (and engines' version-specific MTP bugs,
                        # sgl-project/sglang#6296) is not worth it
SAME_RATE = 0.01        # tokens/s within 1 %: the offered load (--request-rate, --concurrency) fixes them


def mtp_pays(plain: Metrics, drafted: Metrics) -> bool:
    """MTP is worth it where it meets targets the plain engine misses, or serves MIN_MTP_GAIN more tokens/s;
    where the offered load (--request-rate, --concurrency) fixes the tokens/s both serve, where each token
    comes MIN_MTP_GAIN sooner."""
    if drafted.meets_targets != plain.meets_targets:
        return drafted.meets_targets
    tp, td = plain.throughput_tokens_per_s, drafted.throughput_tokens_per_s
    if abs(td - tp) <= SAME_RATE * tp:
        return drafted.tpot_s < plain.tpot_s * (1 - MIN_MTP_GAIN)
    return td > tp * (1 + MIN_MTP_GAIN)


def _serves(m: Metrics) -> str:
    """The plan table's units: tokens/s per GPU, requests in flight, time per token; and a miss, said."""
    out = (f"{m.throughput_tokens_per_s_per_gpu:,.0f} tok/s per GPU, {m.concurrency:,} in flight, "
           f"{m.tpot_s * 1e3:.1f} ms per token")
    if not m.meets_targets:
        why = next((n for n in m.notes if "misses" in n or n.startswith(("holds", "serves at most"))), "")
        out += f" (missing the targets{': ' + why if why else ''})"
    return out


def _gain(plain: Metrics, drafted: Metrics) -> str:
    tp, td = plain.throughput_tokens_per_s, drafted.throughput_tokens_per_s
    if tp and abs(td - tp) > SAME_RATE * tp:
        return f" ({td / tp - 1:+.0%} tok/s" + ("; more requests fit under the TPOT target"
                                               if drafted.concurrency > plain.concurrency else "") + ")"
    return f" (the same tok/s, each token {1 - drafted.tpot_s / plain.tpot_s:.0%} sooner)" if plain.tpot_s else ""


def _name(i: int, o) -> str:
    return f"#{i} ({o.layout.label}, {o.engine}, {o.kv_dtype})"


@dataclass(frozen=True)
class MtpHint:
    text: str      # the plan's note
    data: dict     # the same for scripts (plan --json "mtp")


def _perf(m: Metrics | None) -> dict | None:
    return None if m is None else {
        "throughput_tokens_per_s_per_gpu": m.throughput_tokens_per_s_per_gpu, "concurrency": m.concurrency,
        "tpot_s": m.tpot_s, "meets_targets": m.meets_targets}


def mtp_hint(spec, topo, options: list, workload: Workload, calib, pinned: Overrides) -> MtpHint | None:
    """One note on speculative decoding for the plan (options: search.Option, best first): planned without it,
    what the first of the best MTP_HINT_TRIES candidates that can run it would serve with it, tuned again,
    against #1; planned with it (--mtp), what #1 would serve without. None for a model without an MTP layer."""
    if spec.drafter is None or not options:
        return None
    a = workload.mtp_acceptance
    per_step = tokens_per_step(Knobs(mtp=True, mtp_draft_tokens=pinned.mtp_draft_tokens or spec.default_draft_tokens), a)
    drafter = "DSpark" if spec.drafter == "dspark" else "MTP"
    what = f"{drafter} ({per_step:.2f} tokens per step at {a:.0%} acceptance, --mtp-acceptance)"
    best = options[0]
    data = {"acceptance": a, "tokens_per_step": per_step, "planned_with_mtp": best.tuned.knobs.mtp}
    if best.tuned.knobs.mtp:
        return _without(spec, topo, best, workload, calib, pinned, what, data)
    plain, refused = best.tuned.metrics, []
    for i, o in enumerate(options[:MTP_HINT_TRIES], 1):
        try:
            drafted = tune(spec, topo, o.layout, o.engine, o.kv_dtype, workload, calib,
                           replace(pinned, mtp=True), dense_per_rank=o.tuned.knobs.dense_per_rank).metrics
        except Rejected as exc:
            refused.append((i, str(exc).removesuffix("; MTP is not planned there")))
            continue
        cannot = _cannot(refused) + "; " if refused else ""
        pays = mtp_pays(plain, drafted)
        data |= {"candidate": i, "layout": o.layout.label, "engine": o.engine, "kv_dtype": o.kv_dtype,
                 "with_mtp": _perf(drafted), "first_without_mtp": _perf(plain), "pays": pays,
                 "cannot": [{"candidate": j, "reason": why} for j, why in refused]}
        if pays:
            return MtpHint(f"{what}: {cannot}{_name(i, o)} would serve {_serves(drafted)} with it, against "
                           f"{_serves(plain)} for #1 without{_gain(plain, drafted)}: rerun with --mtp to plan every "
                           "layout with it", data)
        return MtpHint(f"{what}: {cannot}it would not pay on {_name(i, o)}: {_serves(drafted)} with it, against "
                       f"{_serves(plain)} for #1 without (plan --mtp searches every layout with it)", data)
    data |= {"pays": None, "cannot": [{"candidate": j, "reason": why} for j, why in refused]}
    return MtpHint(f"{what}: " + _cannot(refused), data)


def _without(spec, topo, best, workload: Workload, calib, pinned: Overrides, what: str, data: dict) -> MtpHint:
    """For a plan made with --mtp: #1 tuned again without it."""
    data |= {"candidate": 1, "layout": best.layout.label, "engine": best.engine, "kv_dtype": best.kv_dtype,
             "with_mtp": _perf(best.tuned.metrics)}
    try:
        plain = tune(spec, topo, best.layout, best.engine, best.kv_dtype, workload, calib,
                     replace(pinned, mtp=False), dense_per_rank=best.tuned.knobs.dense_per_rank).metrics
    except Rejected as exc:
        return MtpHint(f"{what}: #1 cannot serve without it ({exc})", data | {"without_mtp": None, "pays": True})
    drafted = best.tuned.metrics
    pays = mtp_pays(plain, drafted)
    verdict = "" if pays else ": at this acceptance MTP does not pay here; plan without --mtp"
    return MtpHint(f"{what}: #1 {_name(1, best)[3:]} serves {_serves(drafted)} with it; without it "
                   f"{_serves(plain)}{verdict}", data | {"without_mtp": _perf(plain), "pays": pays})


def _cannot(refused: list) -> str:
    """'#1 and #2 cannot use it (why)', one clause per distinct reason."""
    by_why: dict[str, list[str]] = {}
    for i, why in refused:
        by_why.setdefault(why, []).append(f"#{i}")
    return "; ".join(f"{' and '.join(who)} cannot use it ({why})" for why, who in by_why.items())
