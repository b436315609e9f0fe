"""Static evaluation of simple constant expressions in a wheel's source.

Handles literals, list/tuple/set/dict displays (with ``*`` unpacking), unary
minus, ``+``, ``Literal[...]``, module and class constants reached through
imports, and ``list/tuple/sorted/set/frozenset(x)`` / ``get_args(Literal)``.
Anything else raises ``Unresolved``; ``try_eval`` turns that into the
``Unresolved`` class itself, used as a "no value" marker.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from .symbols import SourceIndex

MAX_DEPTH = 40
CONVERSIONS = {"list": list, "tuple": tuple, "sorted": sorted, "set": set, "frozenset": frozenset}
NAME_CONSTANTS = {"None": None, "True": True, "False": False}


class Unresolved(Exception):
    """A static evaluation could not be completed."""


@dataclass(frozen=True)
class LiteralType:
    """The value of ``Literal[a, b, ...]`` (nested Literals flattened)."""

    values: tuple


def evaluate(idx: SourceIndex, node: ast.AST, modname: str, local: dict | None = None, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise Unresolved("too deep")

    def ev(n: ast.AST) -> Any:
        return evaluate(idx, n, modname, local, depth + 1)

    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return _display(node, ev)
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {ev(k): ev(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -ev(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _add(ev(node.left), ev(node.right))
    if isinstance(node, ast.Subscript):
        return _literal(node, ev)
    if isinstance(node, ast.Name):
        return _name(idx, node, modname, local, depth)
    if isinstance(node, ast.Attribute):
        return _attribute(idx, node, modname, depth)
    if isinstance(node, ast.Call):
        return _call(node, ev)
    raise Unresolved(type(node).__name__)


def _display(node: ast.List | ast.Tuple | ast.Set, ev) -> Any:
    out = []
    for elt in node.elts:
        if isinstance(elt, ast.Starred):
            out.extend(ev(elt.value))
        else:
            out.append(ev(elt))
    if isinstance(node, ast.Tuple):
        return tuple(out)
    if isinstance(node, ast.Set):
        return set(out)
    return out


def _add(left: Any, right: Any) -> Any:
    if isinstance(left, tuple) and isinstance(right, list):
        return list(left) + right
    if isinstance(left, list) and isinstance(right, tuple):
        return left + list(right)
    return left + right


def _literal(node: ast.Subscript, ev) -> LiteralType:
    base = node.value
    if isinstance(base, (ast.Name, ast.Attribute)):
        bname = base.id if isinstance(base, ast.Name) else base.attr
        if bname == "Literal":
            sl = node.slice
            elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            vals: list = []
            for e in elts:
                v = ev(e)
                if isinstance(v, LiteralType):
                    vals.extend(v.values)
                else:
                    vals.append(v)
            return LiteralType(tuple(vals))
    raise Unresolved(ast.dump(node)[:80])


def _name(idx: SourceIndex, node: ast.Name, modname: str, local: dict | None, depth: int) -> Any:
    if local is not None and node.id in local:
        return local[node.id]
    if node.id in NAME_CONSTANTS:
        return NAME_CONSTANTS[node.id]
    res = idx.resolve(modname, node.id)
    if res is None or res[0] != "assign":
        raise Unresolved(node.id)
    return evaluate(idx, res[1], res[2], None, depth + 1)


def _attribute(idx: SourceIndex, node: ast.Attribute, modname: str, depth: int) -> Any:
    res = idx.resolve_expr(node, modname)
    if res is None or res[0] != "assign":
        raise Unresolved(ast.unparse(node))
    cls_local = None
    if len(res) > 3:  # class attribute: earlier class-level names are in scope
        cls_local = _class_scope(idx, res[3], res[1], res[2], depth)
    return evaluate(idx, res[1], res[2], cls_local, depth + 1)


def _class_scope(idx: SourceIndex, cls: ast.ClassDef, stop: ast.AST, modname: str, depth: int) -> dict:
    """Values of the class-level assignments before the one whose value is ``stop``."""
    cls_local: dict = {}
    for st in cls.body:
        if st is not None and isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
            if st.value is stop:
                break
            try:
                cls_local[st.targets[0].id] = evaluate(idx, st.value, modname, cls_local, depth + 1)
            except Unresolved:
                pass
    return cls_local


def _call(node: ast.Call, ev) -> Any:
    fname = node.func.id if isinstance(node.func, ast.Name) else (
        node.func.attr if isinstance(node.func, ast.Attribute) else None
    )
    if fname in CONVERSIONS and len(node.args) == 1:
        v = ev(node.args[0])
        if isinstance(v, LiteralType):
            v = v.values
        return CONVERSIONS[fname](v)
    if fname == "get_args" and len(node.args) == 1:
        v = ev(node.args[0])
        if isinstance(v, LiteralType):
            return v.values
    raise Unresolved(ast.unparse(node)[:80])


def try_eval(idx: SourceIndex, node: ast.AST | None, modname: str, local: dict | None = None) -> Any:
    """``evaluate``, or the ``Unresolved`` class when that fails (None for no node)."""
    if node is None:
        return None
    try:
        return evaluate(idx, node, modname, local)
    except (Unresolved, TypeError, RecursionError):
        return Unresolved


def jsonable(v: Any) -> Any:
    """A JSON-ready copy of v (sets sorted), or ``Unresolved``."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        out = [jsonable(x) for x in v]
        return Unresolved if any(x is Unresolved for x in out) else out
    if isinstance(v, (set, frozenset)):
        out = [jsonable(x) for x in v]
        if any(x is Unresolved for x in out):
            return Unresolved
        return sorted(out, key=lambda x: (x is None, str(x)))
    return Unresolved


def dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001  # pragma: no cover
        return "?"
