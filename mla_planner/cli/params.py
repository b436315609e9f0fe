"""A command's options, declared beside its parameters, and the click command built from them.

A command is a plain function whose parameters carry their flags in the annotation:

    def memory_cmd(tp: Annotated[int, Opt("--tp", help="Tensor parallel size.")] = 8,
                   as_json: Annotated[bool, Opt("--json", help="Print JSON.")] = False) -> None:

`click_command` reads the signature once, when that command runs, and builds a `click.Command` with one
option (or argument) per parameter: the type from the annotation (bool: a flag that takes no value;
Optional[X]: X, None when not given; list[X]: an option given several times, or an argument taking every
remaining word), the default from the signature (no default: required), the help from `Opt`. A parameter
annotated `click.Context` receives the context (lint and verify read the words after `--` and the options
as given). The command's help is the function's docstring.
"""

from __future__ import annotations

import functools
import inspect
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, Union

import click


@dataclass(frozen=True)
class Param:
    """Where a parameter comes from on the command line: an option's flags, or a positional argument."""

    decls: tuple[str, ...] = ()
    help: str = ""
    callback: Optional[Callable[[Any], Any]] = None   # value -> value, run as click parses it
    hidden: bool = False
    argument: bool = False


def Opt(*decls: str, help: str = "", callback: Optional[Callable[[Any], Any]] = None,  # noqa: N802 - reads as a type
        hidden: bool = False) -> Param:
    """An option: its flags (long first, then short), help, an optional value callback."""
    return Param(decls, help, callback, hidden)


def Arg(help: str = "") -> Param:  # noqa: N802 - reads as a type
    """A positional argument (described in the command's docstring; click shows arguments without help)."""
    return Param(help=help, argument=True)


def click_command(name: str, fn: Callable, context_settings: Optional[dict] = None) -> click.Command:
    """The click command NAME that parses the words into FN's parameters and calls it."""
    hints = typing.get_type_hints(fn, include_extras=True)
    params: list[click.Parameter] = []
    context_param = None
    lists: set[str] = set()
    for p in inspect.signature(fn).parameters.values():
        hint = hints.get(p.name)
        if hint is click.Context:
            context_param = p.name
            continue
        if typing.get_origin(hint) is not Annotated:
            raise TypeError(f"{fn.__qualname__}: parameter {p.name} has no Opt(...) or Arg(...)")
        kind, *extras = typing.get_args(hint)
        where = next(e for e in extras if isinstance(e, Param))
        param = _click_param(p.name, kind, p.default, where)
        if getattr(param, "multiple", False) or param.nargs == -1:
            lists.add(p.name)
        params.append(param)

    @functools.wraps(fn)
    def call(**values):
        for key in lists:   # click gives a tuple; the commands take a list, or None when not given
            values[key] = list(values[key]) if values[key] else (None if _default_is_none(fn, key) else [])
        if context_param:
            values[context_param] = click.get_current_context()
        return fn(**values)

    command = click.Command(name, callback=call, params=params, help=inspect.getdoc(fn),
                            context_settings=context_settings or {})
    command.context_class = Context
    return command


def _click_param(name: str, kind: Any, default: Any, where: Param) -> click.Parameter:
    required = default is inspect.Parameter.empty
    kind, many = _unwrap(kind)
    click_type = click.Path(path_type=Path) if kind is Path else kind
    if where.argument:
        return click.Argument([name], type=click_type, nargs=-1 if many else 1, required=required,
                              **({} if required or many else {"default": default}))
    callback = (lambda ctx, param, value: where.callback(value)) if where.callback else None
    if kind is bool:
        return click.Option([*where.decls, name], is_flag=True, default=bool(default), help=where.help,
                            hidden=where.hidden, callback=callback)
    return click.Option([*where.decls, name], type=click_type, multiple=many, required=required,
                        **({} if required or many else {"default": default}), help=where.help,
                        hidden=where.hidden, callback=callback,
                        show_default=not required and default is not None and default is not False)


def _unwrap(kind: Any) -> tuple[Any, bool]:
    """(the value type, whether the parameter takes a list) of Optional[X], list[X], X."""
    if typing.get_origin(kind) in (Union, types.UnionType):
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if typing.get_origin(kind) is list:
        return typing.get_args(kind)[0], True
    return kind, False


def _default_is_none(fn: Callable, name: str) -> bool:
    return inspect.signature(fn).parameters[name].default is None


class HelpFormatter(click.HelpFormatter):
    """Click's help layout, wrapped without breaking at hyphens: a flag named in a help text
    (--max-running-requests) stays whole, to be read and copied. Paragraphs are kept; a paragraph
    whose first line is click's no-rewrap mark \\b, or an example command (`mla-plan ...`), is printed as written."""

    def write_text(self, text: str) -> None:
        self.write(wrap(text, self.width, " " * self.current_indent) + "\n")

    def write_dl(self, rows, col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first = min(max((len(term) for term, _ in rows), default=0), col_max) + col_spacing
        for term, text in rows:
            lines = wrap(text, max(self.width - self.current_indent - first, 20)).splitlines() if text else [""]
            self.write(" " * self.current_indent + term)
            if len(term) + col_spacing <= first:
                self.write(" " * (first - len(term)) + lines[0] + "\n")
                lines = lines[1:]
            else:
                self.write("\n")
            for line in lines:
                self.write((" " * (self.current_indent + first) + line).rstrip() + "\n")


class Context(click.Context):
    formatter_class = HelpFormatter


def wrap(text: str, width: int, indent: str = "") -> str:
    """TEXT's paragraphs (blank-line separated) filled to WIDTH, each keeping its own first-line indent."""
    out = []
    for para in textwrap.dedent(text).split("\n\n"):
        lines = para.splitlines()
        if lines and lines[0].strip() == "\b":
            out.append("\n".join(indent + line for line in lines[1:]))
            continue
        if lines and lines[0].lstrip().startswith("mla-plan "):   # an example command: pasted as printed, never
            out.append("\n".join(indent + line for line in lines))   # broken across lines a shell would run apart
            continue
        lead = indent + para[:len(para) - len(para.lstrip(" "))]
        out.append(textwrap.fill(" ".join(para.split()), width, initial_indent=lead, subsequent_indent=lead,
                                 break_on_hyphens=False, break_long_words=False))
    return "\n\n".join(out)


def typed_options(ctx: click.Context, names: tuple[str, ...]) -> list[str]:
    """Which of the options NAMES (parameter names) the user typed, spelled as `--help` shows them: for a command
    to refuse options the rest of what was given makes it ignore."""
    by_name = {p.name: p for p in ctx.command.params}
    return [max(by_name[n].opts, key=len) for n in names
            if ctx.get_parameter_source(n) == click.core.ParameterSource.COMMANDLINE]
