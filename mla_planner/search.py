"""The plan search: every layout x engine x KV dtype, screened cheaply, the best tuned, then ranked.

1. Layouts (layouts.py) that cannot exist are rejected with their reasons.
2. Screening, per (layout, KV dtype): draft knobs and the engine's memory accounting decide whether
   it fits; an upper bound on output tokens/s per GPU is the decode step alone at the batch the KV pool
   holds (the TPOT target and prefill stalls can only lower it; `_decode_bound`).
3. Per engine, layouts are tuned in full (tuning.py) - every knob with its reason and the five
   metrics - in order of their bounds: at least the `tuned_per_engine` best, and then every one whose
   bound, tightened by the TPOT target, is above the engine's best tuned candidate meeting the targets
   (branch and bound: a layout screened out cannot beat that one; the runners-up below it are the
   tuned ones, not necessarily every layout's best). Screened-out layouts are listed with their bound,
   so `--explain` can say why each lost.
4. Ranking: candidates meeting the targets first, then output tokens/s per GPU, then tokens/s per
   user, then the label - deterministic for the same input.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .calibration import Calibration
from .knobs import ENGINES, Knobs, Workload
from .layout import Layout, layout_problems
from .launch.vllm import layout_problem as vllm_layout_problem
from .layouts import candidate_layouts
from .memory import evaluate as memory_evaluate
from .metrics import in_flight, tokens_per_request
from .pareto import pareto_front, tradeoff_curve
from .spec import ModelSpec
from .step import decode_step
from .topology import Topology
from .candidate_warnings import warnings_for
from .tuning import Overrides, Rejected, Tuned, dense_variants, draft_knobs, tune

TUNED_PER_ENGINE = 6   # layouts tuned in full per engine, best screening bounds first
CURVES_FOR = 8         # best candidates whose batch sweep makes up the Pareto front


@dataclass(frozen=True)
class Option:
    layout: Layout
    engine: str
    kv_dtype: str
    tuned: Tuned
    warnings: list = field(default_factory=list)
    shortfall: float = 0.0     # 0 when it meets the targets, else how far it misses (see `shortfall`)

    @property
    def key(self) -> tuple:
        return self.key_for("per-gpu")

    def key_for(self, rank_by: str) -> tuple:
        """Those meeting the targets first, by output tokens/s per GPU (or in all, `rank_by` "total"); the
        others closest to the targets first (so "the closest" are), then by the same tokens/s."""
        m = self.tuned.metrics
        tput = m.throughput_tokens_per_s if rank_by == "total" else m.throughput_tokens_per_s_per_gpu
        return (not m.meets_targets, round(self.shortfall, 6), -round(tput, 6),
                -round(m.tokens_per_s_per_user, 6), self.layout.label, self.engine, self.kv_dtype)


def shortfall(m, workload: Workload) -> float:
    """How far a candidate misses its targets: the largest of TTFT / target, mean TPOT / target and the
    offered load / what it takes (Metrics.overload); a candidate that does not fit in memory is furthest;
    0 when it meets them."""
    if m.meets_targets:
        return 0.0
    if not m.memory.fits:
        return float("inf")
    tpot = m.tpot_s / (workload.tpot_ms / 1e3) if workload.tpot_applies else 0.0
    return max(m.ttft_longest_s / (workload.ttft_ms / 1e3), tpot, m.overload)


@dataclass(frozen=True)
class SearchResult:
    options: list                      # Option, best first
    rejected: list                     # dicts: layout, engine, kv_dtype, reason
    points: list                       # TradeoffPoint: each option's throughput/latency curve
    pareto: list                       # indices into points: the front of tokens/s per GPU vs per user
    screened: int


def kv_dtypes_for(topo: Topology, requested: str | None) -> list[str]:
    if requested:
        return [requested]
    return ["bf16", "fp8"] if topo.gpu.has_fp8 else ["bf16"]


def _given(spec: ModelSpec, topo: Topology, layouts: list[Layout]) -> tuple[list, list]:
    """User-chosen layouts, checked like the search's own."""
    legal, illegal = [], []
    for lay in layouts:
        problems = layout_problems(lay, spec, topo.gpus_per_node, topo.total_gpus)
        (illegal.append((lay, "; ".join(problems))) if problems else legal.append(lay))
    return legal, illegal


def _screen(spec, topo, layout, engine, kv, workload, calib, pinned: Overrides,
            per_rank: bool = False) -> tuple[float, Knobs, int]:
    """Upper bound on output tokens/s per GPU (the decode step alone, up to the batch the KV pool holds
    with the draft knobs), the draft knobs and that batch; raises Rejected when the layout cannot serve."""
    knobs, _ = draft_knobs(spec, topo, layout, engine, kv, workload, pinned, per_rank)
    mem = memory_evaluate(spec, topo, layout, knobs)      # the verdict only: no search for ways out
    if not mem.fits:
        raise Rejected(mem.reasons[0] if mem.reasons else "does not fit")
    batch = min(knobs.max_num_seqs, mem.kv_capacity_tokens // tokens_per_request(workload, knobs.block_size))
    if batch < 1:
        raise Rejected(f"the KV pool ({mem.kv_capacity_tokens:,} tokens) cannot hold one "
                       f"{workload.mean_decode_context:,}-token request")
    return _decode_bound(spec, topo, layout, knobs, batch, workload, calib), knobs, batch


def _decode_bound(spec, topo, layout, knobs: Knobs, top: int, workload, calib) -> float:
    """max over B <= top of in_flight(B) / decode tpot(B) / GPUs: no tuned batch B* <= top does better, as
    its mean TPOT (stalls included) is at least the decode step's. B / tpot(B) grows with B (each roofline
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
    points = {p for e in ends for p in (e, layout.pp * (e // layout.pp)) if 1 <= p <= top}
    return max(in_flight(b, layout, workload) / decode_step(spec, topo, layout, knobs, b, ctx, calib,
                                                            mtp_acceptance=workload.mtp_acceptance).tpot_s
               for b in points) / layout.total_gpus


def _target_bound(spec, topo, layout, knobs: Knobs, top: int, workload, calib, best: float) -> tuple[float, int]:
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


def _engine_problem(layout: Layout, engine: str, topo: Topology) -> str | None:
    if layout.kv_layout == "latent-sharded":
        return ("no engine implements latent-width sharding (the seed's Route B): vLLM and SGLang replicate "
                "the latent per TP rank, or split it by request (DP attention) or by token (DCP)")
    return (vllm_layout_problem(layout, topo.gpus_per_node) or None) if engine == "vllm" else None


def search(spec: ModelSpec, topo: Topology, workload: Workload, calib: Calibration,
           engines: tuple = ENGINES, kv_dtype: str | None = None, layouts: list[Layout] | None = None,
           tuned_per_engine: int = TUNED_PER_ENGINE, pinned: Overrides = Overrides(),
           rank_by: str = "per-gpu") -> SearchResult:
    legal, illegal = candidate_layouts(spec, topo) if layouts is None else _given(spec, topo, layouts)
    rejected = []     # most telling first: what failed in tuning, then screening; layouts that cannot exist last
    bounds: dict = {e: [] for e in engines}
    screened = 0
    for layout in legal:
        for engine in engines:
            problem = _engine_problem(layout, engine, topo)
            for kv in kv_dtypes_for(topo, kv_dtype):
                if problem:
                    rejected.append({"layout": layout.label, "engine": engine, "kv_dtype": kv, "reason": problem})
                    continue
                for per_rank in dense_variants(layout, engine):
                    try:
                        screened += 1
                        bounds[engine].append((*_screen(spec, topo, layout, engine, kv, workload, calib, pinned,
                                                        per_rank), layout, kv, per_rank))
                    except Rejected as exc:
                        rejected.append({"layout": _label(layout, per_rank), "engine": engine, "kv_dtype": kv,
                                         "reason": str(exc)})
    options, siblings = [], {}    # (layout, draft chunk) -> the draft batch of its last tuning: a hint
    def weight(layout: Layout) -> int:   # per-GPU bounds to the ranking's unit (tokens/s per GPU, or in all)
        return layout.total_gpus if rank_by == "total" else 1

    for engine in engines:
        ranked = sorted(bounds[engine], key=lambda t: (-t[0] * weight(t[3]), t[3].label, t[4], t[5]))
        best, tuned_n = 0.0, 0
        for i, (bound, knobs, batch, layout, kv, per_rank) in enumerate(ranked):
            if tuned_n >= tuned_per_engine and bound * weight(layout) <= best:
                for b, _, _, lay, k, pr in ranked[i:]:
                    rejected.append(_screened_out(lay, engine, k, b * weight(lay), best, rank_by,
                                                  "decoding without prefill with the "
                                                  "whole KV pool busy", pr))
                break
            above = 0
            if tuned_n >= tuned_per_engine and workload.tpot_applies:
                tight, above = _target_bound(spec, topo, layout, knobs, batch, workload, calib,
                                             best / weight(layout))
                if tight * weight(layout) <= best:
                    rejected.append(_screened_out(layout, engine, kv, tight * weight(layout), best, rank_by,
                                                  "decoding without prefill "
                                                  "at the largest batch within the TPOT target", per_rank))
                    continue
            try:
                sibling = (layout, knobs.max_num_batched_tokens, per_rank)    # same layout, same draft chunk
                tuned = tune(spec, topo, layout, engine, kv, workload, calib, pinned, above, siblings.get(sibling, 0),
                             per_rank)
                siblings[sibling] = tuned.draft_batch
                options.append(Option(layout, engine, kv, tuned, warnings_for(spec, topo, layout, tuned, workload),
                                      shortfall(tuned.metrics, workload)))
                tuned_n += 1
                if tuned.metrics.meets_targets:
                    best = max(best, tuned.metrics.throughput_tokens_per_s_per_gpu * weight(layout))
            except Rejected as exc:   # got furthest: listed first, as the most telling reasons
                rejected.insert(0, {"layout": _label(layout, per_rank), "engine": engine, "kv_dtype": kv,
                                    "reason": str(exc)})
    rejected += [{"layout": lay.label, "engine": "any", "kv_dtype": "any", "reason": why} for lay, why in illegal]
    options = _one_dense_variant(options, rank_by)
    options.sort(key=lambda o: o.key_for(rank_by))
    points = [p for i, o in enumerate(options[:CURVES_FOR])
              for p in tradeoff_curve(spec, topo, i, o, workload, calib)]
    front = pareto_front([(p.throughput(rank_by), p.tokens_per_s_per_user) for p in points])
    return SearchResult(options, rejected, points, front, screened)


def _label(layout: Layout, per_rank: bool) -> str:
    return layout.label + (" (dense per rank)" if per_rank else "")


def _one_dense_variant(options: list, rank_by: str) -> list:
    """Of a layout tuned both with and without SGLang's dense parts per rank, the better one - the engine's
    default unless the other serves over 1 % more (or only it meets the targets) - its reason saying what the
    other way served."""
    groups: dict = {}
    for o in options:
        groups.setdefault((o.layout, o.engine, o.kv_dtype), []).append(o)
    out = []
    for group in groups.values():
        best = min(group, key=lambda o: o.key_for(rank_by))
        default = next((o for o in group if not o.tuned.knobs.dense_per_rank), best)
        m, d = best.tuned.metrics, default.tuned.metrics
        if m.meets_targets == d.meets_targets and m.throughput_tokens_per_s < 1.01 * d.throughput_tokens_per_s:
            best = default
        for other in [o for o in group if o is not best]:
            m, why = other.tuned.metrics, dict(best.tuned.reasons)
            why["dense_per_rank"] += (f"; the other way was tuned too: {m.throughput_tokens_per_s_per_gpu:,.0f} "
                                      f"output tok/s per GPU" + ("" if m.meets_targets else ", missing the targets"))
            best = replace(best, tuned=replace(best.tuned, reasons=why))
        out.append(best)
    return out


def _screened_out(layout: Layout, engine: str, kv: str, bound: float, best: float, rank_by: str, how: str,
                  per_rank: bool = False) -> dict:
    unit = "output tokens/s in all" if rank_by == "total" else "output tokens/s per GPU"
    return {"layout": _label(layout, per_rank), "engine": engine, "kv_dtype": kv,
            "reason": f"screened out: at most {bound:,.0f} {unit} even {how}, not above the "
                      f"{best:,.0f} of a tuned {engine} candidate"}
