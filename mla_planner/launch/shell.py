"""Shell words: every value that reaches an emitted script or a printed command is quoted here (shlex), a
reference to a variable the script sets (`ShellRef`) becomes `"${VAR}"`, and a NUL byte is refused."""

from __future__ import annotations

import shlex

from mla_planner.core.errors import PlanError
from mla_planner.launch.command import ShellRef


class Shell(str):
    """Text already safe to paste into a shell script (produced by the filters below)."""


def quote_word(word: str) -> str:
    if "\x00" in str(word):
        raise PlanError(f"{str(word)!r} contains a NUL byte, which no shell word can hold")
    if isinstance(word, ShellRef):
        return ((shlex.quote(word.prefix) if word.prefix else "") + '"${' + word.var + '}"'
                + (shlex.quote(word.suffix) if word.suffix else ""))
    return shlex.quote(str(word))


def one_line(argv: list[str]) -> Shell:
    return Shell(" ".join(quote_word(w) for w in argv))
