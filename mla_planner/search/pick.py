"""Choosing a candidate of a plan by number or engine, as the commands that read a plan file take it (`emit`,
`compare --plan`, `check-log`, `verify`, `calibrate`)."""

from __future__ import annotations

from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.search.planfile import Candidate, Plan
from mla_planner.specs.knobs import ENGINES


def pick(plan: Plan, candidate: int, where: str) -> Candidate:
    """1-based candidate index, as the plan table numbers them."""
    if not plan.candidates:
        first = plan.rejected[0].reason if plan.rejected else "nothing fits"
        raise PlanError(f"{where}: the plan has no candidates (every layout was rejected; the first: {first}); "
                        "see its 'rejected' list")
    if not 1 <= candidate <= len(plan.candidates):
        raise PlanError(f"{where}: --candidate {candidate} is out of range 1..{len(plan.candidates)}")
    return plan.candidates[candidate - 1]


def engine_candidate(plan: Plan, candidate: Optional[int], engine: Optional[str], where: str) -> int:
    """The 1-based candidate to use: `candidate` when given, else the best planned for `engine`, else 1."""
    if engine is not None and engine not in ENGINES:
        raise PlanError(f"{where}: engine '{engine}' is not one of {', '.join(ENGINES)}")
    if candidate is not None or engine is None:
        return 1 if candidate is None else candidate
    for i, c in enumerate(plan.candidates):
        if c.knobs.engine == engine:
            return i + 1
    raise PlanError(f"{where}: this plan has no {engine} candidate; re-run `mla-plan plan --engine {engine}`")


def pick_for_engine(plan: Plan, candidate: int, engine: Optional[str], where: str) -> Candidate:
    """`pick`, refusing a candidate planned for another engine (its knobs mean other things there).
    `engine=None`: the candidate's own engine."""
    if engine is not None and engine not in ENGINES:
        raise PlanError(f"{where}: engine '{engine}' is not one of {', '.join(ENGINES)}")
    cand = pick(plan, candidate, where)
    planned = cand.knobs.engine
    if engine is None or engine == planned:
        return cand
    others = [f"#{i + 1}" for i, c in enumerate(plan.candidates) if c.knobs.engine == engine]
    choose = (f"choose a {engine} candidate ({', '.join(others)} in this plan) or " if others
              else f"this plan has no {engine} candidate; ")
    raise PlanError(f"{where}: candidate {candidate} was planned for {planned} (its backend, block size and memory "
                    f"fraction are {planned}'s); {choose}re-run `mla-plan plan --engine {engine}`")
