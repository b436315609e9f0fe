"""`mla-plan compare`'s table and verdict: the rows it shows, ratios against the first layout, and on which
of the seed article's five metrics each layout is ahead."""

from __future__ import annotations

from rich.table import Table

from mla_planner.cli.console import console
from mla_planner.cli.options import KV_CAPACITY_LABEL

# (label, key of `summary`, scale for the table, format): the JSON keeps plan's names and SI units
# (seconds, shares 0..1); the table shows ms and %.
ROWS = [("GPUs", "gpus", 1, "{:,.0f}"),
        ("concurrent requests", "concurrency", 1, "{:,.0f}"),
        ("throughput (output tok/s)", "throughput_tokens_per_s", 1, "{:,.0f}"),
        ("throughput per GPU (tok/s)", "throughput_tokens_per_s_per_gpu", 1, "{:,.0f}"),
        ("decode step (ms)", "step_s", 1e3, "{:,.2f}"),
        ("time per output token (ms)", "tpot_s", 1e3, "{:,.2f}"),
        ("tokens/s per user", "tokens_per_s_per_user", 1, "{:,.1f}"),
        ("network wait share (serving run)", "network_wait_share", 100, "{:.1f} %"),
        ("network wait share (decode step alone)", "decode_network_wait_share", 100, "{:.1f} %"),
        ("effective memory utilization", "memory_utilization", 100, "{:.1f} %"),
        ("memory in use (weights + live KV)", "memory_in_use", 100, "{:.1f} %"),
        ("TTFT (ms)", "ttft_s", 1e3, "{:,.0f}"),
        ("TTFT of the longest (p99) prompt (ms)", "ttft_longest_s", 1e3, "{:,.0f}"),
        ("TPOT, one request alone (ms)", "alone_tpot_s", 1e3, "{:,.2f}"),
        (KV_CAPACITY_LABEL, "kv_capacity_tokens", 1, "{:,.0f}"),
        ("memory fraction (the engine's flag)", "memory_fraction", 1, "{:.3f}")]
# the bands (low-high) of the figures whose predictions the validation points judge (perf/bands.py)
BANDS = [("band: throughput per GPU (tok/s)", "throughput_tokens_per_s_per_gpu", 1, "{:,.0f}"),
         ("band: time per output token (ms)", "tpot_s", 1e3, "{:,.1f}"),
         ("band: TTFT (ms)", "ttft_s", 1e3, "{:,.0f}"),
         ("band: comm (collectives) of a decode step (ms)", "collectives_s", 1e3, "{:,.2f}"),
         ("band: KV capacity (tokens)", "kv_capacity_tokens", 1, "{:,.0f}")]



def _cell(value: float, first: float, fmt: str, ratio: bool) -> str:
    text = fmt.format(value)
    if ratio and first:
        text += f"  ({value / first:.2f}x)"
    return text


# The seed article's five metrics: (summary key, name, +1 if higher is better else -1)
FIVE = [("concurrency", "concurrency", 1), ("throughput_tokens_per_s", "throughput", 1),
        ("step_s", "decode step", -1), ("network_wait_share", "network wait", -1),
        ("memory_utilization", "effective memory", 1)]
SPLIT_NAMES = {"attention_core_s": "attention kernel", "other_kernels_s": "other kernels",
               "collectives_s": "collectives", "launch_s": "launch"}


def verdict(rows: list[dict], tie: float = 0.01) -> list[str]:
    """One line per layout after the first: on which of the article's five metrics it is ahead of or
    behind the first (within `tie`, relative, counts as level), and which parts of the step split
    (attention kernel, other kernels, collectives, launch) make most of the difference in step time."""
    base, out = rows[0], []
    for r in rows[1:]:
        idle = [x["layout"] for x in (base, r) if not x["concurrency"]]
        if idle:
            out.append(f"{r['layout']} vs {base['layout']}: not compared ({' and '.join(idle)} "
                       f"{'serve' if len(idle) > 1 else 'serves'} nothing here)")
            continue
        ahead, behind = [], []
        for key, name, sign in FIVE:
            a, b = r[key], base[key]
            if abs(a - b) > tie * max(abs(a), abs(b)):
                (ahead if (a - b) * sign > 0 else behind).append(name)
        line = f"{r['layout']} vs {base['layout']}: ahead on {len(ahead)} of {len(FIVE)}"
        line += f" ({', '.join(ahead)})" if ahead else ""
        line += f", behind on {', '.join(behind)}" if behind else ""
        line += _step_words(r, base)
        out.append(line)
    return out


def _step_words(r: dict, base: dict) -> str:
    """How the step differs: the (up to two) parts that moved the way the step did, and the largest part that
    moved against it when it is more than a tenth of the difference."""
    parts = {k: r["step_breakdown_s"][k] - base["step_breakdown_s"][k] for k in SPLIT_NAMES}
    delta = r["step_s"] - base["step_s"]
    along = sorted((k for k in parts if parts[k] * delta > 0), key=lambda k: -abs(parts[k]))[:2]
    against = max((k for k in parts if parts[k] * delta < 0), key=lambda k: abs(parts[k]), default=None)
    words = f"; its decode step is {abs(delta) * 1e3:,.1f} ms {'shorter' if delta < 0 else 'longer'}"
    if along:
        words += ", mostly " + " and ".join(f"{SPLIT_NAMES[k]} ({parts[k] * 1e3:+,.1f} ms)" for k in along)
    if against and abs(parts[against]) > 0.1 * abs(delta):
        words += f", though {SPLIT_NAMES[against]} went the other way ({parts[against] * 1e3:+,.1f} ms)"
    return words


def render(rows: list[dict], title: str) -> None:
    table = Table("metric", *[r["layout"] for r in rows], title=title)
    for label, key, scale, fmt in ROWS:   # None: a layout that serves nothing (_not_serving)
        table.add_row(label, *["-" if r[key] is None else
                               _cell(r[key] * scale, (rows[0][key] or 0) * scale, fmt, i > 0)
                               for i, r in enumerate(rows)])
    table.add_row("step split: attention / kernels / comm / launch (ms)",
                  *[" / ".join(f"{v * 1e3:,.1f}" for v in r["step_breakdown_s"].values())
                    if r["step_breakdown_s"] else "-" for r in rows])
    for label, key, scale, fmt in BANDS:   # what a deployment would measure, from the validation residuals
        table.add_row(label, *[f"{fmt.format(r[key + '_low'] * scale)}-{fmt.format(r[key + '_high'] * scale)}"
                               if r.get(key + "_low") is not None else "-" for r in rows])
    table.add_row("limited by", *[r["concurrency_limit"] for r in rows])
    table.add_row("meets targets", *["yes" if r["meets_targets"] else "NO" for r in rows])
    out = console()
    out.print(table)
    for line in verdict(rows):
        out.print(line, markup=False)
    for r in rows:
        for note in r["notes"]:
            out.print(f"  {r['layout']}: {note}")
