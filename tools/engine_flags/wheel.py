"""Reading Python modules out of a wheel (a zip file) without unpacking it.

A module name such as ``vllm.config.cache`` maps to ``vllm/config/cache.py``
or ``vllm/config/cache/__init__.py`` inside the wheel; its source is parsed
with ``ast`` only (never imported or executed), and each parse is cached.
"""

from __future__ import annotations

import ast
import hashlib
import zipfile
from pathlib import Path


class WheelSource:
    """The modules of one wheel, read on demand and parsed with ``ast``."""

    def __init__(self, wheel_path: Path):
        self.wheel_path = wheel_path
        self.zf = zipfile.ZipFile(wheel_path)
        self.names = set(self.zf.namelist())
        self._ast: dict[str, ast.Module | None] = {}

    def module_path(self, modname: str) -> str | None:
        base = modname.replace(".", "/")
        for cand in (base + ".py", base + "/__init__.py"):
            if cand in self.names:
                return cand
        return None

    def is_package(self, modname: str) -> bool:
        return (modname.replace(".", "/") + "/__init__.py") in self.names

    def module_ast(self, modname: str) -> ast.Module | None:
        if modname not in self._ast:
            path = self.module_path(modname)
            if path is None:
                self._ast[modname] = None
            else:
                src = self.zf.read(path).decode("utf-8")
                self._ast[modname] = ast.parse(src, filename=path)
        return self._ast[modname]

    def require_ast(self, modname: str) -> ast.Module:
        tree = self.module_ast(modname)
        if tree is None:
            raise SystemExit(f"module {modname} not found in {self.wheel_path.name}")
        return tree

    def source_of(self, modname: str) -> str:
        """The module's file inside the wheel (what fixtures record as ``source``)."""
        path = self.module_path(modname)
        if path is None:
            raise SystemExit(f"module {modname} not found in {self.wheel_path.name}")
        return path

    def source_text(self, modname: str) -> str:
        """The module's source text, for checks that look for a known message."""
        return self.zf.read(self.source_of(modname)).decode()


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def wheel_version(idx: WheelSource, dist: str) -> str:
    """``Version:`` from the wheel's ``<dist>-*.dist-info/METADATA``."""
    for n in idx.names:
        if n.endswith(".dist-info/METADATA") and n.lower().startswith(dist):
            for line in idx.zf.read(n).decode().splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    raise SystemExit(f"no METADATA for {dist}")
