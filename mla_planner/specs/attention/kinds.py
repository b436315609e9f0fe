"""The attention kinds the planner knows, by the name a spec's `attention` field gives. A new kind is one
module with an AttentionKind subclass (base.py) and one entry here (a test adds its own to KINDS)."""

from __future__ import annotations

from mla_planner.specs.attention.base import AttentionKind
from mla_planner.specs.attention.gqa import GQA
from mla_planner.specs.attention.mla import MLA

KINDS: dict[str, AttentionKind] = {k.name: k for k in (MLA(), GQA())}


def kind_named(name: str) -> AttentionKind:
    if name not in KINDS:
        raise ValueError(f"unknown attention kind {name!r}; known: {', '.join(KINDS)}")
    return KINDS[name]


def attention_of(spec) -> AttentionKind:
    """The kind that answers for `spec`'s attention."""
    return kind_named(spec.attention)
