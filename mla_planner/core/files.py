"""Reading user files: YAML/JSON with safe_load, and pydantic errors turned into one-line InputErrors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, get_args

import yaml
from pydantic import BaseModel, Field, ValidationError

from mla_planner.core.errors import InputError, did_you_mean

# Counts and flags in user files are checked by type, not coerced: `true` is not 1 and "512" is not 512
# (pydantic's lax mode would take both). Floats stay lax, as PyYAML reads `3e12` as the string "3e12".
PosInt = Annotated[int, Field(strict=True, gt=0)]
NonNegInt = Annotated[int, Field(strict=True, ge=0)]
Flag = Annotated[bool, Field(strict=True)]

# libyaml's parser, where PyYAML was built with it: the same data as yaml.safe_load, ~10x faster (the built-in
# moe_kernel_configs.yaml: 20 ms -> 1.5 ms), which every CLI call pays for each file it reads.
_FAST_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str):
    """yaml.safe_load(TEXT), parsed by libyaml when it can; a text libyaml refuses is parsed again by
    safe_load, so an error (and the line it names) is exactly safe_load's."""
    try:
        return yaml.load(text, Loader=_FAST_SAFE_LOADER)
    except yaml.YAMLError:
        return yaml.safe_load(text)


def user_path(text: str) -> Path:
    """A path the user typed, `~` expanded; a `~user` that does not exist is one clear error."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise InputError(str(text), "cannot expand '~': no such user") from None


def path_kind(path: Path) -> str:
    """'file', 'dir' or 'missing' - and a path the OS refuses (too long, bad bytes) is one clear error."""
    try:
        return "dir" if path.is_dir() else "file" if path.exists() else "missing"
    except (OSError, ValueError) as exc:
        raise InputError(str(path)[:200], f"not a usable path ({getattr(exc, 'strerror', None) or exc})") from None


def read_mapping(path: Path) -> dict:
    """Parse a YAML (or JSON, a YAML subset) file that must hold a mapping."""
    where = str(path)
    kind = path_kind(path)
    if kind == "missing":
        raise InputError(where, "no such file")
    if kind == "dir":
        raise InputError(where, "is a folder, expected a file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(where, f"cannot be read as UTF-8 text ({exc.__class__.__name__})") from None
    if not text.strip():
        raise InputError(where, "is empty, expected a mapping of fields")
    try:
        data = json.loads(text) if path.suffix == ".json" else parse_yaml(text)
    except (yaml.YAMLError, ValueError) as exc:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        at = f" at line {line + 1}" if line is not None else ""
        raise InputError(where, f"is not valid {kind}{at}") from None
    if not isinstance(data, dict):
        raise InputError(where, f"expected a mapping of fields, found {type(data).__name__}")
    return data


def validate(model: type[BaseModel], data: dict, where: str) -> BaseModel:
    """Build a pydantic model, turning the first validation error into one InputError line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise pydantic_to_input_error(exc, model, where) from None


def pydantic_to_input_error(exc: ValidationError, model: type[BaseModel], where: str) -> InputError:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or None
    if err["type"] == "extra_forbidden":
        known = _known_fields(model, err["loc"][:-1])
        return InputError(where, "unknown field" + did_you_mean(err["loc"][-1], known), loc)
    msg = err["msg"].removeprefix("Value error, ")
    return InputError(where, msg, loc)


def _known_fields(model: type[BaseModel], parents: tuple) -> list[str]:
    """Field names of the (possibly nested, possibly Optional) model an unknown key sits in."""
    for part in parents:
        field = model.model_fields.get(str(part)) if isinstance(part, str) else None
        ann = getattr(field, "annotation", None) if field else None
        nested = [a for a in (ann, *get_args(ann)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            return []
        model = nested[0]
    return list(model.model_fields)
