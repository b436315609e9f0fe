"""A finding with an identity: what scripts and tests match on (`code`) beside what people read (`text`), and
whether it makes the answer "no" (`blocks`: does not fit, will not start) or is a risk to know about."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    code: str           # stable identity, snake_case: "weights_exceed_gpu", "no_kv_room", "engine_refuses", ...
    text: str           # one line for people; may be reworded
    blocks: bool = True
