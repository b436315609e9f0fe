"""What the verdict needs measured before it can say PLAN HOLDS, and what a run left unmeasured. Torch-free.

A plan's decode step rests on its attention kernel and on the collectives of its layout (docs/step-model.md
section 3): every collective the step model prices for it (groups.required_kinds: the TP all-reduce and the
logits all-gather, DCP's all-gather and reduce-scatter, the EP all-to-all, DP attention's all-gather and
reduce-scatter, every pipeline pair), each over every group of one instance. A run that judged checks and passed them, but left one of these unmeasured, has not verified
the plan: its verdict is "not_verified" with the list this module gives (an env-only run, a single process for
a TP plan, attention timed with the project's fallback kernel instead of the engine's, a rehearsal group
smaller than the planned one). The memory fit and the GEMMs are checked and judged when they run; the verdict
does not wait for them (`--only attention,collectives` is a complete verification of the step's two
uncertain parts).

"Measured" means judged (a pass or a fail, on the plan's own GPU): a CPU rehearsal measures nothing.
"""

from __future__ import annotations

from mla_planner.verify.groups import planned_groups, planned_size


def _judged(checks: list) -> list:
    return [c for c in checks if c.passed is not None and not c.error]


def attention_gap(checks: list) -> str:
    """'' when the engine's own attention kernel was timed and judged; else what is missing."""
    judged = [c for c in _judged(checks) if c.name == "attention"]
    if any(c.extra.get("kernel") == "engine" for c in judged):
        return ""
    ran = [c for c in checks if c.name == "attention" and c.measured is not None]
    if ran and ran[0].extra.get("kernel") == "fallback":
        return (f"attention with the engine's kernel ({ran[0].extra.get('engine_backend') or 'unknown backend'}): "
                f"only the project's fallback was timed ({ran[0].extra.get('fallback_reason', '')})")
    skipped = [c for c in checks if c.name == "attention" and c.status == "skip"]
    if skipped:          # a layout the kernels do not cover, or not the topology's GPU: the check says which
        return f"attention (not run: {skipped[0].detail})"
    return "attention (not measured on the plan's GPU)"


def _pairs_text(groups: list) -> str:
    shown = ", ".join(f"{g[0]}->{g[1]}" for g in groups[:4])
    return shown + (f" and {len(groups) - 4} more" if len(groups) > 4 else "")


def collective_gaps(target, checks: list) -> list[str]:
    """Each priced collective kind with a group of the instance that no judged check measured at the planned
    size (groups.planned_groups over one instance's GPUs)."""
    layout, knobs = target.chosen.layout, target.chosen.knobs
    judged = _judged(checks)
    out = []
    for kind, groups in planned_groups(target, layout.instance_gpus).items():
        size = planned_size(kind, layout, knobs.engine, knobs.dense_per_rank)
        done = {tuple(c.extra.get("members", ())) for c in judged
                if c.name == f"collective.{kind}" and c.extra.get("group_size") == size}
        lacking = [g for g in groups if tuple(g) not in done]
        if not lacking:
            continue
        if kind == "p2p":
            out.append(f"collective.p2p: pipeline pair(s) {_pairs_text(lacking)} of {len(groups)}")
        else:
            out.append(f"collective.{kind} over {size} ranks: {len(lacking)} of {len(groups)} group(s)")
    return out


def missing(target, checks: list) -> list[str]:
    """What the plan depends on that no judged check measured (empty: the verdict may say PLAN HOLDS)."""
    gaps = [attention_gap(checks)] + collective_gaps(target, checks)
    return [g for g in gaps if g]
