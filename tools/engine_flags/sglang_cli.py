"""The flags of ``python -m sglang.launch_server``, read from an SGLang wheel.

``ServerArgs.add_cli_args`` (``sglang/srt/server_args.py``) derives most flags
from the namespace dataclasses (``sglang_fields``) and then adds a few with
explicit ``parser.add_argument`` calls, read here.  Dynamic choices (reasoning
and tool parsers) are resolved from the name lists their helpers import; a
custom Action's ``nargs`` comes from the default of its ``__init__``.
"""

from __future__ import annotations

import ast
from typing import Any

from .evaluate import Unresolved, dotted, jsonable, try_eval
from .flag import Flag
from .sglang_fields import (
    SERVER_ARGS,
    check_mirror,
    field_flag,
    namespaces,
    type_parser,
)
from .symbols import SourceIndex, method_of

RUNTIME_CHOICES_NOTE = "choices are computed at runtime; not checked"


class SglangExtractor:
    def __init__(self, idx: SourceIndex):
        self.idx = idx
        self.flags: list[Flag] = []

    def extract(self) -> None:
        check_mirror(self.idx)
        cls, _ = self.idx.find_class(SERVER_ARGS, "ServerArgs")
        body = method_of(cls, "add_cli_args").body
        if not any(isinstance(s, ast.Expr) and "add_cli_args_from_dataclass" in dotted(s.value) for s in body):
            raise SystemExit("ServerArgs.add_cli_args no longer derives flags from the dataclass")
        for ncls, nmod in namespaces(self.idx):
            for st in ncls.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    fl = field_flag(self.idx, st, nmod, ncls)
                    if fl is not None:
                        self.flags.append(fl)
        self.explicit_flags()

    def explicit_flags(self) -> None:
        cls, mod = self.idx.find_class(SERVER_ARGS, "ServerArgs")
        fn = method_of(cls, "add_cli_args")
        src = self.idx.source_of(mod)
        local: dict[str, Any] = {}
        for st in fn.body:
            if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
                local[st.targets[0].id] = self._eval_local(st.value, mod, local)
                continue
            if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)):
                continue
            call = st.value
            if isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
                self.flags.append(self._explicit_flag(call, mod, src, local))

    def _explicit_flag(self, call: ast.Call, mod: str, src: str, local: dict[str, Any]) -> Flag:
        opts = [a.value for a in call.args if isinstance(a, ast.Constant)]
        kws = {k.arg: k.value for k in call.keywords}
        dest = try_eval(self.idx, kws["dest"], mod) if "dest" in kws else opts[0].lstrip("-").replace("-", "_")
        fl = Flag(option_strings=opts, dest=dest, source=src)
        action = None
        if "action" in kws:
            a = kws["action"]
            action = a.value if isinstance(a, ast.Constant) else dotted(a).split(".")[-1]
            fl.action = action
        nargs_given = "nargs" in kws
        nargs = try_eval(self.idx, kws["nargs"], mod) if nargs_given else None
        if action in ("store_true", "store_false"):
            fl.kind = "flag"
        elif action is not None and action not in ("append", "store"):
            # custom Action: read its __init__ nargs default
            default_nargs = self._action_default_nargs(kws["action"], mod)
            eff = nargs if nargs_given else default_nargs
            if eff == 0:
                fl.kind = "flag"
            else:
                fl.nargs = eff
        else:
            fl.nargs = nargs
        if fl.kind != "flag":
            self._value_keywords(fl, kws, mod, local)
        return fl

    def _value_keywords(self, fl: Flag, kws: dict[str, ast.AST], mod: str, local: dict[str, Any]) -> None:
        if "type" in kws:
            fl.type = type_parser(kws["type"]) if dotted(kws["type"]) not in ("int", "float", "str") else dotted(kws["type"])
        if "choices" in kws:
            v = self._eval_local(kws["choices"], mod, local)
            if v is Unresolved:
                fl.note = RUNTIME_CHOICES_NOTE
            else:
                fl.choices = jsonable(v)

    def _action_default_nargs(self, node: ast.AST, mod: str) -> Any:
        res = self.idx.resolve_expr(node, mod)
        if not res or res[0] != "class":
            return None
        init = method_of(res[1], "__init__")
        args = init.args
        defaults = dict(zip([a.arg for a in args.args][-len(args.defaults):], args.defaults)) if args.defaults else {}
        if "nargs" in defaults:
            return try_eval(self.idx, defaults["nargs"], res[2])
        return None

    def _eval_local(self, node: ast.AST, mod: str, local: dict) -> Any:
        """Evaluate expressions like set(CHOICES), ["auto"] + x, and calls of
        small module-level helpers that return list(NAME) of an imported
        constant."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            res = self.idx.resolve(mod, node.func.id)
            if res and res[0] == "func" and not node.args:
                return self._eval_helper(res[1], res[2])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = self._eval_local(node.left, mod, local), self._eval_local(node.right, mod, local)
            if a is Unresolved or b is Unresolved:
                return Unresolved
            return list(a) + list(b)
        if isinstance(node, ast.ListComp):
            return Unresolved
        return try_eval(self.idx, node, mod, local)

    def _eval_helper(self, fn: ast.FunctionDef, mod: str) -> Any:
        """Last `return list(X)` of a helper, with X from a local import."""
        local_imports: dict[str, tuple[str, str]] = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.ImportFrom) and n.module:
                for a in n.names:
                    local_imports[a.asname or a.name] = (n.module, a.name)
        rets = [n for n in fn.body if isinstance(n, ast.Return)]
        if not rets:
            return Unresolved
        r = rets[-1].value
        if isinstance(r, ast.Call) and dotted(r.func) == "list" and isinstance(r.args[0], ast.Name):
            nm = r.args[0].id
            if nm in local_imports:
                m, orig = local_imports[nm]
                v = try_eval(self.idx, ast.Name(id=orig), m)
                if v is not Unresolved:
                    return list(v)
        return Unresolved
