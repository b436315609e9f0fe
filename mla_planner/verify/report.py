"""What `verify` shows: a rich table (check, predicted, measured, ratio, tolerance, result), rich progress
while it runs, the JSON form, and the overall verdict that becomes the exit status
(0 every judged check passed, 1 a check failed or could not run). Torch-free.

Units stay SI in the JSON (s, B/s, B); the table shows µs, GB/s and GiB, and beside timed checks the
achieved GB/s and TFLOP/s against the predicted (gpt-fast reports bandwidth and FLOP/s the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from mla_planner.verify.coverage import missing as missing_checks

STYLE = {"pass": "green", "fail": "bold red", "error": "bold red", "info": "cyan", "skip": "dim"}


def verdict(checks: list, missing: tuple | list) -> tuple[str, int]:
    """("error" | "fail" | "not_verified" | "pass" | "rehearsal", exit status). "rehearsal" (exit 0) when no check
    was judged (a CPU run, or a GPU other than the plan's), so a script cannot read it as the plan holding;
    "not_verified" (exit 1) when every judged check passed but something the plan depends on was not measured
    (`missing`, from coverage.missing; required, so that no caller forgets it): an env-only run is never PLAN
    HOLDS. A rank's own verdict under torchrun (its share of the plan) passes () and is no more than that."""
    statuses = {c.status for c in checks}
    if "error" in statuses:
        return "error", 1
    if "fail" in statuses:
        return "fail", 1
    if "pass" not in statuses:
        return "rehearsal", 0
    return ("not_verified", 1) if missing else ("pass", 0)


def verdict_of(target, checks: list) -> tuple[str, int]:
    """`verdict` with what the plan still needs measured (coverage.missing)."""
    return verdict(checks, missing_checks(target, checks))


def rank_line(rank: int, world: int, checks: list) -> tuple[str, int]:
    """(one stderr line, exit status) for a non-zero torchrun rank whose checks rank 0 could not gather (a
    collective or the gather failed): the rank's first error, or that its checks were not gathered, and the
    names of its failed checks (rank 0's report does not show them)."""
    status = verdict(checks, ())[1]
    errors = [f"{c.name}: {c.error}" for c in checks if c.error]
    failed = [c.name for c in checks if c.status == "fail"]
    what = errors[0] if errors else f"{len(checks)} check(s), not gathered by rank 0"
    if failed:
        what += f"; failed: {', '.join(failed)}"
    return ("error: " if status else "") + f"rank {rank} of {world}: {what}", status


def fmt(value: Optional[float], unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1e6:,.1f} µs" if value < 1e-2 else f"{value * 1e3:,.1f} ms"
    if unit == "B/s":
        return f"{value / 1e9:,.1f} GB/s"
    if unit == "B":
        return f"{value / 2**30:,.2f} GiB"
    return f"{value:,.4g} {unit}".strip()


def rates_text(extra: dict) -> str:
    """'3,510 GB/s, 41.2 TF (pred 4,032, 47.4)' for a timed kernel, else ''."""
    if "achieved_bytes_per_s" not in extra:
        return ""
    return (f"{extra['achieved_bytes_per_s'] / 1e9:,.0f} GB/s, {extra['achieved_flops_per_s'] / 1e12:,.1f} TF "
            f"(pred {extra['predicted_bytes_per_s'] / 1e9:,.0f}, {extra['predicted_flops_per_s'] / 1e12:,.1f})")


def check_dict(c) -> dict:
    """A check as JSON. `ratio` is measured / predicted in the check's unit, so it means opposite things for
    times (> 1: slower) and rates (< 1: slower); `speed_vs_predicted` reads the same way for both (> 1:
    faster than the plan predicts, < 1: slower; null for other units)."""
    speed = None
    if c.ratio:
        speed = 1 / c.ratio if c.unit == "s" else c.ratio if c.unit == "B/s" else None
    return asdict(c) | {"status": c.status, "speed_vs_predicted": speed}


def report_dict(target, dev, checks: list, calibration: Optional[dict] = None) -> dict:
    """The JSON document: verdict, device, what was checked, every rank's checks, calibration written."""
    c = target.chosen
    gaps = missing_checks(target, checks)
    name, status = verdict(checks, gaps)
    return {"verdict": name, "exit_status": status, "missing": gaps,
            "device": asdict(dev) if dev is not None else None,
            "target": {"source": c.source, "model": c.spec.name, "topology": c.topo.name, "gpu": c.topo.gpu.name,
                       "layout": c.layout.label, "layout_fields": asdict(c.layout), "knobs": asdict(c.knobs),
                       "workload": asdict(c.workload), "batch_per_dp_rank": target.batch,
                       "micro_batch": target.micro_batch, "context_len": target.context, "stage": target.stage,
                       "heads_per_rank": target.heads_per_rank, "notes": list(target.notes)},
            "ranks": sorted({ch.rank for ch in checks}),
            "checks": [check_dict(ch) for ch in checks],
            "calibration": calibration}


def render(target, dev_text: str, checks: list, calibration: Optional[dict], out: Console) -> None:
    c = target.chosen
    out.print(f"[bold]verify[/bold] {c.spec.name} {c.layout.label} on {c.topo.name} ({c.source}): "
              f"batch {target.batch} per DP rank (micro-batch {target.micro_batch}), context {target.context:,}, "
              f"{target.heads_per_rank} heads per rank, block {c.knobs.block_size}, KV {c.knobs.kv_cache_dtype}, "
              f"stage {target.stage}; device {dev_text}")
    many = len({ch.rank for ch in checks}) > 1
    table = Table(*(["rank"] if many else []), "check", "predicted", "measured", "ratio", "tolerance", "result",
                  "achieved (predicted)", title="Plan vs this GPU")
    for ch in checks:
        ratio = f"{ch.ratio:.2f}" if ch.ratio is not None else "-"
        result = f"[{STYLE[ch.status]}]{ch.status.upper()}[/{STYLE[ch.status]}]"
        table.add_row(*([str(ch.rank)] if many else []), ch.name, fmt(ch.predicted, ch.unit),
                      fmt(ch.measured, ch.unit), ratio, ch.tolerance, result, rates_text(ch.extra))
    out.print(table)
    for ch in checks:
        text = ch.error or ch.detail
        if text:
            out.print(f"  {'rank %d ' % ch.rank if many else ''}{ch.name}: {text}", soft_wrap=True, markup=False)
    for note in target.notes:
        out.print(f"  note: {note}", soft_wrap=True, markup=False)
    if calibration:
        out.print(calibration_text(calibration), soft_wrap=True, markup=False)
    out.print(headline(checks, missing_checks(target, checks)))


def calibration_text(calibration: dict) -> str:
    """What --write-calibration wrote, each clipped factor with its measured value, and what it left out."""
    lines = [f"calibration written to {calibration['path']}: "
             + ", ".join(f"{k} {v:.3g}" for k, v in calibration["efficiency"].items())]
    for name, raw in calibration.get("clipped", {}).items():
        lines.append(f"  {name}: measured {raw:.3g}, written as 1 (the format's limit: a datasheet rate below what "
                     "the chip does)")
    lines += [f"  not used: {why}" for why in calibration.get("left_out", [])]
    return "\n".join(lines)


def headline(checks: list, missing: tuple | list) -> str:
    """The last line: the verdict in words (a CPU rehearsal judges nothing, and says so)."""
    name, _ = verdict(checks, missing)
    if name == "error":
        return "[bold red]CHECKS ERRORED[/bold red]: some checks could not run (see above)"
    if name == "fail":
        return "[bold red]CHECKS FAILED[/bold red]: the plan does not hold on this hardware (see above)"
    if name == "rehearsal":
        return "[bold cyan]REHEARSAL RAN[/bold cyan]: nothing judged (the topology's GPU is not here)"
    if name == "not_verified":
        return ("[bold yellow]NOT VERIFIED[/bold yellow]: every judged check passed, but not measured: "
                + escape("; ".join(missing)))
    return "[bold green]PLAN HOLDS[/bold green]: every judged check is within its tolerance"


@contextmanager
def progress(enabled: bool) -> Iterator[Callable[[str], None]]:
    """A transient line on stderr naming the running section; `enabled=False` yields a no-op. Refreshed
    only when the section changes: an auto-refresh thread takes the GIL from the timed code (it made a
    41 µs CPU matmul read 16 ms) and can delay CUDA launches past the queued work."""
    err = Console(stderr=True, emoji=False)
    if not enabled or not err.is_terminal:   # piped or captured: a transient line only leaves a blank one
        yield lambda section: None
        return
    bar = Progress(SpinnerColumn(), TextColumn("verify: {task.description}"), TimeElapsedColumn(),
                   console=err, transient=True, auto_refresh=False)
    with bar:
        task = bar.add_task("starting", total=None)

        def step(section: str) -> None:
            bar.update(task, description=section, refresh=True)
        yield step

