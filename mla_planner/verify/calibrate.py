"""Measurements turned into efficiency factors, written in the calibration format `plan` and `compare`
read with `--calibration FILE` (calibration.py: format mla-plan-calibration/1, dump_calibration).

Each timed check carries evidence of the factor its bound side uses (checks.roofline,
collectives._evidence): work done (`amount`, bytes or FLOPs, or the bytes a collective's bandwidth
term charges at line rate), the seconds it took, and the `peak` the factor scales. A factor is
sum(amount / peak) / sum(seconds) over every check (every rank) that measured it: total work over
total time, so a big kernel weighs more than a small one. Values above 1 (a datasheet below what
the chip does) are capped at 1, the format's limit, and each capped factor is reported with its measured value
(in the output, the JSON's `clipped`, and the file's `measurements` under `clipped/<factor>`). A latency
(`internode_latency_s`, from collectives between nodes) comes as the `value` that would make each check's
prediction exact; the file gets their mean.

Only passing checks calibrate: a check judged out of its band (FAIL) writes no factor, nor does one whose
kernel output did not match the reference; in a rehearsal (nothing judged: a CPU run) the measured (`info`)
checks do, labelled by the file's `gpu: cpu`. An attention check that timed the project's fallback kernel
instead of the engine's (`extra["kernel"] == "fallback"`) carries no evidence: it does not calibrate the
engine's `attention_*_efficiency`. What was left out, and why, comes back as `left_out`.

The file is written atomically (a temporary file beside it, then os.replace) and never when a check
errored: a run that could not measure everything must not leave a calibration that looks complete.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mla_planner import __version__
from mla_planner.core.errors import PlanError
from mla_planner.core.files import atomic_write
from mla_planner.specs.calibration import dump_calibration


def usable(checks: list) -> tuple[list, list[str]]:
    """(the checks whose evidence may calibrate, a line for each timed check left out and why): passing ones, and
    in a rehearsal (no check judged) the measured ones; never a FAIL, nor the fallback attention kernel."""
    rehearsal = all(c.passed is None for c in checks)
    keep, left_out = [], []
    for c in checks:
        where = f"{c.name} (rank {c.rank})"
        if c.extra.get("kernel") == "fallback":
            left_out.append(f"{where}: timed the project's fallback kernel, not the engine's "
                            f"{c.extra.get('engine_backend') or 'kernel'}: it does not calibrate the engine's factor")
        elif c.extra.get("evidence") is None:
            continue
        elif c.status == "pass" or (rehearsal and c.status == "info"):
            keep.append(c)
        else:
            ratio = f", ratio {c.ratio:.2f}" if c.ratio is not None else ""
            left_out.append(f"{where}: {c.status.upper()}{ratio}: a check outside its band writes no factor")
    return keep, left_out


def factors(checks: list) -> tuple[dict[str, float], dict[str, float]]:
    """(factor name -> value written, factor name -> measured value above 1 that was capped at 1): efficiencies as
    total work over total time over every given check's evidence, latencies as the mean of the values implied."""
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
    raw = {name: float(work[name] / seconds[name]) for name in work if work[name] > 0}
    out = {name: min(1.0, value) for name, value in raw.items()}
    out |= {name: sum(v) / len(v) for name, v in latency.items()}
    return dict(sorted(out.items())), {name: value for name, value in sorted(raw.items()) if value > 1.0}


def _plain(obj: Any) -> Any:
    """Plain YAML-safe values (floats, ints, strings) for the evidence section."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    return float(obj)


def _key(c) -> str:
    """rank/name, and a pipeline pair's ranks (a middle stage's rank times two pairs)."""
    pair = c.extra.get("members") if c.name.startswith("collective.p2p") else None
    return f"rank{c.rank}/{c.name}" + (f"/{pair[0]}-{pair[1]}" if pair else "")


def measurements(checks: list) -> dict:
    """Evidence kept beside the factors (not read by the model): each check's numbers, keyed rank/name."""
    return {_key(c): _plain({"status": c.status, "predicted": c.predicted, "measured": c.measured,
                             "unit": c.unit, "ratio": c.ratio})
            for c in checks if c.measured is not None}


def write_calibration(path: str | Path, checks: list, gpu: str, topology: str, device_note: str) -> dict:
    """Write the calibration file from the usable checks; returns {"path", "efficiency", "clipped" (factor ->
    measured value above 1, written as 1), "left_out" (one line per timed check not used, and why)}. PlanError
    when a check errored or when nothing usable maps to a factor (then no file is touched)."""
    bad = [c.name for c in checks if c.error]
    if bad:
        raise PlanError(f"calibration not written to {path}: {len(bad)} check(s) errored ({', '.join(bad)})")
    keep, left_out = usable(checks)
    written, clipped = factors(keep)
    if not written:
        ran = ", ".join(sorted({c.name for c in checks})) or "none"
        why = f"; left out: {'; '.join(left_out)}" if left_out else ""
        raise PlanError(f"calibration not written to {path}: no passing check measured an efficiency factor "
                        f"(ran: {ran}){why}")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    evidence = measurements(checks) | {f"clipped/{name}": {"measured": value, "written": 1.0}
                                       for name, value in clipped.items()}
    text = dump_calibration(written, gpu=gpu, topology=topology, measured_at=stamp,
                            tool=f"mla-plan verify {__version__} ({device_note})", measurements=evidence)
    atomic_write(Path(path).expanduser(), text, "--write-calibration")
    return {"path": str(path), "efficiency": written, "clipped": clipped, "left_out": left_out}
