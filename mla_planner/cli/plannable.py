"""The refusal every pricing command makes first: a model or GPU the planner reads but cannot price for that
command. Kept apart from cli/common so the listings (`models`, `topologies`, `show`) start without the engine
tables and the topology schema this needs."""

from __future__ import annotations

from mla_planner.core.errors import PlanError
from mla_planner.engines.backends import gpu_problem
from mla_planner.specs.attention.kinds import planning_problem


def check_plannable(spec, command: str = "plan", gpu=None) -> None:
    """A model whose attention the planner reads but COMMAND cannot price yet, or a GPU whose engine paths it does
    not model for it (engines/backends.gpu_problem), is refused in one line."""
    problem = planning_problem(spec, command) or (gpu_problem(gpu, spec, command) if gpu is not None else "")
    if problem:
        raise PlanError(problem)
