"""Where the built-in data lives (package data in a wheel, the repository folders in a checkout), and reading
one of its YAML files, parsed once and kept."""

from __future__ import annotations

import marshal
import os
import sys
import zlib
from pathlib import Path

from mla_planner.core.files import parse_yaml

_PKG = Path(__file__).resolve().parent.parent   # mla_planner/


def data_dir(name: str) -> Path:
    """`topologies` or `templates` (top-level in the repo, force-included into the wheel under the
    package) or a folder of `mla_planner/data` (models, gpus.yaml, backends.yaml)."""
    for candidate in (_PKG / "data" / name, _PKG / name, _PKG.parent / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"built-in data '{name}' is missing from the installation")


CACHE_FORMAT = 1   # raise when parse_yaml's result for the same text changes: every kept parse is parsed again


def read_data(path: Path):
    """The parsed content of one of the package's own YAML files (yaml.safe_load's value, through
    core.files.parse_yaml). Parsing the dozen a plan reads costs about 10 ms on a 2-core machine and importing
    PyYAML another 10 ms (benchmarks/startup.py), so the parsed value is kept as Python keeps a module's bytecode:
    marshal bytes in the folder's `__pycache__`, named for this Python (marshal's format is the interpreter's) and
    stamped with the text's length and CRC-32 and CACHE_FORMAT - by content, not modification time, which a wheel
    sets to one fixed date for every file (an upgrade that kept a file's size would keep its old parse). A stamp that
    no longer matches is parsed again. Nothing is written where Python writes no bytecode (PYTHONDONTWRITEBYTECODE,
    `python -B`), where the folder cannot be written (a read-only install), or for a value marshal cannot hold (a
    YAML date): each process then parses, with the same result."""
    data = path.read_bytes()
    stamp = (CACHE_FORMAT, len(data), zlib.crc32(data))
    cached = _cache_folder(path.parent) / f"{path.name}.{sys.implementation.cache_tag}.marshal"
    try:
        kept_stamp, value = marshal.loads(cached.read_bytes())
        if tuple(kept_stamp) == stamp:
            return value
    except Exception:      # missing, unreadable or damaged: parsed again below
        pass
    value = parse_yaml(data.decode("utf-8"))
    if not sys.dont_write_bytecode:
        _keep(cached, stamp, value)
    return value


def _cache_folder(folder: Path) -> Path:
    """Where Python would keep FOLDER's bytecode: its `__pycache__`, or under sys.pycache_prefix
    (PYTHONPYCACHEPREFIX) the folder's own path."""
    if sys.pycache_prefix:
        absolute = folder.resolve()
        return Path(sys.pycache_prefix) / absolute.relative_to(absolute.anchor)
    return folder / "__pycache__"


def _keep(cached: Path, stamp: tuple, value) -> None:
    """Write VALUE under its STAMP to CACHED, whole or not at all (a temporary file renamed over it, as
    py_compile writes bytecode): two processes starting together never read half a file."""
    try:
        data = marshal.dumps((stamp, value))
    except ValueError:
        return
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(data)
        os.replace(partial, cached)
    except OSError:
        try:
            partial.unlink(missing_ok=True)
        except OSError:
            pass
