"""Walking the body of a vLLM ``add_cli_args`` / ``make_arg_parser`` function.

Tracked statements (``vllm/engine/arg_utils.py``,
``vllm/entrypoints/common/cli_args.py``)::

    x_kwargs = get_kwargs(Cls)                  # env: x_kwargs -> class
    y = x_kwargs["field"]                       # env: y -> config field
    x_kwargs["field"]["key"] = value            # override of one keyword
    del x_kwargs["field"]["key"]
    x_kwargs["field"]["choices"].remove(v)
    group.add_argument("--opt", **x_kwargs["field"], key=value)
    parser = Other.add_cli_args(parser)         # handed back to the extractor

``if`` bodies and else branches are both walked.
"""

from __future__ import annotations

import ast
from typing import Any, Protocol

from .evaluate import Unresolved, dotted, try_eval
from .vllm_argparse import apply_explicit
from .vllm_kwargs import KwargsMirror


class Extractor(Protocol):
    def add_flag(self, opts: list[str], kw: dict, source: str) -> None: ...

    def dispatch_add_cli_args(self, call: ast.Call, mod: str) -> None: ...


def _okey(t: tuple) -> tuple[str, str]:
    """Override key of a ('field', (classdef, module), field) target."""
    return (t[1][0].name, t[2])


class AddCliArgsWalker:
    def __init__(self, ex: Extractor, mirror: KwargsMirror, mod: str, source: str):
        self.ex = ex
        self.mirror = mirror
        self.idx = mirror.idx
        self.mod = mod
        self.source = source
        self.env: dict[str, tuple] = {}  # var -> ('cls', clsref) | ('field', clsref, fname)
        self.overrides: dict[tuple[str, str], dict] = {}

    def walk(self, stmts: list[ast.stmt]) -> None:
        for st in stmts:
            if isinstance(st, ast.Assign):
                self.handle_assign(st)
                if isinstance(st.value, ast.Call):
                    inner = st.value
                    # parser = Something.add_cli_args(parser)
                    if isinstance(inner.func, ast.Attribute) and inner.func.attr == "add_cli_args":
                        self.ex.dispatch_add_cli_args(inner, self.mod)
                    else:
                        self.handle_call(inner)
            elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
                self.handle_expr_call(st.value)
            elif isinstance(st, ast.If):
                self.walk(st.body)
                self.walk(st.orelse)
            elif isinstance(st, ast.Delete):
                self.handle_delete(st)

    def kw_target(self, node: ast.AST) -> tuple | None:
        """Resolve X_kwargs["f"] / X (field var) to ('field', clsref, f)."""
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            e = self.env.get(node.value.id)
            key = node.slice.value if isinstance(node.slice, ast.Constant) else None
            if e and e[0] == "cls" and isinstance(key, str):
                return ("field", e[1], key)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call):
            call = node.value
            if isinstance(call.func, ast.Name) and call.func.id == "get_kwargs":
                clsref = self.idx.find_class(self.mod, call.args[0].id)
                return ("field", clsref, node.slice.value)
        if isinstance(node, ast.Name):
            e = self.env.get(node.id)
            if e and e[0] == "field":
                return e
        return None

    def _field_kwargs(self, t: tuple) -> dict:
        """The field's derived keywords with this function's overrides applied."""
        kw = self.mirror.field_kwargs(t[1], t[2])
        kw.update(self.overrides.get(_okey(t), {}))
        return kw

    def handle_call(self, call: ast.Call) -> None:
        f = call.func
        if not (isinstance(f, ast.Attribute) and f.attr == "add_argument"):
            return
        opts = [a.value for a in call.args if isinstance(a, ast.Constant)]
        kw: dict[str, Any] = {}
        explicit: list[tuple[str, ast.AST]] = []
        for k in call.keywords:
            if k.arg is None:
                self._unpack(k.value, kw, explicit)
            else:
                explicit.append((k.arg, k.value))
        for key, value in explicit:
            apply_explicit(self.idx, kw, key, value, self.mod)
        self.ex.add_flag(opts, kw, self.source)

    def _unpack(self, v: ast.AST, kw: dict, explicit: list[tuple[str, ast.AST]]) -> None:
        """``**x_kwargs["f"]`` or ``**{**x_kwargs["f"], "key": value}``."""
        tgt = self.kw_target(v)
        if tgt is not None:
            kw.update(self._field_kwargs(tgt))
        elif isinstance(v, ast.Dict):
            for dk, dv in zip(v.keys, v.values):
                if dk is None:
                    t2 = self.kw_target(dv)
                    if t2 is None:
                        raise SystemExit(f"cannot resolve {dotted(dv)}")
                    kw.update(self._field_kwargs(t2))
                else:
                    explicit.append((dk.value, dv))
        else:
            raise SystemExit(f"cannot resolve **{dotted(v)} in {self.source}")

    def handle_assign(self, st: ast.Assign) -> None:
        tgt = st.targets[0]
        val = st.value
        # X = get_kwargs(Cls)
        if isinstance(tgt, ast.Name) and isinstance(val, ast.Call) and isinstance(val.func, ast.Name) and val.func.id == "get_kwargs":
            self.env[tgt.id] = ("cls", self.idx.find_class(self.mod, val.args[0].id))
            return
        # X = Y["field"] / X = get_kwargs(Cls)["field"]
        if isinstance(tgt, ast.Name):
            t = self.kw_target(val)
            if t is not None:
                self.env[tgt.id] = t
            return
        # Y["field"]["key"] = value   or   X["key"] = value
        if isinstance(tgt, ast.Subscript) and isinstance(tgt.slice, ast.Constant):
            key = tgt.slice.value
            t = self.kw_target(tgt.value)
            if t is not None:
                d = self.overrides.setdefault(_okey(t), {})
                apply_explicit(self.idx, d, key, val, self.mod)

    def handle_expr_call(self, call: ast.Call) -> None:
        f = call.func
        # Y["field"]["choices"].remove(X)
        if isinstance(f, ast.Attribute) and f.attr == "remove" and isinstance(f.value, ast.Subscript):
            key = f.value.slice.value if isinstance(f.value.slice, ast.Constant) else None
            t = self.kw_target(f.value.value)
            if t is not None and key == "choices":
                self._remove_choice(t, call.args[0])
            return
        self.handle_call(call)

    def _remove_choice(self, t: tuple, arg: ast.AST) -> None:
        base = self.mirror.field_kwargs(t[1], t[2])
        d = self.overrides.setdefault(_okey(t), {})
        choices = list(d.get("choices", base.get("choices") or []))
        rm = try_eval(self.idx, arg, self.mod)
        if rm is Unresolved:
            # A module constant defined outside the wheel index
            raise SystemExit(f"cannot evaluate {dotted(arg)}")
        choices.remove(rm)
        d["choices"] = choices

    def handle_delete(self, st: ast.Delete) -> None:
        for tgt in st.targets:
            if isinstance(tgt, ast.Subscript) and isinstance(tgt.slice, ast.Constant):
                t = self.kw_target(tgt.value)
                if t is not None:
                    self.overrides.setdefault(_okey(t), {})[tgt.slice.value] = None
