"""Reading user files: YAML/JSON with safe_load, paths the user typed, and the checked field types the file
records declare (core/validation.py turns a mapping into a record, with one-line errors). No pydantic here:
the built-in models load without it (`mla-plan models` starts fast). PyYAML is imported where a text is first
parsed or written (about 10 ms of a 2-core machine's start): a plan on built-ins whose parsed data files are
kept (core/resources.read_data) never needs it."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Union, get_args, get_origin, get_type_hints

from mla_planner.core.errors import InputError, PlanError


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


@lru_cache(maxsize=None)
def float_fields(kind: type) -> tuple[str, ...]:
    """The fields of the dataclass KIND typed float (checked or optional floats too)."""
    hints = get_type_hints(kind)
    return tuple(name for name, hint in hints.items()
                 if hint is float or (get_origin(hint) is Union and float in get_args(hint)))


def with_floats(record) -> None:
    """Make RECORD's float fields floats, as pydantic's validation of a user's file does: a record built directly
    from the package's own YAML (a GPU, a topology) may hold an int there, or text (YAML 1.1 reads `3.35e12`,
    without a sign in the exponent, as a string). Called from the record's `__post_init__`."""
    for name in float_fields(type(record)):
        value = getattr(record, name)
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            object.__setattr__(record, name, float(value))


# Counts and flags in user files are checked by type, not coerced: `true` is not 1 and "512" is not 512
# (pydantic's lax mode would take both). Floats stay lax, as PyYAML reads `3e12` as the string "3e12". A count
# is at most 2**31 (vocabularies, context lengths and dimensions are far below): a 400-digit one is not a count,
# and overflowed the float arithmetic it reached.
MAX_COUNT = 2**31
PosInt = Annotated[int, Checked(strict=True, gt=0, le=MAX_COUNT)]
NonNegInt = Annotated[int, Checked(strict=True, ge=0, le=MAX_COUNT)]
Flag = Annotated[bool, Checked(strict=True)]


def parse_yaml(text: str):
    """yaml.safe_load(TEXT), parsed by libyaml where PyYAML was built with it (the same data, ~10x faster: the
    built-in moe_kernel_configs.yaml 20 ms -> 1.5 ms); a text libyaml refuses is parsed again by safe_load, so an
    error (and the line it names) is exactly safe_load's. For the built-in data files (core/resources.read_data);
    a user's file goes through `parse_user_data`."""
    import yaml
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return yaml.safe_load(text)


def dump_yaml(data, sort_keys: bool = False) -> str:
    """DATA as YAML (yaml.safe_dump): a plan file, a calibration file, the bands file."""
    import yaml
    return yaml.safe_dump(data, sort_keys=sort_keys)


def dump_yaml_documents(documents: list) -> str:
    """DOCUMENTS as one multi-document YAML text (yaml.safe_dump_all): a Kubernetes manifest."""
    import yaml
    return yaml.safe_dump_all(documents, sort_keys=False)


@lru_cache(maxsize=None)
def _no_alias_loader() -> type:
    """safe_load's loader, refusing YAML aliases (`*name`): a 1 KB file of nested aliases expands to gigabytes of
    repeated values (the "billion laughs"), and no planner file needs one; and refusing a key given twice in one
    mapping, which safe_load resolves silently to the last."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not accepted: write the "
                                                              "value out", event.start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:     # keys compared as they load: 1, 01 and 1.0; true and yes; null, ~
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise DuplicateKey(f"{key_node.value!r} is given twice in one mapping "
                                       f"(line {key_node.start_mark.line + 1})")
                seen.add(key)
            return super().construct_mapping(node, deep)
    return NoAliasLoader


class DuplicateKey(ValueError):
    """A key given twice in one mapping of a user's file (YAML or JSON): refused, not the last one taken."""


def _unique_keys(pairs: list) -> dict:
    """json.loads' object_pairs_hook: the object, or DuplicateKey."""
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(k for k in keys if keys.count(k) > 1)
        raise DuplicateKey(f"{twice!r} is given twice in one object")
    return dict(pairs)


def parse_user_data(text: str, where: str, as_json: bool):
    """A user's file parsed: JSON (json.loads) or YAML (safe_load without aliases). One InputError for text
    that does not parse, for nesting deeper than Python can walk, and for an alias."""
    try:
        return _text_only(_parse_json(text, where) if as_json else _parse_user_yaml(text, where), where)
    except RecursionError:
        raise InputError(where, f"is not usable {'JSON' if as_json else 'YAML'}: nested too deeply") from None


def _parse_json(text: str, where: str):
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except DuplicateKey as exc:
        raise InputError(where, str(exc)) from None
    except ValueError:
        raise InputError(where, "is not valid JSON") from None


def _parse_user_yaml(text: str, where: str):
    import yaml
    try:
        return yaml.load(text, Loader=_no_alias_loader())
    except DuplicateKey as exc:
        raise InputError(where, str(exc)) from None
    except yaml.composer.ComposerError as exc:
        if "aliases" in str(exc.problem):
            raise InputError(where, f"{exc.problem} (line {exc.problem_mark.line + 1})") from None
        raise InputError(where, f"is not valid YAML{_line(exc)}") from None
    except (yaml.YAMLError, ValueError) as exc:
        raise InputError(where, f"is not valid YAML{_line(exc)}") from None


def _text_only(data, where: str):
    """DATA, once no string in it holds a lone surrogate: JSON's "\\udcff" and YAML's "\\uDCFF" escapes parse to
    one, which is not text (it cannot be printed or written back as UTF-8)."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack += [*node.keys(), *node.values()]
        elif isinstance(node, list):
            stack += node
        elif isinstance(node, str) and any("\ud800" <= c <= "\udfff" for c in node):
            raise InputError(where, f"holds \"{node.encode('utf-8', 'backslashreplace').decode()[:40]}\": a lone "
                                    "surrogate escape is not text")
    return data


def _line(exc: Exception) -> str:
    line = getattr(getattr(exc, "problem_mark", None), "line", None)
    return f" at line {line + 1}" if line is not None else ""


def user_path(text: str) -> Path:
    """A path the user typed, `~` expanded; a `~user` that does not exist is one clear error."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise InputError(str(text), "cannot expand '~': no such user") from None


def path_kind(path: Path) -> str:
    """'file' (a regular file), 'dir', 'other' (a FIFO, device or socket: reading one blocks or never ends)
    or 'missing' - and a path the OS refuses (too long, bad bytes) is one clear error."""
    try:
        if path.is_dir():
            return "dir"
        return "file" if path.is_file() else "other" if path.exists() else "missing"
    except (OSError, ValueError) as exc:
        raise InputError(str(path)[:200], f"not a usable path ({getattr(exc, 'strerror', None) or exc})") from None


# The largest file a reader takes: far above any config.json, topology, plan or calibration file (a plan of
# every candidate is well under 1 MiB), and above any engine log or benchmark result a user would check.
MAX_DATA_BYTES = 64 * 2**20
MAX_TEXT_BYTES = 512 * 2**20


def read_user_text(path: Path, where: str, limit: int, errors: str = "strict") -> str:
    """The text of a regular file the user named, at most LIMIT bytes; one InputError for a missing file, a
    folder, a FIFO or device, a file too large, or bytes that are not UTF-8 (unless ERRORS replaces them)."""
    kind = path_kind(path)
    if kind != "file":
        raise InputError(where, {"missing": "no such file", "dir": "is a folder, expected a file",
                                 "other": "is not a regular file (a FIFO, device or socket)"}[kind])
    try:
        size = path.stat().st_size
        if size > limit:
            raise InputError(where, f"is {size / 2**20:,.0f} MiB, more than the {limit / 2**20:,.0f} MiB a "
                                    "reader takes")
        data = path.read_bytes()
        # a UTF-16 file (PowerShell's `>` writes one) says so by its byte-order mark; UTF-8's own mark is dropped
        encoding = "utf-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
        return data.decode(encoding, errors=errors)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(where, f"cannot be read as UTF-8 text ({exc.__class__.__name__})") from None


def read_mapping(path: Path) -> dict:
    """Parse a YAML (or JSON, a YAML subset) file that must hold a mapping."""
    where = str(path)
    text = read_user_text(path, where, MAX_DATA_BYTES)
    if not text.strip():
        raise InputError(where, "is empty, expected a mapping of fields")
    data = parse_user_data(text, where, path.suffix == ".json")
    if not isinstance(data, dict):
        raise InputError(where, f"expected a mapping of fields, found {type(data).__name__}")
    return data


def read_text_file(name: str) -> str:
    """A text file the user named (a log, a benchmark result): one clear error for a missing file, a folder, a
    FIFO or device, one too large, or one that cannot be read; undecodable bytes replaced."""
    return read_user_text(user_path(name), name, MAX_TEXT_BYTES, errors="replace")


def atomic_write(path: Path, text: str, flag: str) -> None:
    """Write `text` to a temporary file in path's folder, fsync, then rename over `path`; on any failure
    the temporary file is removed and `path` is left as it was (PlanError naming FLAG for an OS error: a
    permission, a full disk, a file-size limit)."""
    if not path.parent.is_dir():
        raise PlanError(f"{flag} {path}: folder {path.parent} does not exist")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, _file_mode(path))     # mkstemp's 0600 would hide a shared calibration from its other readers
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
        if isinstance(exc, OSError):
            why = exc.strerror or exc
            raise PlanError(f"{flag} {path}: cannot write ({why}); nothing written") from None
        raise


def _file_mode(path: Path) -> int:
    """The mode a file written over PATH keeps: the replaced file's, else what open() would give (0666 less the
    umask)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
