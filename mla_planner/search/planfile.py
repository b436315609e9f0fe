"""The plan file: what `plan --json` writes (`plan_to_dict`) and `emit` / `verify` read back
(search/planfile_read.py).

A plan carries everything needed to act on it without re-running the search: the model spec and the
path an engine should serve, the full topology, the workload, and the ranked candidates (layout,
knobs, predicted memory and performance, warnings).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from mla_planner import __version__
from mla_planner.core.jsonout import versioned
from mla_planner.engines.backends import engine_version
from mla_planner.search.candidate import CandidateMemory, DisaggCandidate, Performance, Rejection, written
from mla_planner.specs.knobs import ENGINES, Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    knobs: Knobs
    memory: Optional[CandidateMemory] = None       # None: a plan built by hand, without predictions
    performance: Optional[Performance] = None
    warnings: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    spec: ModelSpec
    model_path: str
    topology: Topology
    workload: Workload
    candidates: list[Candidate]
    rejected: list[Rejection] = field(default_factory=list)
    engine_versions: dict = field(default_factory=dict)   # the releases it was planned for (read back from a file)
    disaggregated: list[DisaggCandidate] = field(default_factory=list)   # prefill/decode pools, best first
    choice: Optional[dict] = None        # aggregated or disaggregated, and why (search.deployment.Choice's fields)
    calibration: dict = field(default_factory=dict)   # the calibration it was made with (specs.calibration.
                                                      # plan_calibration), which commands reading the file apply


def meets_targets(plan: Plan) -> bool:
    """Whether the best candidate (so, as those meeting the targets rank first, any) meets the targets."""
    best = plan.candidates[0] if plan.candidates else None
    return bool(best and best.performance and best.performance.meets_targets)


def plan_to_dict(plan: Plan) -> dict:
    """The plan file's content (what `plan --json` prints first and emit writes as plan.json)."""
    return versioned({"mla_plan_version": __version__,
            "engine_versions": plan.engine_versions or {e: engine_version(e) for e in ENGINES},
            "model": {"name": plan.spec.name, "model_path": plan.model_path, "spec": plan.spec.to_dict()},
            "topology": asdict(plan.topology),
            "workload": asdict(plan.workload),
            "candidates": [{"rank": i + 1, "label": c.layout.label, "layout": asdict(c.layout),
                            "knobs": asdict(c.knobs), "memory": written(c.memory),
                            "performance": written(c.performance),
                            "warnings": c.warnings, "reasons": c.reasons}
                           for i, c in enumerate(plan.candidates)],
            "rejected": [asdict(r) for r in plan.rejected],
            "disaggregated": [{"rank": i + 1, "label": d.label, "engine": d.engine, "ratio": d.ratio,
                               "pools": [{"role": p.role, "instances": p.instances,
                                          "nodes_per_instance": p.nodes_per_instance, "layout": asdict(p.layout),
                                          "knobs": asdict(p.knobs)} for p in (d.prefill, d.decode)],
                               "performance": written(d.performance), "reasons": d.reasons, "warnings": d.warnings}
                              for i, d in enumerate(plan.disaggregated)],
            "deployment": plan.choice or {},
            "calibration": plan.calibration})
