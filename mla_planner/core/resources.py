"""Where the built-in data lives (package data in a wheel, the repository folders in a checkout), and reading
one of its YAML files, parsed once and kept."""

from __future__ import annotations

import marshal
import os
import sys
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


def read_data(path: Path):
    """The parsed content of one of the package's own YAML files (yaml.safe_load's value, through
    core.files.parse_yaml). Parsing the dozen a plan reads costs about 10 ms on a 2-core machine and importing
    PyYAML another 10 ms (benchmarks/startup.py), so the parsed value is kept as Python keeps a module's bytecode:
    marshal bytes in the folder's `__pycache__`, stamped with the file's size and modification time and named
    for this Python (marshal's format is the interpreter's). A stamp that no longer matches is parsed again.
    Nothing is written where Python writes no bytecode (PYTHONDONTWRITEBYTECODE, `python -B`), where the folder
    cannot be written (a read-only install), or for a value marshal cannot hold (a YAML date): each process then
    parses, with the same result."""
    stat = path.stat()
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = path.parent / "__pycache__" / f"{path.name}.{sys.implementation.cache_tag}.marshal"
    try:
        kept_stamp, value = marshal.loads(cached.read_bytes())
        if tuple(kept_stamp) == stamp:
            return value
    except (OSError, EOFError, ValueError, TypeError):
        pass
    value = parse_yaml(path.read_text(encoding="utf-8"))
    if not sys.dont_write_bytecode:
        _keep(cached, stamp, value)
    return value


def _keep(cached: Path, stamp: tuple[int, int], value) -> None:
    """Write VALUE under its STAMP to CACHED, whole or not at all (a temporary file renamed over it, as
    py_compile writes bytecode): two processes starting together never read half a file."""
    try:
        data = marshal.dumps((stamp, value))
    except ValueError:
        return
    partial = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
    try:
        cached.parent.mkdir(exist_ok=True)
        partial.write_bytes(data)
        os.replace(partial, cached)
    except OSError:
        try:
            partial.unlink(missing_ok=True)
        except OSError:
            pass
