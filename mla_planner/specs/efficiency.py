"""The efficiency factors and fixed overheads the comm and step models use: their defaults, units and
published sources (`mla_planner/data/efficiency.yaml`), the defaults that differ on one GPU vendor's platform
(`mla_planner/data/efficiency_vendor.yaml`), and the check every override passes (a topology's `efficiency:`
mapping, a calibration file)."""

from __future__ import annotations

import math
from functools import lru_cache

from mla_planner.core.errors import InputError, did_you_mean
from mla_planner.core.resources import data_dir, read_data


def factor_names() -> list[str]:
    """Every factor's name, in efficiency.yaml's order (the fields of `calibration.Calibration`)."""
    return list(_defaults_raw())


@lru_cache(maxsize=1)
def _defaults_raw() -> dict:
    return read_data(data_dir("efficiency.yaml"))


def default_values() -> dict[str, float]:
    return {name: entry["value"] for name, entry in _defaults_raw().items()}


def default_sources() -> dict[str, str]:
    return {name: entry["source"] for name, entry in _defaults_raw().items()}


def default_units() -> dict[str, str]:
    return {name: entry["unit"] for name, entry in _defaults_raw().items()}


@lru_cache(maxsize=1)
def _vendor_raw() -> dict:
    return read_data(data_dir("efficiency_vendor.yaml"))


def vendor_values(vendor: str) -> dict[str, float]:
    """The factors whose default differs on VENDOR's GPUs (data/efficiency_vendor.yaml), by name; {} for none."""
    return {name: entry["value"] for name, entry in _vendor_raw().get(vendor, {}).items()}


def vendor_sources(vendor: str) -> dict[str, str]:
    return {name: entry["source"] for name, entry in _vendor_raw().get(vendor, {}).items()}


def check_overrides(values: dict, where: str, section: str = "efficiency") -> dict:
    """Reject unknown names (with a did-you-mean) and out-of-range values; return a clean copy."""
    known = factor_names()
    out = {}
    for name, value in values.items():
        if name not in known:
            raise InputError(where, f"unknown efficiency factor{did_you_mean(name, known)}; known: "
                             f"{', '.join(known)}", f"{section}.{name}")
        out[name] = _checked(name, value, where, section)
    return out


# Bounds for the values that are not fractions: a latency or per-kernel cost between 1 ns and 1 s, a count of
# kernels per layer up to 10,000 - far outside any measured figure, so only a value that is not one is refused
# (NaN, .inf, 1e-300 s reached the batch search as NaN and crashed it).
SECONDS_RANGE = (1e-9, 1.0)
MAX_KERNELS_PER_LAYER = 10_000


def _checked(name: str, value, where: str, section: str):
    loc = f"{section}.{name}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(where, f"must be a number, got {value!r}", loc)
    if not math.isfinite(value):
        raise InputError(where, f"must be a finite number, got {value!r}", loc)
    if name == "kernels_per_layer":
        if int(value) != value or not 1 <= value <= MAX_KERNELS_PER_LAYER:
            raise InputError(where, f"must be a whole number in [1, {MAX_KERNELS_PER_LAYER:,}], got {value}", loc)
        return int(value)
    if name.endswith("_efficiency") and not 0 < value <= 1:
        raise InputError(where, f"must be a fraction in (0, 1], got {value}", loc)
    if name.endswith("_s") and not SECONDS_RANGE[0] <= value <= SECONDS_RANGE[1]:
        raise InputError(where, f"is in seconds: between {SECONDS_RANGE[0]:g} and {SECONDS_RANGE[1]:g}, got {value}",
                         loc)
    if value <= 0:
        raise InputError(where, f"must be > 0, got {value}", loc)
    return float(value)
