"""Measurements turned into efficiency factors, written in the calibration format `plan` and `compare`
read with `--calibration FILE` (calibration.py: format mla-plan-calibration/1, dump_calibration).

Each timed check carries evidence of the factor its bound side uses (checks.roofline,
collectives._evidence): work done (`amount`, bytes or FLOPs, or the bytes a collective's bandwidth
term charges at line rate), the seconds it took, and the `peak` the factor scales. A factor is
sum(amount / peak) / sum(seconds) over every check (every rank) that measured it: total work over
total time, so a big kernel weighs more than a small one. Values above 1 (a datasheet below what
the chip does) are capped at 1, the format's limit. A latency (`internode_latency_s`, from collectives
between nodes) comes as the `value` that would make each check's prediction exact; the file gets their
mean.

The file is written atomically (a temporary file beside it, then os.replace) and never when a check
errored: a run that could not measure everything must not leave a calibration that looks complete.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mla_planner import __version__
from mla_planner.core.errors import PlanError
from mla_planner.specs.calibration import dump_calibration


def efficiencies(checks: list) -> dict[str, float]:
    """Factor name -> measured value, from every check's evidence: efficiencies as total work over total
    time (capped at 1), latencies as the mean of the values the checks imply."""
    work: dict[str, float] = {}
    seconds: dict[str, float] = {}
    latency: dict[str, list[float]] = {}
    for c in checks:
        ev = c.extra.get("evidence") if not c.error else None
        if not ev or ev["seconds"] <= 0:
            continue
        if "value" in ev:
            latency.setdefault(ev["factor"], []).append(float(ev["value"]))
            continue
        if ev["peak"] <= 0:
            continue
        work[ev["factor"]] = work.get(ev["factor"], 0.0) + ev["amount"] / ev["peak"]
        seconds[ev["factor"]] = seconds.get(ev["factor"], 0.0) + ev["seconds"]
    out = {name: min(1.0, float(work[name] / seconds[name])) for name in work if work[name] > 0}
    out |= {name: sum(v) / len(v) for name, v in latency.items()}
    return dict(sorted(out.items()))


def _plain(obj: Any) -> Any:
    """Plain YAML-safe values (floats, ints, strings) for the evidence section."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    return float(obj)


def measurements(checks: list) -> dict:
    """Evidence kept beside the factors (not read by the model): each check's numbers, keyed rank/name."""
    return {f"rank{c.rank}/{c.name}": _plain({"status": c.status, "predicted": c.predicted, "measured": c.measured,
                                              "unit": c.unit, "ratio": c.ratio})
            for c in checks if c.measured is not None}


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to a temporary file in path's folder, fsync, then rename over `path`; on any failure
    the temporary file is removed and `path` is left as it was (PlanError for an OS error)."""
    if not path.parent.is_dir():
        raise PlanError(f"--write-calibration {path}: folder {path.parent} does not exist")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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
            raise PlanError(f"--write-calibration {path}: cannot write ({why}); nothing written") from None
        raise


def write_calibration(path: str | Path, checks: list, gpu: str, topology: str, device_note: str) -> dict:
    """Write the calibration file; returns {"path", "efficiency"}. PlanError when a check errored or when
    nothing measured maps to a factor (then no file is touched)."""
    bad = [c.name for c in checks if c.error]
    if bad:
        raise PlanError(f"calibration not written to {path}: {len(bad)} check(s) errored ({', '.join(bad)})")
    factors = efficiencies(checks)
    if not factors:
        ran = ", ".join(sorted({c.name for c in checks})) or "none"
        raise PlanError(f"calibration not written to {path}: no check measured an efficiency factor (ran: {ran})")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = dump_calibration(factors, gpu=gpu, topology=topology, measured_at=stamp,
                            tool=f"mla-plan verify {__version__} ({device_note})",
                            measurements=measurements(checks))
    atomic_write(Path(path).expanduser(), text)
    return {"path": str(path), "efficiency": factors}
