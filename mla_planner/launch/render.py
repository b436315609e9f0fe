"""Rendering the launch folder: Jinja2 templates in which every substituted value is shell-quoted.

The environment's `finalize` hook quotes whatever a template prints (`shlex.quote` for strings, ints
as digits) unless it is `Shell` text this module produced itself: an argv rendered word by word by
the `argv` filter, or a comment / prose line with its control characters escaped. A model path,
interface name, HCA list or head address therefore reaches the script as exactly one shell word,
whatever it contains. Undefined names fail (StrictUndefined). Writing the folder is outdir.py.

jinja2 is imported when the first template is rendered, not with this module: `plan` without `--emit`
renders none (tests/shape.py allows this one deferred import).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from mla_planner.core.resources import data_dir
from mla_planner.launch.command import ShellRef
from mla_planner.launch.shell import Shell, one_line, quote_word

if TYPE_CHECKING:
    import jinja2


def argv_filter(argv: list[str], indent: int = 4) -> Shell:
    """One command, a continuation line per flag: `vllm serve MODEL \\` / `    --flag value \\` ..."""
    lines: list[list[str]] = [[]]
    for word in argv:
        if word.startswith("--") and lines[-1] and not isinstance(word, ShellRef):
            lines.append([])
        lines[-1].append(quote_word(word))
    return Shell((" \\\n" + " " * indent).join(" ".join(line) for line in lines))


def _escape_controls(text: str) -> str:
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))


def comment_filter(text: str) -> Shell:
    """Text for a `# ...` line: no character can end the comment (newlines and controls are escaped)."""
    return Shell(_escape_controls(text))


def prose_filter(text: str) -> Shell:
    """Plain text for the README (markdown, never executed): one line, controls escaped."""
    return Shell(_escape_controls(text))


def _finalize(value):
    if isinstance(value, Shell):
        return value
    if isinstance(value, bool) or value is None:
        raise TypeError(f"template printed {value!r}; booleans and None must be tested, not printed")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return quote_word(value)
    raise TypeError(f"template printed a {type(value).__name__}; render it with a filter")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
                             undefined=jinja2.StrictUndefined, finalize=_finalize, autoescape=False,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(argv=argv_filter, comment=comment_filter, prose=prose_filter, one_line=one_line)
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)
