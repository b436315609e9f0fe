"""Reading user files: YAML/JSON with safe_load, paths the user typed, and the checked field types the file
records declare (core/validation.py turns a mapping into a record, with one-line errors). No pydantic here:
the built-in models load without it (`mla-plan models` starts fast)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import yaml

from mla_planner.core.errors import InputError


class Checked:
    """Constraints on a field, as pydantic applies them when it validates a file into a record:
    `Annotated[int, Checked(strict=True, gt=0)]`. pydantic asks the annotation's metadata for its core schema
    (`__get_pydantic_core_schema__`, pydantic's documented hook for custom types); the constraints are that
    schema's own keys (strict, gt, ge, min_length), so declaring a checked field imports no pydantic."""

    def __init__(self, **constraints):
        self.constraints = constraints

    def __get_pydantic_core_schema__(self, source, handler):
        return {**handler(source), **self.constraints}

    def __repr__(self) -> str:
        return f"Checked({', '.join(f'{k}={v!r}' for k, v in self.constraints.items())})"


# Counts and flags in user files are checked by type, not coerced: `true` is not 1 and "512" is not 512
# (pydantic's lax mode would take both). Floats stay lax, as PyYAML reads `3e12` as the string "3e12".
PosInt = Annotated[int, Checked(strict=True, gt=0)]
NonNegInt = Annotated[int, Checked(strict=True, ge=0)]
Flag = Annotated[bool, Checked(strict=True)]

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


def read_text_file(name: str) -> str:
    """A text file the user named (a log, a benchmark result): one clear error for a missing file, a folder, or
    one that cannot be read; undecodable bytes replaced."""
    path = user_path(name)
    kind = path_kind(path)
    if kind != "file":
        raise InputError(name, "is a folder, not a file" if kind == "dir" else "no such file")
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(name, f"cannot be read ({exc.strerror or exc})") from None
