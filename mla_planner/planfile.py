"""The plan file: what `plan --json` writes and `emit` / `verify` read back.

A plan carries everything needed to act on it without re-running the search: the model spec and the
path an engine should serve, the full topology, the workload, and the ranked candidates (layout,
knobs, predicted memory and performance, warnings). Read back with pydantic so a hand-edited or
foreign file fails with one line naming the field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from . import __version__
from .errors import PlanError
from .knobs import Knobs, Workload
from .layout import Layout
from .spec import ModelSpec
from .topology import Topology
from .yamlio import read_mapping, validate

Loose = ConfigDict(extra="ignore")


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    knobs: Knobs
    memory: dict[str, Any] = field(default_factory=dict)
    performance: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    spec: ModelSpec
    model_path: str
    topology: Topology
    workload: Workload
    candidates: list[Candidate]
    rejected: list[dict] = field(default_factory=list)


class _CandidateIn(BaseModel):
    model_config = Loose
    layout: dict
    knobs: dict
    memory: dict = {}
    performance: dict = {}
    warnings: list[str] = []
    reasons: list[str] = []


class _ModelIn(BaseModel):
    model_config = Loose
    model_path: str
    spec: ModelSpec


class _PlanIn(BaseModel):
    model_config = Loose
    model: _ModelIn
    topology: Topology
    workload: dict
    candidates: list[_CandidateIn]
    rejected: list[dict] = []


def plan_to_dict(plan: Plan) -> dict:
    return {"mla_plan_version": __version__,
            "model": {"name": plan.spec.name, "model_path": plan.model_path, "spec": plan.spec.model_dump()},
            "topology": plan.topology.model_dump(),
            "workload": asdict(plan.workload),
            "candidates": [{"rank": i + 1, "label": c.layout.label, "layout": asdict(c.layout),
                            "knobs": asdict(c.knobs), "memory": c.memory, "performance": c.performance,
                            "warnings": c.warnings, "reasons": c.reasons}
                           for i, c in enumerate(plan.candidates)],
            "rejected": plan.rejected}


def _dataclass_from(cls, data: dict, where: str, what: str):
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise PlanError(f"{where}: {what}: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise PlanError(f"{where}: {what}: {exc}") from None


def read_plan(path: str | Path) -> Plan:
    """Load a plan JSON/YAML written by `mla-plan plan --json` (or `--yaml`)."""
    where = str(path)
    raw = validate(_PlanIn, read_mapping(Path(path)), where)
    cands = [Candidate(_dataclass_from(Layout, c.layout, where, f"candidates.{i}.layout"),
                       _dataclass_from(Knobs, c.knobs, where, f"candidates.{i}.knobs"),
                       c.memory, c.performance, c.warnings, c.reasons)
             for i, c in enumerate(raw.candidates)]
    workload = _dataclass_from(Workload, raw.workload, where, "workload")
    return Plan(raw.model.spec, raw.model.model_path, raw.topology, workload, cands, raw.rejected)


def pick(plan: Plan, candidate: int, where: str) -> Candidate:
    """1-based candidate index, as the plan table numbers them."""
    if not plan.candidates:
        raise PlanError(f"{where}: the plan has no candidates (nothing fits); see its 'rejected' list")
    if not 1 <= candidate <= len(plan.candidates):
        raise PlanError(f"{where}: --candidate {candidate} is out of range 1..{len(plan.candidates)}")
    return plan.candidates[candidate - 1]
