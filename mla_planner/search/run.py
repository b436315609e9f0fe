"""The plan search: every layout x engine x KV dtype, screened cheaply, the best tuned, then ranked.

1. Layouts (layouts.py) that cannot exist are rejected with their reasons.
2. Screening, per (layout, KV dtype, and for SGLang's DP attention at tp=1 each way of running the dense
   parts): draft knobs and the engine's memory accounting decide whether it fits; an upper bound on output
   tokens/s per GPU is the decode step alone at the batch the KV pool holds, under the engine's layer split
   or the KV-balanced one tuning may adopt (the TPOT target and prefill stalls can only lower it;
   search/bounds.py). Of a layout tuned both dense ways only the better is kept (`_one_dense_variant`).
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
from typing import Optional

from mla_planner.engines.layouts import launch_problem
from mla_planner.engines.parallel import dense_per_rank_applies
from mla_planner.search.ranking import rank
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.search.attention_backend import Rejected
from mla_planner.search.bounds import screen, target_bound
from mla_planner.search.candidate import Rejection
from mla_planner.search.candidate_warnings import warnings_for
from mla_planner.search.layouts import candidate_layouts
from mla_planner.search.pareto import pareto_front, tradeoff_curve
from mla_planner.search.tuning import Overrides, Tuned, dense_variants, tune
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import ENGINES, Workload
from mla_planner.specs.layout import Layout, layout_problems
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

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
    bands: dict = field(default_factory=dict)   # name_low / name_high of its decode figures (search.ranking)
    tie_group: int = 0         # the rank of the first candidate it is tied with (bands overlap); 0 when not tied

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
    rejected: list[Rejection]          # most telling first
    points: list                       # TradeoffPoint: each option's throughput/latency curve
    pareto: list                       # indices into points: the front of tokens/s per GPU vs per user
    screened: int
    disaggregated: list = field(default_factory=list)   # search.disagg.Disaggregated, best first
    crossover_nodes: Optional[int] = None   # the fewest nodes on which disaggregated serving wins (search.disagg)


def kv_dtypes_for(topo: Topology, requested: str | None, spec: ModelSpec | None = None) -> list[str]:
    """The KV dtypes the search tries: the one asked for, else bf16 and fp8 where the GPU has FP8; DeepSeek-V4 only
    fp8 (both engines keep its rows in one fp8 layout, auto included)."""
    if spec is not None and is_compressed(spec):
        return ["fp8"]
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


def _engine_problem(layout: Layout, engine: str, topo: Topology) -> str | None:
    if layout.kv_layout == "latent-sharded":
        return ("no engine implements latent-width sharding (the seed's Route B): vLLM and SGLang replicate "
                "the latent per TP rank, or split it by request (DP attention) or by token (DCP)")
    return launch_problem(engine, layout, topo.gpus_per_node) or None


def search(spec: ModelSpec, topo: Topology, workload: Workload, calib: Calibration,
           engines: tuple = ENGINES, kv_dtype: str | None = None, layouts: list[Layout] | None = None,
           tuned_per_engine: int = TUNED_PER_ENGINE, pinned: Overrides = Overrides(),
           rank_by: str = "per-gpu", model_path: str | None = None) -> SearchResult:
    legal, illegal = candidate_layouts(spec, topo) if layouts is None else _given(spec, topo, layouts)
    rejected = []     # most telling first: what failed in tuning, then screening; layouts that cannot exist last
    not_tuned: dict = {}   # (layout, engine, KV dtype, dense per rank) -> why: what a kept way's reason cites

    def reject(layout: Layout, engine: str, kv: str, per_rank: bool, reason: str, first: bool = False) -> None:
        rejected.insert(0 if first else len(rejected), Rejection(_label(layout, engine, per_rank), engine, kv, reason))
        not_tuned[layout, engine, kv, per_rank] = reason

    bounds: dict = {e: [] for e in engines}
    screened = 0
    for layout in legal:
        for engine in engines:
            problem = _engine_problem(layout, engine, topo)
            for kv in kv_dtypes_for(topo, kv_dtype, spec):
                if problem:
                    rejected.append(Rejection(layout.label, engine, kv, problem))
                    continue
                for per_rank in dense_variants(layout, engine):
                    try:
                        screened += 1
                        bounds[engine].append((*screen(spec, topo, layout, engine, kv, workload, calib, pinned,
                                                        per_rank), layout, kv, per_rank))
                    except Rejected as exc:
                        reject(layout, engine, kv, per_rank, str(exc))
    options, siblings = [], {}    # (layout, draft chunk) -> the draft batch of its last tuning: a hint
    def weight(layout: Layout) -> int:   # per-GPU bounds to the ranking's unit (tokens/s per GPU, or in all)
        return layout.total_gpus if rank_by == "total" else 1

    for engine in engines:
        ranked = sorted(bounds[engine], key=lambda t: (-t[0] * weight(t[3]), t[3].label, t[4], t[5]))
        best, tuned = 0.0, set()      # (layout, KV dtype) tuned at least one way
        for i, (bound, knobs, batch, layout, kv, per_rank) in enumerate(ranked):
            tuned_n = len(tuned)
            if tuned_n >= tuned_per_engine and bound * weight(layout) <= best:
                for b, _, _, lay, k, pr in ranked[i:]:
                    reject(lay, engine, k, pr, _screened_out(engine, b * weight(lay), best, rank_by,
                                                             "decoding without prefill with the whole KV pool busy"))
                break
            above = 0
            if tuned_n >= tuned_per_engine and workload.tpot_applies:
                tight, above = target_bound(spec, topo, layout, knobs, batch, workload, calib,
                                             best / weight(layout))
                if tight * weight(layout) <= best:
                    reject(layout, engine, kv, per_rank, _screened_out(
                        engine, tight * weight(layout), best, rank_by,
                        "decoding without prefill at the largest batch within the TPOT target"))
                    continue
            try:
                sibling = (layout, knobs.max_num_batched_tokens, per_rank)    # same layout, same draft chunk
                got = tune(spec, topo, layout, engine, kv, workload, calib, pinned, above, siblings.get(sibling, 0),
                           per_rank)
                siblings[sibling] = got.draft_batch
                warned = warnings_for(spec, topo, layout, got, workload, model_path)
                options.append(Option(layout, engine, kv, got, warned, shortfall(got.metrics, workload)))
                tuned.add((layout, kv))
                if got.metrics.meets_targets:
                    best = max(best, got.metrics.throughput_tokens_per_s_per_gpu * weight(layout))
            except Rejected as exc:   # got furthest: listed first, as the most telling reasons
                reject(layout, engine, kv, per_rank, str(exc), first=True)
    rejected += [Rejection(lay.label, "any", "any", why) for lay, why in illegal]
    options = rank(_one_dense_variant(options, rank_by, not_tuned), rank_by, topo, workload)
    points = [p for i, o in enumerate(options[:CURVES_FOR])
              for p in tradeoff_curve(spec, topo, i, o, workload, calib)]
    front = pareto_front([(p.throughput(rank_by), p.tokens_per_s_per_user) for p in points])
    return SearchResult(options, rejected, points, front, screened)


def _label(layout: Layout, engine: str, per_rank: bool) -> str:
    """The layout's label, naming the way SGLang runs its dense parts where both ways are tuned."""
    if not dense_per_rank_applies(layout, engine):
        return layout.label
    return layout.label + (" (dense per rank)" if per_rank else " (dense split)")


def _one_dense_variant(options: list, rank_by: str, not_tuned: dict) -> list:
    """Of a layout tuned both with and without SGLang's dense parts per rank, the better one - the engine's
    default unless the other serves over 1 % more where both meet the targets - its reason saying what the
    other way served (or why it was not tuned)."""
    groups: dict = {}
    for o in options:
        groups.setdefault((o.layout, o.engine, o.kv_dtype), []).append(o)
    out = []
    for group in groups.values():
        best = min(group, key=lambda o: o.key_for(rank_by))
        default = next((o for o in group if not o.tuned.knobs.dense_per_rank), best)
        m, d = best.tuned.metrics, default.tuned.metrics
        if m.meets_targets and d.meets_targets and m.throughput_tokens_per_s < 1.01 * d.throughput_tokens_per_s:
            best = default
        why, mine = dict(best.tuned.reasons), best.tuned.metrics.throughput_tokens_per_s_per_gpu
        for other in [o for o in group if o is not best]:
            m, way = other.tuned.metrics, "per rank" if other.tuned.knobs.dense_per_rank else "split over the stage"
            why["dense_per_rank"] += (f"; {way} was tuned too: {m.throughput_tokens_per_s_per_gpu:,.0f} output tok/s "
                                      f"per GPU ({m.throughput_tokens_per_s_per_gpu / mine - 1:+.1%})"
                                      + ("" if m.meets_targets else ", missing the targets")
                                      + ("; within 1 %, SGLang's default is kept" if other.tuned.knobs.dense_per_rank
                                         and m.meets_targets and best.tuned.metrics.meets_targets
                                         and m.throughput_tokens_per_s_per_gpu >= mine else ""))
        if len(group) == 1 and "dense_per_rank" in why:
            key = (best.layout, best.engine, best.kv_dtype, not best.tuned.knobs.dense_per_rank)
            why["dense_per_rank"] += f"; the other way was not tuned: {not_tuned.get(key, 'not tuned')}"
        out.append(replace(best, tuned=replace(best.tuned, reasons=why)))
    return out


def _screened_out(engine: str, bound: float, best: float, rank_by: str, how: str) -> str:
    unit = "output tokens/s in all" if rank_by == "total" else "output tokens/s per GPU"
    return (f"screened out: at most {bound:,.0f} {unit} even {how}, not above the {best:,.0f} of a tuned "
            f"{engine} candidate")
