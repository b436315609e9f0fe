"""A mapping read from a user's file, validated into a record (a pydantic model, or a dataclass whose fields
carry core.files' checked types), and pydantic's first complaint turned into one InputError line.

pydantic is imported at the first validation, not with this module: the built-in data (models, GPUs,
topologies) is built directly, so a plan on built-ins never loads it (about 0.1 s of a 2-core machine's start-up;
benchmarks/startup.py). tests/shape.py allows this one deferred import.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import TYPE_CHECKING, Any, get_args, get_type_hints

from mla_planner.core.errors import FieldError, InputError, did_you_mean

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError

UNKNOWN_FIELD = ("extra_forbidden", "unexpected_keyword_argument")   # a pydantic model's, a dataclass's


def validate(kind: type, data: dict, where: str) -> Any:
    """Build KIND (a pydantic model or a dataclass) from DATA, turning the first validation error into one
    InputError line that names WHERE (the file) and the field."""
    from pydantic import ValidationError
    try:
        if _is_model(kind):
            return kind.model_validate(data)
        return _adapter(kind).validate_python(data)
    except ValidationError as exc:
        raise pydantic_to_input_error(exc, kind, where) from None


@lru_cache(maxsize=None)
def _adapter(kind: type) -> TypeAdapter:
    from pydantic import TypeAdapter
    return TypeAdapter(kind)


def _is_model(kind: Any) -> bool:
    """Whether KIND is a pydantic model class (pydantic's own `model_validate`), not a dataclass."""
    return isinstance(kind, type) and hasattr(kind, "model_validate") and hasattr(kind, "model_fields")


def pydantic_to_input_error(exc: ValidationError, kind: type, where: str) -> InputError:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or None
    if err["type"] in UNKNOWN_FIELD:
        known = field_names(kind, err["loc"][:-1])
        return InputError(where, "unknown field" + did_you_mean(err["loc"][-1], known), loc)
    msg = err["msg"].removeprefix("Value error, ")
    raised = err.get("ctx", {}).get("error")
    if isinstance(raised, FieldError):   # a record's own check on one field: name it as pydantic names fields
        loc = ".".join(p for p in (loc, raised.field) if p)
    return InputError(where, msg, loc)


def field_names(kind: type, parents: tuple = ()) -> list[str]:
    """Field names of the (possibly nested, possibly Optional) record an unknown key sits in."""
    for part in parents:
        ann = _fields(kind).get(str(part)) if isinstance(part, str) else None
        nested = [a for a in (ann, *get_args(ann)) if isinstance(a, type) and _fields(a)]
        if not nested:
            return []
        kind = nested[0]
    return list(_fields(kind))


def _fields(kind: Any) -> dict:
    """name -> annotation of a pydantic model's or a dataclass's fields ({} for anything else)."""
    if _is_model(kind):
        return {name: f.annotation for name, f in kind.model_fields.items()}
    if dataclasses.is_dataclass(kind):   # annotations are text under `from __future__ import annotations`
        return {f.name: get_type_hints(kind).get(f.name, f.type) for f in dataclasses.fields(kind)}
    return {}
