"""The attention kinds the planner knows, by the name a spec's `attention` field gives. A new kind is one
module with an AttentionKind subclass (base.py) and one entry here (a test adds its own to KINDS)."""

from __future__ import annotations

from mla_planner.specs.attention.base import AttentionKind
from mla_planner.specs.attention.compressed import CompressedHybrid
from mla_planner.specs.attention.dsa import DSA
from mla_planner.specs.attention.gqa import GQA
from mla_planner.specs.attention.mla import MLA

KINDS: dict[str, AttentionKind] = {k.name: k for k in (MLA(), DSA(), CompressedHybrid(), GQA())}


def kind_named(name: str) -> AttentionKind:
    if name not in KINDS:
        raise ValueError(f"unknown attention kind {name!r}; known: {', '.join(KINDS)}")
    return KINDS[name]


def foreign_field(spec) -> str:
    """A field set on `spec` that only another kind reads (an indexer field on an `mla` spec): why the spec
    contradicts its own attention ('' when it does not)."""
    own = kind_named(spec.attention).extra_fields
    claims = [(kind, [n for n in kind.extra_fields if n not in own and getattr(spec, n, None) is not None])
              for kind in KINDS.values()]
    kind, names = max(claims, key=lambda c: len(c[1]))   # the kind the fields describe best (first on a tie)
    if not names:
        return ""
    return (f"{names[0]} is a field of {kind.name} attention, but the model declares {spec.attention}: "
            "its architecture does not match its fields")


def planning_problem(spec, command: str = "plan") -> str:
    """Why COMMAND cannot yet price `spec`'s attention ('' when it can): a kind the planner reads and sizes
    but whose engine side is not modelled for that command is refused, never priced as another kind."""
    kind = attention_of(spec)
    if command not in kind.not_modelled_in:
        return ""
    return f"{spec.name} uses {kind.name} attention, which `mla-plan {command}` cannot price yet: {kind.not_planned}"


def attention_of(spec) -> AttentionKind:
    """The kind that answers for `spec`'s attention."""
    return kind_named(spec.attention)
