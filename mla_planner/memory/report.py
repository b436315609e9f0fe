"""The memory report a command shows: the accounting of every stage (`accounting.evaluate`), and where the
layout does not fit, the cheapest ways out (`ways_out`), or where it does, a better layer split."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from mla_planner.memory.accounting import evaluate
from mla_planner.memory.results import MemoryReport
from mla_planner.memory.ways_out import split_note, ways_out
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


def memory_report(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs,
                  engine_version: Optional[str] = None) -> MemoryReport:
    """Per-GPU memory, the KV capacity the engine will report, a FITS verdict and, when it does not
    fit, the cheapest ways out found by re-running this model on the alternatives."""
    report = evaluate(spec, topo, layout, knobs, engine_version)
    if not report.per_gpu:
        return report
    note = split_note(spec, topo, layout, knobs, report, engine_version) if report.fits else ""
    report = replace(report, notes=report.notes + [note]) if note else report
    if report.fits:
        return report
    return replace(report, ways_out=ways_out(spec, topo, layout, knobs, engine_version))
