"""The argparse-like tokenizer and parser (CPython 3.11 argparse, allow_abbrev=True): exact option strings,
``--opt=value``, unique-prefix abbreviations, ``-xVALUE``, negative numbers as values, nargs None/?/*/+/N,
required flags and the config dataclasses' bounds."""

from __future__ import annotations

import re
from typing import Any

from mla_planner.engines.parser.tables import load_table, option_table
from mla_planner.engines.parser.values import convert, ParseError

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _option_tuples(arg: str, table: dict) -> list[tuple[str, str | None]]:
    """argparse._get_option_tuples (CPython 3.11): (option string, explicit arg)."""
    out: list[tuple[str, str | None]] = []
    if len(arg) > 1 and arg[1] == "-":
        prefix, explicit = (arg.split("=", 1) + [None])[:2] if "=" in arg else (arg, None)
        for opt in table:
            if opt.startswith(prefix):
                out.append((opt, explicit))
    else:
        short_prefix, short_explicit = arg[:2], arg[2:]
        for opt in table:
            if opt == short_prefix:
                out.append((opt, short_explicit))
            elif opt.startswith(arg):
                out.append((opt, None))
    return out


def _classify(arg: str, table: dict) -> tuple[str, str | None] | None | str:
    """argparse._parse_optional. Returns None for a positional ('A'),
    (option, explicit_arg) for a known option, or the raw string for an
    unknown option."""
    if not arg or arg[0] != "-":
        return None
    if arg in table:
        return (arg, None)
    if len(arg) == 1:
        return None
    if "=" in arg:
        opt, explicit = arg.split("=", 1)
        if opt in table:
            return (opt, explicit)
    tuples = _option_tuples(arg, table)
    if len(tuples) > 1:
        opts = ", ".join(t[0] for t in tuples)
        raise ParseError(f"ambiguous option: {arg.split('=', 1)[0]} could match {opts}")
    if len(tuples) == 1:
        return tuples[0]
    if _NEGATIVE_NUMBER.match(arg):
        return None
    if " " in arg:
        return None
    return arg


def parse_args(argv: list[str], engine: str) -> tuple[dict[str, Any], set[str], list[str], list[str]]:
    """Returns (values by flag key, keys given explicitly, positionals, problems).
    Raises ParseError for the first fatal argparse error."""
    fx = load_table(engine)
    flags = fx["flags"]
    table = option_table(engine)
    problems: list[str] = []

    kinds: list[Any] = []
    after_dd = False
    for a in argv:
        if after_dd:
            kinds.append(None)
        elif a == "--":
            after_dd = True
            kinds.append("--")
        else:
            kinds.append(_classify(a, table))

    values: dict[str, Any] = {}
    given: set[str] = set()
    positionals: list[str] = []
    unknown: list[str] = []
    i = 0
    n = len(argv)
    while i < n:
        k = kinds[i]
        if k == "--":
            i += 1
            continue
        if k is None:
            positionals.append(argv[i])
            i += 1
            continue
        if isinstance(k, str):
            unknown.append(argv[i])
            i += 1
            continue
        opt, explicit = k
        key, negated = table[opt]
        spec = flags[key]
        i += 1
        if not spec.get("takes_value", True):
            if explicit is not None:
                raise ParseError(f"argument {opt}: ignored explicit argument {explicit!r}")
            values[key] = not negated
            given.add(key)
            continue
        nargs = spec.get("nargs")
        if explicit is not None:
            if nargs not in (None, "?", "*", "+", 1):
                raise ParseError(f"argument {opt}: expected {nargs} arguments")
            raw = [explicit]
        else:
            j = i
            while j < n and kinds[j] is None:
                j += 1
            avail = argv[i:j]
            if nargs is None:
                if not avail:
                    raise ParseError(f"argument {opt}: expected one argument")
                raw = avail[:1]
            elif nargs == "?":
                raw = avail[:1]
            elif nargs == "*":
                raw = avail
            elif nargs == "+":
                if not avail:
                    raise ParseError(f"argument {opt}: expected at least one argument")
                raw = avail
            else:
                if len(avail) < int(nargs):
                    raise ParseError(f"argument {opt}: expected {nargs} arguments")
                raw = avail[: int(nargs)]
            i += len(raw)
        if nargs == "?" and not raw:
            value: Any = True  # const
        elif nargs in (None, "?"):
            value = convert(spec, opt, raw[0])
        else:
            value = [convert(spec, opt, r) for r in raw]
        if spec.get("action") == "append":
            values.setdefault(key, []).append(value)
        else:
            values[key] = value
        given.add(key)

    max_pos = sum(1 for _ in fx.get("positionals", []))
    extras = unknown + positionals[max_pos:]
    positionals = positionals[:max_pos]
    if extras:
        raise ParseError("unrecognized arguments: " + " ".join(extras))
    missing = [
        "/".join([key, *spec.get("aliases", [])])
        for key, spec in flags.items()
        if spec.get("required") and key not in given
    ]
    if missing:
        raise ParseError("the following arguments are required: " + ", ".join(missing))

    # bounds from the config dataclasses (pydantic Field(gt=/ge=/lt=/le=))
    for key in sorted(given):
        b = flags[key].get("bounds")
        v = values.get(key)
        if not b or not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        for op, lim in b.items():
            ok = {"gt": v > lim, "ge": v >= lim, "lt": v < lim, "le": v <= lim}[op]
            if not ok:
                word = {"gt": "greater than", "ge": "greater than or equal to", "lt": "less than", "le": "less than or equal to"}[op]
                problems.append(f"{key}={v}: must be {word} {lim} ({flags[key].get('config_field', key)} validation)")
    return values, given, positionals, problems
