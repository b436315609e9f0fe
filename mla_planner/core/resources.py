"""Where the built-in data lives: package data in a wheel, the repository folders in a checkout."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent   # mla_planner/


def data_dir(name: str) -> Path:
    """`topologies` or `templates` (top-level in the repo, force-included into the wheel under the
    package) or a folder of `mla_planner/data` (models, gpus.yaml, backends.yaml)."""
    for candidate in (_PKG / "data" / name, _PKG / name, _PKG.parent / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"built-in data '{name}' is missing from the installation")
