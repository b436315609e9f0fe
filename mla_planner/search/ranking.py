"""The ranking of tuned candidates, with how sure each figure is (perf/bands.py).

Candidates are first ordered as before (`Option.key_for`: those meeting the targets first, by output tokens/s per
GPU or in all). A lead smaller than the predictions' error is no win: among the candidates meeting the targets, one
whose throughput band overlaps the band of the group's best prediction (its optimistic end reaches that one's
pessimistic end) joins the group as a tie, and a tie is ordered by the lower risk: the higher pessimistic end of
its band (a narrower, or more pessimistic, band first). Two members of a group need not overlap each other. A
candidate whose TPOT or TTFT band reaches past its target says so.
"""

from __future__ import annotations

from dataclasses import replace

from mla_planner.perf.bands import performance_bands
from mla_planner.specs.knobs import Workload
from mla_planner.specs.topology import Topology


def throughput_key(rank_by: str) -> str:
    """The figure the ranking orders by: output tokens/s per GPU, or in all."""
    return "throughput_tokens_per_s" if rank_by == "total" else "throughput_tokens_per_s_per_gpu"


def with_bands(option, topo: Topology, workload: Workload):
    """The option with its bands, and the warning when a target holds only inside the band."""
    m = option.tuned.metrics
    bands = performance_bands(m, topo)
    warnings = list(option.warnings)
    if m.meets_targets:
        warnings += band_warnings(workload, m.tpot_s, bands["tpot_s_low"], bands["tpot_s_high"], m.ttft_longest_s,
                                  bands["ttft_longest_s_high"])
    return replace(option, bands=bands, warnings=warnings)


def band_warnings(workload: Workload, tpot_s: float, tpot_low: float, tpot_high: float, ttft_s: float,
                  ttft_high: float) -> list[str]:
    """What a prediction meeting the targets says where its band (perf/bands.py) reaches past one of them: an
    aggregated candidate's, or a disaggregated deployment's (search/deployment.py)."""
    out, target = [], workload.tpot_ms / 1e3
    if workload.tpot_applies and tpot_high > target:
        firm = workload.tpot_ms * tpot_s / tpot_high
        where = "lies above it" if tpot_low > target else "reaches past it"
        out.append(f"predicted to meet the {workload.tpot_ms:g} ms TPOT target, but its band "
                   f"({tpot_low * 1e3:,.1f}-{tpot_high * 1e3:,.1f} ms) {where}: the engines measured up to "
                   f"{tpot_high / tpot_s - 1:.0%} slower than the model on published runs like it "
                   f"(mla-plan validate); to have {workload.tpot_ms:g} ms measured, plan with --tpot-ms {firm:.0f}")
    if ttft_high > workload.ttft_ms / 1e3:
        out.append(f"predicted to meet the {workload.ttft_ms:g} ms TTFT target, but its band reaches past it: "
                   f"published mean TTFTs were up to {ttft_high / max(ttft_s, 1e-9):.1f}x the model's (a loaded "
                   f"server's queueing grows faster than it prices), so it may measure up to {ttft_high * 1e3:,.0f} "
                   "ms (mla-plan validate)")
    return out


def rank(options: list, rank_by: str, topo: Topology, workload: Workload) -> list:
    """Options best first, ties marked (`tie_group`: the rank of the group's first, 0 when alone)."""
    key = throughput_key(rank_by)
    ordered = [with_bands(o, topo, workload) for o in sorted(options, key=lambda o: o.key_for(rank_by))]
    meeting = [o for o in ordered if o.tuned.metrics.meets_targets]
    groups: list[list] = []
    for o in meeting:
        if groups and o.bands[f"{key}_high"] >= groups[-1][0].bands[f"{key}_low"]:
            groups[-1].append(o)
        else:
            groups.append([o])
    out = []
    for group in groups:
        group.sort(key=lambda o: -o.bands[f"{key}_low"])
        first = len(out) + 1
        out += [replace(o, tie_group=first if len(group) > 1 else 0) for o in group]
    return out + ordered[len(meeting):]
