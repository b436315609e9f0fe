"""What the tests of mla_planner/engines/parser/ share: the model, its context length, a head address, and
`ok` / `bad` (the command is accepted / rejected, with a message matching a pattern)."""

from __future__ import annotations

import re

from mla_planner.engines.parser.check import check_command

M = "deepseek-ai/DeepSeek-V3"
DSV3_MAX_LEN = 163840
HEAD = "10.0.0.1"


def ok(argv, engine, gpu_arch=None, **kw):
    problems = check_command(argv, engine, gpu_arch, **kw)
    assert problems == [], problems


def bad(argv, engine, gpu_arch=None, pattern="", **kw):
    problems = check_command(argv, engine, gpu_arch, **kw)
    assert problems, f"expected a rejection for {argv}"
    if pattern:
        assert any(re.search(pattern, p) for p in problems), problems
    return problems
