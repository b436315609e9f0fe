"""The built-in model specs (mla_planner/data/models/NAME.yaml), built without pydantic.

They ship with the package and are checked where they are written: tests/test_builtin_specs.py validates
every one as a user's file is validated (core/validation.py) and holds the result equal to what is built
here. Building them directly keeps pydantic's import (about 0.1 s) off `mla-plan models`.
"""

from __future__ import annotations

from mla_planner.core.resources import data_dir, read_data
from mla_planner.specs.model import ModelSpec


def builtin_names() -> list[str]:
    return sorted(p.stem for p in data_dir("models").glob("*.yaml"))


def builtin_fields(name: str) -> dict:
    """The built-in spec NAME's fields as its file gives them (package data, parsed as the other built-in data
    files are: libyaml where PyYAML has it)."""
    return read_data(data_dir("models") / f"{name}.yaml")


def builtin_spec(name: str) -> ModelSpec:
    return ModelSpec(**builtin_fields(name))
