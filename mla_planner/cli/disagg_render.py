"""The plan's disaggregated deployments as a person reads them: the pools, the split, the figures with their bands,
why D1, and whether aggregated or disaggregated serving wins here."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Column, Table

from mla_planner.cli.console import console
from mla_planner.search.planfile import Plan


def disagg_table(plan: Plan, top: int, rank_by: str = "per-gpu") -> Table:
    total = rank_by == "total"
    key = "throughput_tokens_per_s" if total else "throughput_tokens_per_s_per_gpu"
    t = Table("#", Column("prefill pool", no_wrap=True), Column("decode pool", no_wrap=True),
              Column("engine\nKV", no_wrap=True), Column("P:D", justify="right"), Column("GPUs", justify="right"),
              Column("tok/s\nin all" if total else "tok/s\nper GPU", justify="right"),
              Column("band\nlow-high", justify="right", no_wrap=True), Column("TTFT\nms", justify="right"),
              Column("TPOT\nms", justify="right"), Column("P busy", justify="right"), "ok",
              title="Disaggregated prefill/decode: pools of whole nodes")
    for i, d in enumerate(plan.disaggregated[:top], 1):
        p = d.performance
        tput, low, high = (getattr(p, key + end) for end in ("", "_low", "_high"))
        t.add_row(f"D{i}", _pool(d.prefill), _pool(d.decode), f"{d.engine}\n{d.decode.knobs.kv_cache_dtype}",
                  d.ratio, f"{p.gpus:,}", f"{tput:,.0f}", f"{low:,.0f}-{high:,.0f}", f"{p.ttft_s * 1e3:,.0f}",
                  f"{p.tpot_s * 1e3:.1f}", f"{p.prefill_utilization:.0%}", "yes" if p.meets_targets else "no")
    return t


def _pool(pool) -> str:
    nodes = pool.instances * pool.nodes_per_instance
    return f"{pool.label}\n{nodes} node{'s' if nodes > 1 else ''}"


def render_disaggregated(plan: Plan, top: int, rank_by: str = "per-gpu") -> None:
    """The table, why D1, and the verdict between the two kinds (search.deployment.choose)."""
    if not plan.disaggregated:
        return
    out = console()
    out.print(disagg_table(plan, top, rank_by))
    best = plan.disaggregated[0]
    out.print(f"[bold]Why D1 ({best.label}, {best.engine}, KV {best.decode.knobs.kv_cache_dtype}):[/bold] "
              f"uses {best.performance.gpus:,} of the cluster's {plan.topology.total_gpus:,} GPUs")
    for reason in best.reasons:
        out.print(f"  - {reason}", markup=False)
    for warning in best.warnings:
        out.print(f"[yellow]warning[/yellow] D1: {escape(warning)}")
    choice = plan.choice or {}
    if choice.get("winner"):
        word = "Tie" if choice.get("tie") else f"{choice['winner'].capitalize()} wins"
        out.print(f"[bold]Aggregated or disaggregated:[/bold] {word}: {choice['why']}", highlight=False)
