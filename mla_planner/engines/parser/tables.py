"""The engines' flag tables and rules (mla_planner/data/engines/*.json, read out of the wheels by
tools/engine_flags), the option strings they define, and the GPU architecture argument."""

from __future__ import annotations

import functools
import json
import re

from mla_planner.core.resources import data_dir

TABLE_DIR = data_dir("engines")
TABLE_FILES = {
    "vllm": TABLE_DIR / "vllm-0.33.0.json",
    "sglang": TABLE_DIR / "sglang-0.5.23.json",
}
ENGINE_ALIASES = {
    "vllm": "vllm",
    "vllm-0.33.0": "vllm",
    "sglang": "sglang",
    "sglang-0.5.23": "sglang",
}


@functools.lru_cache(maxsize=None)
def load_table(engine: str) -> dict:
    key = ENGINE_ALIASES.get(engine.lower())
    if key is None:
        raise ValueError(f"unknown engine {engine!r}; expected 'vllm' or 'sglang'")
    with open(TABLE_FILES[key], encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def option_table(engine: str) -> dict[str, tuple[str, bool]]:
    """option string -> (flag key, is_negated)."""
    fx = load_table(engine)
    table: dict[str, tuple[str, bool]] = {}
    for key, spec in fx["flags"].items():
        table[key] = (key, False)
        for alias in spec.get("aliases", []):
            table[alias] = (key, False)
        for neg in spec.get("negated", []):
            table[neg] = (key, True)
    return table


ROCM_CAPABILITY_MAJOR = 9   # torch on ROCm reports gfx942 as 9.4 and gfx950 as 9.5 (vllm/platforms/rocm.py)


def is_rocm(gpu_arch: str | None) -> bool:
    return gpu_arch is not None and bool(re.fullmatch(r"(?i)gfx9[0-9a-f]+", gpu_arch.strip()))


def gpu_major(gpu_arch: str | None) -> int | None:
    if gpu_arch is None:
        return None
    if is_rocm(gpu_arch):
        return ROCM_CAPABILITY_MAJOR
    m = re.fullmatch(r"(?i)sm_?(\d+)[a-z]?", gpu_arch.strip())
    if not m:
        raise ValueError(f"unrecognised gpu_arch {gpu_arch!r}; expected e.g. 'sm90', 'sm100'")
    return int(m.group(1)) // 10
