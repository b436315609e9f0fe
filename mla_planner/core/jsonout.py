"""The one place a result becomes JSON: every `--json` output and every plan file leads with
`schema_version`, the version of the shapes docs/json.md documents. It is raised when a field is removed or
changes meaning; an added field does not raise it."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from mla_planner.core.errors import PlanError

SCHEMA_VERSION = 1


def versioned(data: dict) -> dict:
    """DATA with `schema_version` as its first key."""
    return {"schema_version": SCHEMA_VERSION, **{k: v for k, v in data.items() if k != "schema_version"}}


def dumps(data: dict, indent: int = 2) -> str:
    """DATA as versioned JSON text; dataclasses and pydantic models inside are written as their fields. Strict JSON:
    a NaN or infinity (which json.dumps would write as the non-JSON `NaN` / `Infinity`) is refused, one line,
    rather than written for a strict parser to choke on; the readers refuse what would produce one."""
    try:
        return json.dumps(versioned(data), indent=indent, sort_keys=False, default=_jsonable, allow_nan=False)
    except ValueError as exc:
        raise PlanError(f"a figure of this result is not a finite number, so it has no JSON form ({exc}); "
                        "please report the command that gave it") from None


def _jsonable(obj: Any):
    if hasattr(obj, "model_dump"):   # a pydantic model (the validation points' records)
        return obj.model_dump()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
