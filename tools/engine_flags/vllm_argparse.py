"""Explicit ``add_argument`` keywords in vLLM's source, and the Flag they make.

``apply_explicit`` folds one ``key=value`` keyword (or one
``kwargs["field"]["key"] = value`` override) into a keyword dict that may
already hold the keywords derived from a config field (``vllm_kwargs``);
``kwargs_to_flag`` turns the final dict into a ``Flag`` the way argparse
would register it.
"""

from __future__ import annotations

import ast
from typing import Any

from .evaluate import LiteralType, Unresolved, dotted, jsonable, try_eval
from .flag import Flag, boolean_optional_strings
from .symbols import SourceIndex

# argparse type= callables of vLLM, by name -> fixture type
NAMED_TYPES = {
    "int": "int", "float": "float", "str": "str",
    "human_readable_int": "human_int",
    "human_readable_int_or_auto": "human_int_or_auto",
    "union_dict_and_str": "json_or_str",
}
NO_VALUE_ACTIONS = ("store_true", "store_false", "store_const", "count", "help", "version")


def type_name(node: ast.AST) -> tuple[str, bool]:
    """Map an argparse type= expression to (type name, none_allowed)."""
    if isinstance(node, ast.Name):
        return NAMED_TYPES.get(node.id, "str"), False
    if isinstance(node, ast.Attribute) and node.attr == "loads":
        return "json", False
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "optional_type":
            inner, _ = type_name(node.args[0])
            return inner, True
        if node.func.id == "parse_type":
            return type_name(node.args[0])
    return "str", False


def _apply_type(kw: dict, value: ast.AST) -> None:
    if isinstance(value, ast.Lambda):
        body = ast.unparse(value.body)
        if body == "s.lower().replace('-', '_')":
            kw["transform"] = "lower_dash_to_underscore"
        elif "isdigit" not in body:
            raise SystemExit(f"unknown lambda type {body}")
    t, opt = type_name(value)
    kw["type"] = t
    if opt:
        kw["optional"] = True
    else:
        kw.pop("optional", None)


def _explicit_choices(idx: SourceIndex, value: ast.AST, mod: str) -> Any:
    v = try_eval(idx, value, mod)
    if isinstance(v, LiteralType):
        v = list(v.values)
    v = jsonable(v) if v is not Unresolved else Unresolved
    return v if v is not Unresolved else "__dynamic__"


def apply_explicit(idx: SourceIndex, kw: dict, key: str, value: ast.AST, mod: str) -> None:
    if key == "type":
        _apply_type(kw, value)
    elif key == "choices":
        kw["choices"] = _explicit_choices(idx, value, mod)
    elif key == "action":
        kw["action"] = value.value if isinstance(value, ast.Constant) else dotted(value).split(".")[-1]
    elif key == "nargs":
        kw["nargs"] = try_eval(idx, value, mod)
    elif key == "const":
        kw["const"] = True
    elif key == "dest":
        kw["dest"] = try_eval(idx, value, mod)
    elif key == "default":
        d = try_eval(idx, value, mod)
        kw["default"] = jsonable(d) if d is not Unresolved else Unresolved
    elif key == "required":
        kw["required"] = bool(try_eval(idx, value, mod))


def kwargs_to_flag(opts: list[str], kw: dict, source: str) -> Flag:
    """The Flag that ``add_argument(*opts, **kw)`` registers (opts[0] starts with '-')."""
    long_opts = [o for o in opts if o.startswith("--")]
    dest = kw.get("dest") or (long_opts[0] if long_opts else opts[0]).lstrip("-").replace("-", "_")
    fl = Flag(option_strings=list(opts), dest=dest, source=source)
    fl.origin = kw.get("origin")
    fl.bounds = kw.get("bounds")
    d = kw.get("default", None)
    fl.default = d if d is not Unresolved else None
    _apply_action(fl, kw.get("action"), opts)
    if fl.kind != "flag":
        _apply_value_kwargs(fl, kw)
    return fl


def _apply_action(fl: Flag, action: str | None, opts: list[str]) -> None:
    if action in NO_VALUE_ACTIONS:
        fl.kind = "flag"
        fl.action = action
    elif action == "BooleanOptionalAction":
        fl.kind = "flag"
        fl.action = "BooleanOptionalAction"
        fl.option_strings, fl.negated = boolean_optional_strings(list(opts), enable_disable=True)
    elif action is not None:
        # "append", or a custom argparse.Action subclass: nargs defaults to one value
        fl.action = action


def _apply_value_kwargs(fl: Flag, kw: dict) -> None:
    fl.type = kw.get("type", "str")
    nargs = kw.get("nargs")
    if nargs == "?" or kw.get("const"):
        fl.kind = "optional_value"
        nargs = "?"
    fl.nargs = nargs
    ch = kw.get("choices")
    if ch == "__dynamic__":
        fl.note = "choices are computed at runtime; not checked"
    elif ch is not None:
        fl.choices = ch
    if kw.get("metavar_values"):
        fl.note = "suggested values (not argparse choices): " + ", ".join(map(str, kw["metavar_values"]))
    fl.optional = bool(kw.get("optional"))
    fl.required = bool(kw.get("required"))
    fl.transform = kw.get("transform")
