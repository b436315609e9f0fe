"""The plan as a person reads it: what was planned, the top candidates, why #1, warnings, the Pareto plot."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.markup import escape
from rich.table import Column, Table

from mla_planner.cli.console import console
from mla_planner.cli.disagg_render import render_disaggregated
from mla_planner.launch.build import single_node_command
from mla_planner.search.candidate import Rejection
from mla_planner.search.pareto import ascii_scatter
from mla_planner.search.planfile import Plan, meets_targets
from mla_planner.search.ranking import throughput_key
from mla_planner.search.run import SearchResult


def headline(plan: Plan, is_default: bool) -> str:
    t, w = plan.topology, plan.workload
    first = ("No model or topology given: planning the built-in default, " if is_default else "Planning ")
    inp = f"{w.input_len}" + (f" (p99 {w.input_len_max})" if w.input_len_max and w.input_len_max != w.input_len else "")
    out = f"{w.output_len}" + (f" (p99 {w.output_len_max})" if w.output_len_max and w.output_len_max != w.output_len
                               else "")
    return (f"{first}{plan.spec.name} on {t.name} ({t.nodes} x {t.gpus_per_node} {t.gpu.name}) for {inp} prompt / "
            f"{out} output tokens, TPOT <= {w.tpot_ms:g} ms, TTFT <= {w.ttft_ms:g} ms"
            + (f", {w.request_rate_per_s:g} requests/s (at most {w.concurrency} in flight at the targets)"
               if w.request_rate_per_s else f", {w.concurrency} concurrent requests" if w.concurrency else ""))


def candidates_table(plan: Plan, top: int, rank_by: str = "per-gpu") -> Table:
    total = rank_by == "total"
    w = plan.workload
    p99 = bool(w.input_len_max and w.input_len_max != w.input_len)     # the target holds for the longest prompt
    heads = ["tok/s\nin all" if total else "tok/s\nper GPU", "band\nlow-high", "tok/s\nper user", "requests\nin flight",
             "step\nms", "net\nwait", "mem\nutil", "TTFT ms\np50 / p99" if p99 else "TTFT\nms", "ok"]
    unit = "output tokens/s in all (the cluster's GPUs in use)" if total else "output tokens/s per GPU"
    title = (f"Best candidates: {unit}, those meeting the targets first" if meets_targets(plan)
             else f"Closest candidates (none meets the targets): {unit}")
    # the figures never wrap (a cut number reads as another number); a long layout label folds instead
    t = Table("#", Column("layout", overflow="fold"), Column("engine", no_wrap=True), "KV",
              *(Column(h, justify="right", no_wrap=True) for h in heads), title=title)
    key = throughput_key(rank_by)
    for i, c in enumerate(plan.candidates[:top], 1):
        p, k = c.performance, c.knobs
        tput, low, high = (getattr(p, key + end) for end in ("", "_low", "_high"))
        label = c.layout.label + (" dense/rank" if k.dense_per_rank else "")   # SGLang's dense parts per DP rank
        t.add_row(f"{i}~" if p.tie_group else str(i), label, k.engine, k.kv_cache_dtype, f"{tput:,.0f}",
                  f"{low:,.0f}-{high:,.0f}" if low is not None and high is not None else "-",
                  f"{p.tokens_per_s_per_user:.1f}", f"{p.concurrency:,}", f"{p.step_s * 1e3:.1f}",
                  f"{p.network_wait_share:.0%}", f"{p.memory_utilization:.0%}",
                  f"{p.ttft_s * 1e3:,.0f}" + (f" / {p.ttft_longest_s * 1e3:,.0f}" if p99 else ""),
                  "yes" if p.meets_targets else "no")
    return t


def knobs_table(plan: Plan, top: int) -> Table:
    t = Table("#", "backend", "block", "memory\nfraction", "max seqs\nper DP rank", "batched\ntokens",
              "max model\nlen", "KV pool\ntokens", "MTP", title="Their launch knobs")
    for i, c in enumerate(plan.candidates[:top], 1):
        k = c.knobs
        t.add_row(str(i), k.attention_backend or "auto", str(k.block_size), f"{k.memory_fraction:.3f}",
                  str(k.max_num_seqs), f"{k.max_num_batched_tokens:,}", f"{k.max_model_len:,}",
                  f"{c.memory.kv_capacity_tokens:,}", "on" if k.mtp else "off")
    return t


def render_plan(plan: Plan, result: SearchResult, top: int, explain: bool, is_default: bool,
                emitted: Optional[Path], notes: tuple = (), nothing_fits: list = (), rank_by: str = "per-gpu") -> None:
    out = console()
    out.print(headline(plan, is_default))
    for note in notes:
        out.print(f"[yellow]note[/yellow] {escape(note)}")
    if not plan.candidates:
        out.print("[bold red]No layout can serve this workload on this cluster.[/bold red] Why (most common first):")
        for line in reasons_summary(plan.rejected, limit=5):
            out.print(f"  - {line}", markup=False)
        out.print("\n".join(f"  - {line}" for line in nothing_fits), markup=False)
        render_disaggregated(plan, top, rank_by)
        if explain:
            _explain(plan)
        return
    if not meets_targets(plan):
        misses = sorted({w for c in plan.candidates[:top] for w in c.warnings if "misses" in w})
        out.print("[bold red]No candidate meets the latency targets.[/bold red] The closest follow; "
                  "relax a target or add GPUs.")
        for line in misses[:5]:
            out.print(f"  - {line}", markup=False)
    out.print(candidates_table(plan, top, rank_by))
    out.print(knobs_table(plan, top))
    best = plan.candidates[0]
    out.print(f"[bold]Why #1 ({best.layout.label}, {best.knobs.engine}, KV {best.knobs.kv_cache_dtype}):[/bold] "
              f"{best.memory.kv_holding}; KV capacity {best.memory.kv_capacity_tokens:,} tokens per engine "
              "instance / DP rank")
    for reason in best.reasons:
        out.print(f"  - {reason}")
    for line in (_tie(plan, rank_by), _band_aside(plan, top, rank_by)):
        if line:
            out.print(line, markup=False)
    render_disaggregated(plan, top, rank_by)
    _warnings(plan, top)
    _launch_hint(plan, emitted, any(n.startswith("--emit") for n in notes))
    _pareto(plan, result, rank_by)
    if explain:
        _explain(plan)
    else:
        out.print(f"{len(plan.rejected)} layout/engine/KV combinations were rejected or screened out; "
                  "--explain lists them with reasons.")


def _pareto(plan: Plan, result: SearchResult, rank_by: str = "per-gpu") -> None:
    """The front of throughput (per GPU, or in all with --rank-by total) vs speed per user over every
    candidate's batch sweep."""
    out = console()
    points = [(p.throughput(rank_by), p.tokens_per_s_per_user) for p in result.points]
    unit = "tok/s in all" if rank_by == "total" else "tok/s/GPU"
    best = [i for i, p in enumerate(result.points) if p.option == 0 and p.batch_per_dp_rank ==
            plan.candidates[0].performance.concurrency_per_dp_rank]   # the running batch (a rate's steady state)
    order = best + [i for i in range(len(points)) if i not in best]
    out.print("[bold]Pareto front[/bold] (each candidate swept over its running batch; 1 = #1 as planned):")
    out.print(ascii_scatter([points[i] for i in order], [order.index(i) for i in result.pareto],
                            x_label="tokens/s in all" if rank_by == "total" else "tokens/s per GPU"), markup=False)
    for i in result.pareto:
        p = result.points[i]
        c = plan.candidates[p.option]
        out.print(f"  #{p.option + 1} {c.layout.label} {c.knobs.engine} {c.knobs.kv_cache_dtype} at "
                  f"{p.batch_per_dp_rank} per DP rank: {p.throughput(rank_by):,.0f} {unit}, "
                  f"{p.tokens_per_s_per_user:.1f} tok/s/user", markup=False)


def _tie(plan: Plan, rank_by: str = "per-gpu") -> str:
    """Say which candidates #1 is tied with: their throughput bands overlap (search.ranking), so the order among
    them is the lower risk first, not a predicted win."""
    tied = [i for i, c in enumerate(plan.candidates, 1) if c.performance.tie_group == 1]
    if len(tied) < 2:
        return ""
    unit = "tokens/s in all" if rank_by == "total" else "tokens/s per GPU"
    return (f"Tie (~): #{', #'.join(map(str, tied[:8]))}{', ...' if len(tied) > 8 else ''} each reach into the band of "
            f"{unit} of the best prediction among them (the range the model's errors on published runs allow, "
            "`mla-plan validate`); they are ordered by the pessimistic end of the band, and the order among them is "
            "not a predicted win.")


def _band_aside(plan: Plan, top: int, rank_by: str = "per-gpu") -> str:
    """Say so where a shown figure lies outside its own band: the band is the held-out errors' spread around the
    figure (perf.bands), which leans one way where the model has erred one way on published runs of that kind."""
    key, rows = throughput_key(rank_by), {"below": [], "above": []}
    for i, c in enumerate(plan.candidates[:top], 1):
        tput, low, high = (getattr(c.performance, key + end) for end in ("", "_low", "_high"))
        if low is not None and high is not None and not low <= tput <= high:
            rows["below" if tput > high else "above"].append(f"#{i}")
    return " ".join(f"Band: {', '.join(r)} lie{'s' if len(r) == 1 else ''} outside {'its' if len(r) == 1 else 'their'} "
                    f"band: published runs of that kind measured {side} what the model predicts, so the band, not the "
                    "figure, is where such runs have landed (docs/json.md)." for side, r in rows.items() if r)


def _warnings(plan: Plan, top: int) -> None:
    """Each warning once, with the candidates it concerns (the same sentence for five rows is noise)."""
    out, who = console(), {}
    for i, c in enumerate(plan.candidates[:top], 1):
        for w in c.warnings:
            who.setdefault(w, []).append(i)
    for w, rows in who.items():
        out.print(f"[yellow]warning[/yellow] {', '.join(f'#{i}' for i in rows)}: {escape(w)}")


def _launch_hint(plan: Plan, emitted: Optional[Path], emit_refused: bool = False) -> None:
    out = console()
    best = plan.candidates[0]
    cmd = single_node_command(plan, 1, best.knobs.engine)
    if cmd:
        out.print("[bold]Launch #1:[/bold]")
        out.print(cmd, soft_wrap=True, markup=False)
    disagg = plan.disaggregated[0] if plan.disaggregated else None
    if emitted:
        out.print(f"Per-node launch scripts for #1 written to {emitted}/ (see its README.md).")
    elif (plan.choice or {}).get("winner") == "disaggregated" and disagg and disagg.performance \
            and disagg.performance.meets_targets and not emit_refused:
        out.print("D1 wins: add --emit DIR for its launch folder (both pools' node scripts, the router, Kubernetes "
                  "manifests); `mla-plan emit --plan FILE` writes #1's instead.")
    elif not cmd and not emit_refused:
        L = best.layout
        what = (f"spans {-(-L.instance_gpus // plan.topology.gpus_per_node)} nodes" if L.instance_gpus >
                plan.topology.gpus_per_node else f"runs {L.replicas} replicas" if L.replicas > 1 else
                "is more than one command")
        out.print(f"#1 {what}: add --emit DIR for its launch scripts.")


def _explain(plan: Plan) -> None:
    out = console()
    if not plan.rejected:
        out.print("Rejected or screened out: none (every layout searched was tuned; EP across a plain TP group is "
                  "not searched, as it is priced exactly as the tensor-parallel MoE: -l tp=N,ep=N plans it)")
        return
    out.print(f"[bold]Rejected or screened out ({len(plan.rejected)}):[/bold]")
    for line in rejected_summary(plan.rejected, limit=len(plan.rejected)):   # all of them: it was asked for
        out.print(f"  - {line}", markup=False)


def reasons_summary(rejected: list[Rejection], limit: int = 5) -> list[str]:
    """One line per distinct reason, in the order they were found (the most telling first), with how
    many layout/engine/KV combinations it stopped and a few of their layouts."""
    by_reason: dict[str, list[str]] = {}
    for r in rejected:
        by_reason.setdefault(r.reason, []).append(r.layout)
    out = []
    for why, lays in list(by_reason.items())[:limit]:
        names = list(dict.fromkeys(lays))
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        out.append(f"{why} ({len(lays)} combination{'s' if len(lays) > 1 else ''}: {shown})")
    return out


def rejected_summary(rejected: list[Rejection], limit: int = 40) -> list[str]:
    """One line per distinct (layout, reason), most informative first, naming the engine/KV combinations
    it stopped (a layout can fail for different reasons under each)."""
    seen: dict[tuple, list[str]] = {}
    for r in rejected:
        combo = "any engine" if r.engine == "any" else f"{r.engine} {r.kv_dtype}"
        seen.setdefault((r.layout, r.reason), []).append(combo)
    return [f"{lay} [{', '.join(dict.fromkeys(combos))}]: {why}" for (lay, why), combos in list(seen.items())[:limit]]
