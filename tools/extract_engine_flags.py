#!/usr/bin/env python3
"""Extract the CLI flag tables of vLLM and SGLang from their published wheels.

The wheels are read as zip files and their Python source is analysed with
``ast`` only: nothing from vLLM or SGLang is imported or executed, and none of
their source is copied.  The output is two JSON fixtures used by
``tests/engine_check.py``:

    tests/fixtures/engines/vllm-<version>.json
    tests/fixtures/engines/sglang-<version>.json

Usage (from the repository root)::

    pip download --no-deps -d /tmp/wheels vllm==0.33.0 sglang==0.5.23
    python tools/extract_engine_flags.py \
        --vllm-wheel /tmp/wheels/vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl \
        --sglang-wheel /tmp/wheels/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl \
        --out-dir tests/fixtures/engines

What is extracted
-----------------
vLLM (``vllm serve``):
  * ``vllm/entrypoints/common/cli_args.py`` ``make_arg_parser`` (positional
    model, --headless, --api-server-count, ...), ``FrontendArgs`` /
    ``BaseFrontendArgs`` fields (every field becomes ``--field-name``), and
    their ``_customize_cli_kwargs`` overrides;
  * ``vllm/engine/arg_utils.py`` ``EngineArgs.add_cli_args`` and
    ``AsyncEngineArgs.add_cli_args``: every ``add_argument`` call, with the
    ``**xxx_kwargs["field"]`` keyword sets re-derived from the config
    dataclasses in ``vllm/config/*.py`` by mirroring ``_compute_kwargs``
    (bool -> BooleanOptionalAction (vLLM registers EnableDisableAction for
    it), Literal -> choices unless ``str`` is also allowed, list/tuple/set ->
    nargs, int -> int / human-readable int, dataclass -> JSON, ...).
  * The attention-backend facts (compute capability, kernel block sizes,
    KV-cache dtypes) from ``vllm/v1/attention/backends/mla/*.py``, the valid
    KV-cache dtypes from ``vllm/config/cache.py`` and the auto-selection
    priorities from ``vllm/platforms/cuda.py``.

SGLang (``python -m sglang.launch_server``):
  * ``sglang/srt/server_args.py``: ServerArgs is assembled from the
    namespace structs listed in ``_INPUT_NAMESPACES``
    (``sglang/srt/arg_groups/fields/*.py``); their ``A[T, Arg(...)]`` fields
    are turned into flags by mirroring
    ``sglang/srt/arg_groups/arg_utils.py::add_cli_args_from_dataclass``;
    plus the explicit ``parser.add_argument`` calls in
    ``ServerArgs.add_cli_args``.
  * Attention-backend choices (``sglang/srt/arg_groups/choices.py``) and
    the MLA backend rules from ``sglang/srt/arg_groups/overrides.py``,
    ``parallel_hook.py``, ``serving_hook.py``,
    ``sglang/srt/layers/attention/attention_registry.py`` and
    ``sglang/srt/utils/common.py``.

Rules that are expressed as code (``if x % y``) are not interpreted
generically: for each rule the extractor locates the code it relies on in the
wheel (and fails loudly if that code is gone) and records the wheel file as
``source``.  Values (backend lists, block sizes, dtypes, capabilities) are
always read out of the wheel.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class Unresolved(Exception):
    """A static evaluation could not be completed."""


# ---------------------------------------------------------------------------
# Source index over a wheel
# ---------------------------------------------------------------------------


class SourceIndex:
    """Reads modules out of a wheel and resolves module-level names."""

    def __init__(self, wheel_path: Path):
        self.wheel_path = wheel_path
        self.zf = zipfile.ZipFile(wheel_path)
        self.names = set(self.zf.namelist())
        self._ast: dict[str, ast.Module | None] = {}
        self._symbols: dict[str, dict[str, tuple]] = {}

    # -- modules -----------------------------------------------------------
    def module_path(self, modname: str) -> str | None:
        base = modname.replace(".", "/")
        for cand in (base + ".py", base + "/__init__.py"):
            if cand in self.names:
                return cand
        return None

    def is_package(self, modname: str) -> bool:
        return (modname.replace(".", "/") + "/__init__.py") in self.names

    def module_ast(self, modname: str) -> ast.Module | None:
        if modname not in self._ast:
            path = self.module_path(modname)
            if path is None:
                self._ast[modname] = None
            else:
                src = self.zf.read(path).decode("utf-8")
                self._ast[modname] = ast.parse(src, filename=path)
        return self._ast[modname]

    def require_ast(self, modname: str) -> ast.Module:
        tree = self.module_ast(modname)
        if tree is None:
            raise SystemExit(f"module {modname} not found in {self.wheel_path.name}")
        return tree

    def source_of(self, modname: str) -> str:
        path = self.module_path(modname)
        if path is None:
            raise SystemExit(f"module {modname} not found in {self.wheel_path.name}")
        return path

    def _abs_module(self, modname: str, level: int, target: str | None) -> str:
        if level == 0:
            return target or ""
        parts = modname.split(".")
        if not self.is_package(modname):
            parts = parts[:-1]
        if level > 1:
            parts = parts[: len(parts) - (level - 1)]
        if target:
            parts.append(target)
        return ".".join(parts)

    def symbols(self, modname: str) -> dict[str, tuple]:
        """name -> ('assign', node, mod) | ('class', node, mod) |
        ('func', node, mod) | ('import', mod, name) | ('module', mod)"""
        if modname in self._symbols:
            return self._symbols[modname]
        table: dict[str, tuple] = {}
        self._symbols[modname] = table
        tree = self.module_ast(modname)
        if tree is None:
            return table

        def visit(stmts: list[ast.stmt]) -> None:
            for st in stmts:
                if isinstance(st, ast.Assign):
                    for tgt in st.targets:
                        if isinstance(tgt, ast.Name):
                            table[tgt.id] = ("assign", st.value, modname)
                elif isinstance(st, ast.AnnAssign):
                    if isinstance(st.target, ast.Name) and st.value is not None:
                        table[st.target.id] = ("assign", st.value, modname)
                elif isinstance(st, ast.ClassDef):
                    table[st.name] = ("class", st, modname)
                elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    table[st.name] = ("func", st, modname)
                elif isinstance(st, ast.ImportFrom):
                    src = self._abs_module(modname, st.level, st.module)
                    for alias in st.names:
                        if alias.name == "*":
                            continue
                        table[alias.asname or alias.name] = ("import", src, alias.name)
                elif isinstance(st, ast.Import):
                    for alias in st.names:
                        if alias.asname:
                            table[alias.asname] = ("module", alias.name)
                        else:
                            top = alias.name.split(".")[0]
                            table.setdefault(top, ("module", top))
                elif isinstance(st, ast.If):
                    test = st.test
                    is_tc = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
                    )
                    if is_tc:
                        # What exists at runtime is the else branch.
                        visit(st.orelse)
                    else:
                        visit(st.body)
                        visit(st.orelse)
                elif isinstance(st, ast.Try):
                    visit(st.body)
                    for h in st.handlers:
                        visit(h.body)

        visit(tree.body)
        return table

    def resolve(self, modname: str, name: str, _depth: int = 0) -> tuple | None:
        """Follow imports until a definition is found."""
        if _depth > 25:
            return None
        sym = self.symbols(modname).get(name)
        if sym is None:
            # `from pkg import submodule`
            sub = f"{modname}.{name}"
            if self.module_path(sub) is not None:
                return ("module", sub)
            return None
        if sym[0] == "import":
            src, orig = sym[1], sym[2]
            if self.module_path(f"{src}.{orig}") is not None and orig not in self.symbols(src):
                return ("module", f"{src}.{orig}")
            if self.module_ast(src) is None:
                return ("external", src, orig)
            res = self.resolve(src, orig, _depth + 1)
            if res is None:
                if self.module_path(f"{src}.{orig}") is not None:
                    return ("module", f"{src}.{orig}")
                return ("external", src, orig)
            return res
        return sym

    def resolve_expr(self, node: ast.AST, modname: str) -> tuple | None:
        """Resolve a Name / dotted Attribute to a definition."""
        if isinstance(node, ast.Name):
            return self.resolve(modname, node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve_expr(node.value, modname)
            if base is None:
                return None
            if base[0] == "module":
                if self.module_ast(base[1]) is None:
                    return ("external", base[1], node.attr)
                return self.resolve(base[1], node.attr)
            if base[0] == "class":
                for st in base[1].body:
                    if isinstance(st, ast.Assign):
                        for tgt in st.targets:
                            if isinstance(tgt, ast.Name) and tgt.id == node.attr:
                                return ("assign", st.value, base[2], base[1])
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        if st.target.id == node.attr and st.value is not None:
                            return ("assign", st.value, base[2])
                    if isinstance(st, (ast.FunctionDef, ast.ClassDef)) and st.name == node.attr:
                        return ("func" if isinstance(st, ast.FunctionDef) else "class", st, base[2])
                return None
            if base[0] == "external":
                return ("external", f"{base[1]}.{base[2]}", node.attr)
        return None

    def find_class(self, modname: str, name: str) -> tuple[ast.ClassDef, str]:
        res = self.resolve(modname, name)
        if res is not None and res[0] == "assign":
            # rebound later (e.g. ServerArgs = msgspec.defstruct(...)): use the class statement
            for st in self.require_ast(res[2]).body:
                if isinstance(st, ast.ClassDef) and st.name == name:
                    return st, res[2]
        if res is None or res[0] != "class":
            raise SystemExit(f"class {name} not found from {modname}")
        return res[1], res[2]

    def find_function(self, modname: str, name: str) -> ast.FunctionDef:
        tree = self.require_ast(modname)
        for st in ast.walk(tree):
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == name:
                return st
        raise SystemExit(f"function {name} not found in {modname}")


def method_of(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    for st in cls.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == name:
            return st
    raise SystemExit(f"method {cls.name}.{name} not found")


# ---------------------------------------------------------------------------
# Static evaluation of simple constant expressions
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LiteralType:
    values: tuple


def evaluate(idx: SourceIndex, node: ast.AST, modname: str, local: dict | None = None, depth: int = 0) -> Any:
    if depth > 40:
        raise Unresolved("too deep")
    ev = lambda n: evaluate(idx, n, modname, local, depth + 1)  # noqa: E731
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
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
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {ev(k): ev(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -ev(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = ev(node.left), ev(node.right)
        if isinstance(left, tuple) and isinstance(right, list):
            return list(left) + right
        if isinstance(left, list) and isinstance(right, tuple):
            return left + list(right)
        return left + right
    if isinstance(node, ast.Subscript):
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
    if isinstance(node, ast.Name):
        if local is not None and node.id in local:
            return local[node.id]
        if node.id in ("None", "True", "False"):
            return {"None": None, "True": True, "False": False}[node.id]
        res = idx.resolve(modname, node.id)
        if res is None or res[0] != "assign":
            raise Unresolved(node.id)
        return evaluate(idx, res[1], res[2], None, depth + 1)
    if isinstance(node, ast.Attribute):
        res = idx.resolve_expr(node, modname)
        if res is None or res[0] != "assign":
            raise Unresolved(ast.unparse(node))
        cls_local = None
        if len(res) > 3:  # class attribute: earlier class-level names are in scope
            cls_local = {}
            for st in res[3].body:
                if st is not None and isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
                    if st.value is res[1]:
                        break
                    try:
                        cls_local[st.targets[0].id] = evaluate(idx, st.value, res[2], cls_local, depth + 1)
                    except Unresolved:
                        pass
        return evaluate(idx, res[1], res[2], cls_local, depth + 1)
    if isinstance(node, ast.Call):
        fname = node.func.id if isinstance(node.func, ast.Name) else (
            node.func.attr if isinstance(node.func, ast.Attribute) else None
        )
        if fname in ("list", "tuple", "sorted", "set", "frozenset") and len(node.args) == 1:
            v = ev(node.args[0])
            if isinstance(v, LiteralType):
                v = v.values
            return {"list": list, "tuple": tuple, "sorted": sorted, "set": set, "frozenset": frozenset}[fname](v)
        if fname == "get_args" and len(node.args) == 1:
            v = ev(node.args[0])
            if isinstance(v, LiteralType):
                return v.values
        raise Unresolved(ast.unparse(node)[:80])
    raise Unresolved(type(node).__name__)


def try_eval(idx: SourceIndex, node: ast.AST | None, modname: str, local: dict | None = None) -> Any:
    if node is None:
        return None
    try:
        return evaluate(idx, node, modname, local)
    except (Unresolved, TypeError, RecursionError):
        return Unresolved


def jsonable(v: Any) -> Any:
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
    except Exception:  # pragma: no cover
        return "?"


# ---------------------------------------------------------------------------
# Argparse-level description of one flag
# ---------------------------------------------------------------------------


@dataclass
class Flag:
    option_strings: list[str]
    dest: str
    kind: str = "value"  # value | flag (no value) | optional_value
    type: str = "str"
    nargs: Any = None
    choices: Any = None
    action: str | None = None
    negated: list[str] = field(default_factory=list)
    optional: bool = False  # vLLM optional_type(): "" and "None" mean None
    required: bool = False
    default: Any = None
    source: str = ""
    origin: str | None = None  # config field this flag came from
    bounds: dict | None = None
    note: str | None = None
    transform: str | None = None  # applied to the value before the choices check

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "aliases": self.option_strings[1:],
            "dest": self.dest,
            "takes_value": self.kind != "flag",
            "source": self.source,
        }
        if self.kind == "flag":
            d["type"] = "bool"
        else:
            d["type"] = self.type
            d["nargs"] = self.nargs
        if self.kind == "optional_value":
            d["nargs"] = "?"
        if self.choices is not None:
            d["choices"] = self.choices
        if self.action:
            d["action"] = self.action
        if self.negated:
            d["negated"] = self.negated
        if self.optional:
            d["none_allowed"] = True
        if self.required:
            d["required"] = True
        if self.default is not None and self.default is not Unresolved:
            d["default"] = self.default
        if self.origin:
            d["config_field"] = self.origin
        if self.bounds:
            d["bounds"] = self.bounds
        if self.note:
            d["note"] = self.note
        if self.transform:
            d["transform"] = self.transform
        return d


def boolean_optional_strings(opts: list[str], enable_disable: bool) -> tuple[list[str], list[str]]:
    """Option strings created by argparse.BooleanOptionalAction (and vLLM's
    EnableDisableAction, which is what FlexibleArgumentParser registers for
    it); returns (all, negated)."""
    all_opts = list(opts)
    negated: list[str] = []
    for o in opts:
        if o.startswith("--"):
            n = "--no-" + o[2:]
            all_opts.append(n)
            negated.append(n)
    if enable_disable:
        for o in opts:
            for pre, inv in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                if o.startswith(pre):
                    n = inv + o[len(pre):]
                    all_opts.append(n)
                    negated.append(n)
    return all_opts, negated


# ---------------------------------------------------------------------------
# vLLM
# ---------------------------------------------------------------------------


# Type atoms produced by TypeAnalyzer.analyze():
#   ('none',) ('bool',) ('int',) ('float',) ('str',) ('dict',) ('classvar',)
#   ('literal', values) ('list'|'set', [atoms]) ('tuple', [[atoms]...], has_ellipsis)
#   ('dataclass', name) ('other', name)
BUILTIN_ATOMS = {
    "bool": ("bool",), "int": ("int",), "float": ("float",), "str": ("str",),
    "dict": ("dict",), "Dict": ("dict",), "Mapping": ("dict",), "MutableMapping": ("dict",),
}
DATACLASS_DECORATORS = {"config", "dataclass"}


class TypeAnalyzer:
    def __init__(self, idx: SourceIndex):
        self.idx = idx

    def is_dataclass(self, cls: ast.ClassDef) -> bool:
        for dec in cls.decorator_list:
            d = dec.func if isinstance(dec, ast.Call) else dec
            name = d.id if isinstance(d, ast.Name) else (d.attr if isinstance(d, ast.Attribute) else "")
            if name in DATACLASS_DECORATORS:
                return True
        return False

    def class_kind(self, cls: ast.ClassDef, modname: str, depth: int = 0) -> tuple:
        if self.is_dataclass(cls):
            return ("dataclass", cls.name)
        for b in cls.bases:
            if isinstance(b, ast.Subscript):  # e.g. class X(dict[str, Y])
                b = b.value
            bn = b.id if isinstance(b, ast.Name) else (b.attr if isinstance(b, ast.Attribute) else "")
            if bn in ("dict", "Dict"):
                return ("dict",)
            if bn == "TypedDict":
                return ("other", cls.name)
            if depth < 5:
                res = self.idx.resolve_expr(b, modname)
                if res and res[0] == "class":
                    k = self.class_kind(res[1], res[2], depth + 1)
                    if k[0] == "dict":
                        return k
        return ("other", cls.name)

    def analyze(self, node: ast.AST, modname: str, depth: int = 0) -> list[tuple]:
        """Flattened set of type atoms (mirrors vLLM's get_type_hints())."""
        if depth > 30:
            return [("other", "?")]
        rec = lambda n: self.analyze(n, modname, depth + 1)  # noqa: E731
        if isinstance(node, ast.Constant):
            if node.value is None:
                return [("none",)]
            if isinstance(node.value, str):  # forward reference
                return rec(ast.parse(node.value, mode="eval").body)
            return [("other", repr(node.value))]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return rec(node.left) + rec(node.right)
        if isinstance(node, ast.Subscript):
            base = node.value
            bname = base.id if isinstance(base, ast.Name) else (base.attr if isinstance(base, ast.Attribute) else "")
            sl = node.slice
            elts = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
            if bname == "Optional":
                return rec(elts[0]) + [("none",)]
            if bname == "Union":
                out = []
                for e in elts:
                    out += rec(e)
                return out
            if bname == "Annotated":
                return rec(elts[0])
            if bname == "Literal":
                v = try_eval(self.idx, node, modname)
                if isinstance(v, LiteralType):
                    return [("literal", v.values)]
                return [("other", "Literal?")]
            if bname in ("list", "List", "Sequence"):
                return [("list", rec(elts[0]))]
            if bname in ("set", "Set", "frozenset"):
                return [("set", rec(elts[0]))]
            if bname in ("tuple", "Tuple"):
                ell = any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in elts)
                return [("tuple", [rec(e) for e in elts if not (isinstance(e, ast.Constant) and e.value is Ellipsis)], ell)]
            if bname in ("dict", "Dict", "Mapping", "MutableMapping"):
                return [("dict",)]
            if bname in ("ClassVar", "InitVar"):
                return [("classvar",)]
            if bname in ("type", "Type", "Callable"):
                return [("other", bname)]
            # Generic alias of a user class, e.g. Foo[int]
            return rec(base)
        if isinstance(node, ast.Name):
            if node.id in BUILTIN_ATOMS:
                return [BUILTIN_ATOMS[node.id]]
            if node.id == "None":
                return [("none",)]
            if node.id in ("Any",):
                return [("other", "Any")]
            res = self.idx.resolve(modname, node.id)
            return self._from_resolved(res, node.id, depth)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in ("typing", "t") and node.attr == "Any":
                return [("other", "Any")]
            res = self.idx.resolve_expr(node, modname)
            return self._from_resolved(res, dotted(node), depth)
        return [("other", type(node).__name__)]

    def _from_resolved(self, res: tuple | None, label: str, depth: int) -> list[tuple]:
        if res is None:
            return [("other", label)]
        if res[0] == "class":
            return [self.class_kind(res[1], res[2])]
        if res[0] == "assign":
            val = res[1]
            # Type aliases: X = Literal[...] / X = A | B / X = SomeClass / X = str
            if isinstance(val, ast.Call):
                fn = val.func
                fname = fn.id if isinstance(fn, ast.Name) else (fn.attr if isinstance(fn, ast.Attribute) else "")
                if fname == "TypeVar":
                    return [("other", label)]
                if fname == "NewType" and len(val.args) == 2:
                    return self.analyze(val.args[1], res[2], depth + 1)
                return [("other", label)]
            return self.analyze(val, res[2], depth + 1)
        if res[0] == "external":
            mod, name = res[1], res[2]
            if mod in ("typing", "typing_extensions") and name in BUILTIN_ATOMS:
                return [BUILTIN_ATOMS[name]]
            return [("other", f"{mod}.{name}")]
        return [("other", label)]


def atoms_contain(atoms: list[tuple], kind: str) -> bool:
    return any(a[0] == kind for a in atoms)


def dataclass_fields(idx: SourceIndex, ta: TypeAnalyzer, cls: ast.ClassDef, modname: str) -> dict[str, dict]:
    """Ordered dataclass fields of cls including base classes."""
    out: dict[str, dict] = {}
    for b in cls.bases:
        res = idx.resolve_expr(b, modname)
        if res and res[0] == "class":
            out.update(dataclass_fields(idx, ta, res[1], res[2]))
    for st in cls.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        atoms = ta.analyze(st.annotation, modname)
        if atoms_contain(atoms, "classvar"):
            continue
        default: Any = Unresolved
        bounds: dict = {}
        has_default = st.value is not None
        v = st.value
        if isinstance(v, ast.Call):
            fn = v.func
            fname = fn.id if isinstance(fn, ast.Name) else (fn.attr if isinstance(fn, ast.Attribute) else "")
            if fname in ("Field", "field"):
                for kw in v.keywords:
                    if kw.arg == "default":
                        default = try_eval(idx, kw.value, modname)
                    elif kw.arg in ("gt", "ge", "lt", "le"):
                        b = try_eval(idx, kw.value, modname)
                        if isinstance(b, (int, float)) and not isinstance(b, bool):
                            bounds[kw.arg] = b
                    elif kw.arg == "default_factory":
                        default = Unresolved
            else:
                default = Unresolved
        elif v is not None:
            default = try_eval(idx, v, modname)
        out[st.target.id] = {
            "atoms": atoms,
            "annotation": ast.unparse(st.annotation),
            "default": jsonable(default) if default is not Unresolved else Unresolved,
            "has_default": has_default,
            "bounds": bounds or None,
            "module": modname,
            "class": cls.name,
        }
    return out




class VllmExtractor:
    ARG_UTILS = "vllm.engine.arg_utils"
    CLI_ARGS = "vllm.entrypoints.common.cli_args"

    def __init__(self, idx: SourceIndex):
        self.idx = idx
        self.ta = TypeAnalyzer(idx)
        self.flags: list[Flag] = []
        self.positionals: list[dict] = []
        self._human_int_fields, self._human_int_or_auto_fields = self._read_compute_kwargs_rules()

    # -- _compute_kwargs mirror --------------------------------------------
    def _read_compute_kwargs_rules(self) -> tuple[set[str], set[str]]:
        fn = self.idx.find_function(self.ARG_UTILS, "_compute_kwargs")
        human: set[str] = set()
        auto: set[str] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "human_readable_int_args" for t in node.targets
            ):
                human = set(evaluate(self.idx, node.value, self.ARG_UTILS))
            if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
                t = node.test
                if (
                    isinstance(t.left, ast.Name) and t.left.id == "name"
                    and isinstance(t.comparators[0], ast.Constant)
                    and "human_readable_int_or_auto" in ast.unparse(node.body[0])
                ):
                    auto.add(t.comparators[0].value)
        if not human or not auto:
            raise SystemExit("could not find the human-readable int fields in _compute_kwargs")
        return human, auto

    def field_kwargs(self, cls_ref: tuple[ast.ClassDef, str], fname: str) -> dict:
        cls, mod = cls_ref
        fields_ = dataclass_fields(self.idx, self.ta, cls, mod)
        if fname not in fields_:
            raise SystemExit(f"field {cls.name}.{fname} not found")
        f = fields_[fname]
        atoms = [a if a[0] != "dict" else ("dict",) for a in f["atoms"]]
        kinds = {a[0] for a in atoms}
        kw: dict[str, Any] = {"origin": f"{cls.name}.{fname}", "default": f["default"], "bounds": f["bounds"]}
        is_bool_str_none = kinds == {"bool", "str", "none"}
        if "dataclass" in kinds:
            kw["type"] = "json"
        elif is_bool_str_none:
            kw["type"] = "str"
            kw["nargs"] = "?"
            kw["const"] = True
        elif "bool" in kinds:
            kw["action"] = "BooleanOptionalAction"
        elif "literal" in kinds:
            lit = next(a for a in atoms if a[0] == "literal")
            vals = list(lit[1])
            kw["type"] = type(vals[0]).__name__
            if "str" not in kinds:
                kw["choices"] = sorted(vals)
            else:
                kw["metavar_values"] = sorted(vals)
        elif kinds & {"tuple", "list", "set"}:
            coll = next(a for a in atoms if a[0] in ("tuple", "list", "set"))
            if coll[0] == "tuple":
                elems = coll[1]
                elem = elems[0] if elems else [("str",)]
                kw["nargs"] = "+" if coll[2] else len(elems)
            else:
                elem = coll[1]
                kw["nargs"] = "+"
            ek = {a[0] for a in elem}
            if len(elem) > 1 and "str" in ek:
                kw["type"] = "str"
            elif "literal" in ek:
                lit = next(a for a in elem if a[0] == "literal")
                kw["type"] = type(lit[1][0]).__name__
                kw["choices"] = sorted(lit[1])
            else:
                e = elem[0][0]
                kw["type"] = {"int": "int", "float": "float", "str": "str", "bool": "bool"}.get(e, "str")
        elif "int" in kinds:
            if fname in self._human_int_or_auto_fields:
                kw["type"] = "human_int_or_auto"
            elif fname in self._human_int_fields:
                kw["type"] = "human_int"
            else:
                kw["type"] = "int"
        elif "float" in kinds:
            kw["type"] = "float"
        elif "dict" in kinds and ("str" in kinds or "other" in kinds or "dataclass" in kinds):
            kw["type"] = "json_or_str"
        elif "dict" in kinds:
            kw["type"] = "json"
        elif "str" in kinds or "other" in kinds:
            kw["type"] = "str"
        else:
            raise SystemExit(f"unsupported type for {cls.name}.{fname}: {f['annotation']}")
        if "none" in kinds and "bool" not in kinds:
            kw["optional"] = True
            if kw.get("choices") is not None:
                kw["choices"] = list(kw["choices"]) + [None]
        return kw

    # -- explicit keyword values -------------------------------------------
    def _type_name(self, node: ast.AST, mod: str) -> tuple[str, bool]:
        """Map an argparse type= expression to (type name, none_allowed)."""
        if isinstance(node, ast.Name):
            name = node.id
            if name in ("int", "float", "str"):
                return name, False
            if name == "human_readable_int":
                return "human_int", False
            if name == "human_readable_int_or_auto":
                return "human_int_or_auto", False
            if name == "union_dict_and_str":
                return "json_or_str", False
            return "str", False
        if isinstance(node, ast.Attribute) and node.attr == "loads":
            return "json", False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "optional_type":
                inner, _ = self._type_name(node.args[0], mod)
                return inner, True
            if node.func.id == "parse_type":
                return self._type_name(node.args[0], mod)
        return "str", False

    def _apply_explicit(self, kw: dict, key: str, value: ast.AST, mod: str) -> None:
        if key == "type":
            if isinstance(value, ast.Lambda):
                body = ast.unparse(value.body)
                if body == "s.lower().replace('-', '_')":
                    kw["transform"] = "lower_dash_to_underscore"
                elif "isdigit" not in body:
                    raise SystemExit(f"unknown lambda type {body}")
            t, opt = self._type_name(value, mod)
            kw["type"] = t
            if opt:
                kw["optional"] = True
            else:
                kw.pop("optional", None)
        elif key == "choices":
            v = try_eval(self.idx, value, mod)
            if isinstance(v, LiteralType):
                v = list(v.values)
            v = jsonable(v) if v is not Unresolved else Unresolved
            kw["choices"] = v if v is not Unresolved else "__dynamic__"
        elif key == "action":
            if isinstance(value, ast.Constant):
                kw["action"] = value.value
            else:
                kw["action"] = dotted(value).split(".")[-1]
        elif key == "nargs":
            kw["nargs"] = try_eval(self.idx, value, mod)
        elif key == "const":
            kw["const"] = True
        elif key == "dest":
            kw["dest"] = try_eval(self.idx, value, mod)
        elif key == "default":
            d = try_eval(self.idx, value, mod)
            kw["default"] = jsonable(d) if d is not Unresolved else Unresolved
        elif key == "required":
            kw["required"] = bool(try_eval(self.idx, value, mod))

    # -- walking add_cli_args ----------------------------------------------
    def run_add_cli_args(self, fn: ast.FunctionDef, mod: str, source: str) -> None:
        env: dict[str, tuple] = {}  # var -> ('cls', clsref) | ('field', clsref, fname)
        overrides: dict[tuple[str, str], dict] = {}

        def kw_target(node: ast.AST) -> tuple | None:
            """Resolve X_kwargs["f"] / X (field var) to ('field', clsref, f)."""
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                e = env.get(node.value.id)
                key = node.slice.value if isinstance(node.slice, ast.Constant) else None
                if e and e[0] == "cls" and isinstance(key, str):
                    return ("field", e[1], key)
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call):
                call = node.value
                if isinstance(call.func, ast.Name) and call.func.id == "get_kwargs":
                    clsref = self.idx.find_class(mod, call.args[0].id)
                    return ("field", clsref, node.slice.value)
            if isinstance(node, ast.Name):
                e = env.get(node.id)
                if e and e[0] == "field":
                    return e
            return None

        def okey(t: tuple) -> tuple[str, str]:
            return (t[1][0].name, t[2])

        def handle_call(call: ast.Call) -> None:
            f = call.func
            if not (isinstance(f, ast.Attribute) and f.attr == "add_argument"):
                return
            opts = [a.value for a in call.args if isinstance(a, ast.Constant)]
            kw: dict[str, Any] = {}
            explicit: list[tuple[str, ast.AST]] = []
            for k in call.keywords:
                if k.arg is None:
                    v = k.value
                    tgt = kw_target(v)
                    if tgt is not None:
                        kw.update(self.field_kwargs(tgt[1], tgt[2]))
                        kw.update(overrides.get(okey(tgt), {}))
                    elif isinstance(v, ast.Dict):
                        for dk, dv in zip(v.keys, v.values):
                            if dk is None:
                                t2 = kw_target(dv)
                                if t2 is None:
                                    raise SystemExit(f"cannot resolve {dotted(dv)}")
                                kw.update(self.field_kwargs(t2[1], t2[2]))
                                kw.update(overrides.get(okey(t2), {}))
                            else:
                                explicit.append((dk.value, dv))
                    else:
                        raise SystemExit(f"cannot resolve **{dotted(v)} in {source}")
                else:
                    explicit.append((k.arg, k.value))
            for key, value in explicit:
                self._apply_explicit(kw, key, value, mod)
            self.add_flag(opts, kw, source)

        def handle_assign(st: ast.Assign) -> None:
            tgt = st.targets[0]
            val = st.value
            # X = get_kwargs(Cls)
            if isinstance(tgt, ast.Name) and isinstance(val, ast.Call) and isinstance(val.func, ast.Name) and val.func.id == "get_kwargs":
                env[tgt.id] = ("cls", self.idx.find_class(mod, val.args[0].id))
                return
            # X = Y["field"] / X = get_kwargs(Cls)["field"]
            if isinstance(tgt, ast.Name):
                t = kw_target(val)
                if t is not None:
                    env[tgt.id] = t
                return
            # Y["field"]["key"] = value   or   X["key"] = value
            if isinstance(tgt, ast.Subscript) and isinstance(tgt.slice, ast.Constant):
                key = tgt.slice.value
                t = kw_target(tgt.value)
                if t is not None:
                    d = overrides.setdefault(okey(t), {})
                    self._apply_explicit(d, key, val, mod)

        def handle_expr_call(call: ast.Call) -> None:
            f = call.func
            # Y["field"]["choices"].remove(X)
            if isinstance(f, ast.Attribute) and f.attr == "remove" and isinstance(f.value, ast.Subscript):
                key = f.value.slice.value if isinstance(f.value.slice, ast.Constant) else None
                t = kw_target(f.value.value)
                if t is not None and key == "choices":
                    base = self.field_kwargs(t[1], t[2])
                    d = overrides.setdefault(okey(t), {})
                    choices = list(d.get("choices", base.get("choices") or []))
                    rm = try_eval(self.idx, call.args[0], mod)
                    if rm is Unresolved:
                        # A module constant defined outside the wheel index
                        raise SystemExit(f"cannot evaluate {dotted(call.args[0])}")
                    choices.remove(rm)
                    d["choices"] = choices
                return
            handle_call(call)

        def walk(stmts: list[ast.stmt]) -> None:
            for st in stmts:
                if isinstance(st, ast.Assign):
                    handle_assign(st)
                    if isinstance(st.value, ast.Call):
                        inner = st.value
                        # parser = Something.add_cli_args(parser)
                        if isinstance(inner.func, ast.Attribute) and inner.func.attr == "add_cli_args":
                            self.dispatch_add_cli_args(inner, mod)
                        else:
                            handle_call(inner)
                elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
                    handle_expr_call(st.value)
                elif isinstance(st, ast.If):
                    walk(st.body)
                    walk(st.orelse)
                elif isinstance(st, ast.Delete):
                    for tgt in st.targets:
                        if isinstance(tgt, ast.Subscript) and isinstance(tgt.slice, ast.Constant):
                            t = kw_target(tgt.value)
                            if t is not None:
                                overrides.setdefault(okey(t), {})[tgt.slice.value] = None

        walk(fn.body)

    def dispatch_add_cli_args(self, call: ast.Call, mod: str) -> None:
        target = call.func.value
        name = dotted(target)
        if name == "FrontendArgs":
            self.frontend_args(mod)
        elif name == "AsyncEngineArgs":
            cls, cmod = self.idx.find_class(mod, "AsyncEngineArgs")
            self.run_add_cli_args(method_of(cls, "add_cli_args"), cmod, self.idx.source_of(cmod))
        elif name == "EngineArgs":
            cls, cmod = self.idx.find_class(mod, "EngineArgs")
            self.run_add_cli_args(method_of(cls, "add_cli_args"), cmod, self.idx.source_of(cmod))
        else:
            raise SystemExit(f"unknown add_cli_args target {name}")

    def frontend_args(self, mod: str) -> None:
        """BaseFrontendArgs.add_cli_args registers --<field> for every field,
        after the _customize_cli_kwargs hooks of the class hierarchy."""
        cls, cmod = self.idx.find_class(mod, "FrontendArgs")
        fields_ = dataclass_fields(self.idx, self.ta, cls, cmod)
        kwargs = {name: self.field_kwargs((cls, cmod), name) for name in fields_}
        # hierarchy: base first
        chain = []
        c, m = cls, cmod
        while True:
            chain.append((c, m))
            nxt = None
            for b in c.bases:
                res = self.idx.resolve_expr(b, m)
                if res and res[0] == "class":
                    nxt = (res[1], res[2])
            if nxt is None:
                break
            c, m = nxt
        for c, m in reversed(chain):
            try:
                fn = method_of(c, "_customize_cli_kwargs")
            except SystemExit:
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign):
                    tgt = node.targets[0]
                    if (
                        isinstance(tgt, ast.Subscript) and isinstance(tgt.value, ast.Subscript)
                        and isinstance(tgt.value.slice, ast.Constant) and isinstance(tgt.slice, ast.Constant)
                    ):
                        fname, key = tgt.value.slice.value, tgt.slice.value
                        if fname in kwargs:
                            self._apply_explicit(kwargs[fname], key, node.value, m)
                elif isinstance(node, ast.Delete):
                    for tgt in node.targets:
                        if (
                            isinstance(tgt, ast.Subscript) and isinstance(tgt.value, ast.Subscript)
                            and isinstance(tgt.value.slice, ast.Constant)
                        ):
                            kwargs[tgt.value.slice.value].pop(tgt.slice.value, None)
        src = self.idx.source_of(cmod)
        for name, kw in kwargs.items():
            self.add_flag(["--" + name.replace("_", "-")], kw, src)

    def add_flag(self, opts: list[str], kw: dict, source: str) -> None:
        if not opts:
            return
        if not opts[0].startswith("-"):
            self.positionals.append({"name": opts[0], "nargs": kw.get("nargs"), "type": kw.get("type", "str"), "source": source})
            return
        long_opts = [o for o in opts if o.startswith("--")]
        dest = kw.get("dest") or (long_opts[0] if long_opts else opts[0]).lstrip("-").replace("-", "_")
        fl = Flag(option_strings=list(opts), dest=dest, source=source)
        action = kw.get("action")
        fl.origin = kw.get("origin")
        fl.bounds = kw.get("bounds")
        d = kw.get("default", None)
        fl.default = d if d is not Unresolved else None
        if action in ("store_true", "store_false", "store_const", "count", "help", "version"):
            fl.kind = "flag"
            fl.action = action
        elif action == "BooleanOptionalAction":
            fl.kind = "flag"
            fl.action = "BooleanOptionalAction"
            fl.option_strings, fl.negated = boolean_optional_strings(list(opts), enable_disable=True)
        elif action == "append":
            fl.action = "append"
        elif action is not None:
            # custom argparse.Action subclass: nargs defaults to one value
            fl.action = action
        if fl.kind != "flag":
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
        self.flags.append(fl)

    def extract(self) -> None:
        fn = self.idx.find_function(self.CLI_ARGS, "make_arg_parser")
        self.run_add_cli_args(fn, self.CLI_ARGS, self.idx.source_of(self.CLI_ARGS))

    # -- rules ---------------------------------------------------------------
    def rules(self) -> dict:
        idx = self.idx
        rules: dict[str, Any] = {}

        # Attention backend names (registry enum)
        reg_mod = "vllm.v1.attention.backends.registry"
        enum_cls, _ = idx.find_class(reg_mod, "AttentionBackendEnum")
        names = []
        for st in enum_cls.body:
            if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
                n = st.targets[0].id
                if n.isupper():
                    v = st.value
                    path = try_eval(idx, v, reg_mod)
                    names.append((n, path if isinstance(path, str) else None))
        validator_src = idx.source_of("vllm.config.attention")
        vsrc = idx.zf.read(validator_src).decode()
        if 'value.lower() == "auto"' not in vsrc or "AttentionBackendEnum[value.upper()]" not in vsrc:
            raise SystemExit("AttentionConfig backend validator changed")

        backends: dict[str, Any] = {}
        for n, path in names:
            info: dict[str, Any] = {}
            if path:
                mod, _, clsname = path.rpartition(".")
                info = self.backend_info(mod, clsname)
            info["source"] = idx.source_of(path.rpartition(".")[0]) if path and idx.module_path(path.rpartition(".")[0]) else idx.source_of(reg_mod)
            backends[n] = info
        rules["attention_backends"] = {
            "source": idx.source_of(reg_mod),
            "validator_source": validator_src,
            "case_insensitive": True,
            "auto_values": ["auto"],
            "names": sorted(backends),
            "backends": {k: v for k, v in backends.items() if v.get("mla")},
            "block_size_rule": "block_size % base == 0 for some base in block_size_bases "
            "(AttentionBackend.supports_block_size; empty list = any)",
            "block_size_rule_source": idx.source_of("vllm.v1.attention.backend"),
        }
        rules["attention_backend_auto_priority_mla"] = self.auto_priority()

        # KV cache dtypes
        cache_mod = "vllm.config.cache"
        cd = evaluate(idx, ast.Name(id="CacheDType"), cache_mod)
        src = idx.zf.read(idx.source_of(cache_mod)).decode()
        if "Invalid kv_cache_dtype" not in src:
            raise SystemExit("kv_cache_dtype validator changed")
        rules["kv_cache_dtype"] = {
            "source": idx.source_of(cache_mod),
            "valid": list(cd.values),
            "message": "Invalid kv_cache_dtype: {value!r}. Valid values are: [...]",
        }

        # block size > 0
        cache_cls, _ = idx.find_class(cache_mod, "CacheConfig")
        bs = dataclass_fields(idx, self.ta, cache_cls, cache_mod)["block_size"]
        rules["block_size"] = {"source": idx.source_of(cache_mod), "bounds": bs["bounds"]}

        # tp % dcp
        par_mod = "vllm.config.parallel"
        psrc = idx.zf.read(idx.source_of(par_mod)).decode()
        if "must be divisible by dcp_size" not in psrc or "tp % dcp != 0" not in psrc:
            raise SystemExit("tp/dcp check changed")
        rules["tp_divisible_by_dcp"] = {
            "source": idx.source_of(par_mod),
            "when": "prefill_context_parallel_size == 1",
            "otherwise": "dcp in (1, pcp, tp*pcp)",
            "message": "tp_size={tp} must be divisible by dcp_size={dcp}.",
        }

        # serve: headless + api-server-count, DP LB modes
        serve_mod = "vllm.entrypoints.cli.serve"
        ssrc = idx.zf.read(idx.source_of(serve_mod)).decode()
        if "cannot be " not in ssrc or "used with --headless" not in ssrc:
            raise SystemExit("headless check changed")
        if "Cannot use more than one data parallel load balancing mode" not in ssrc:
            raise SystemExit("DP LB check changed")
        rules["headless_api_server_count"] = {
            "source": idx.source_of(serve_mod),
            "rule": "--headless with --api-server-count > 0 is rejected",
        }
        rules["dp_lb_modes"] = {
            "source": idx.source_of(serve_mod),
            "modes": {
                "multi_port": ["--data-parallel-multi-port-external-lb"],
                "external": ["--data-parallel-external-lb", "--data-parallel-rank"],
                "hybrid": ["--data-parallel-hybrid-lb", "--data-parallel-start-rank (only when neither hybrid nor multi-port flag is given)"],
            },
            "rule": "at most one mode",
        }

        # cudagraph sizes
        vllm_mod = "vllm.config.vllm"
        vsrc2 = idx.zf.read(idx.source_of(vllm_mod)).decode()
        if "should be consistent with the max value of" not in vsrc2:
            raise SystemExit("cudagraph consistency check changed")
        rules["cudagraph_capture_sizes_consistency"] = {
            "source": idx.source_of(vllm_mod),
            "rule": "if both --max-cudagraph-capture-size and --cudagraph-capture-sizes are "
            "given (and CUDA graphs are on), max_cudagraph_capture_size must equal the "
            "largest capture size (sizes above max_num_batched_tokens are dropped first)",
        }

        # scheduler
        sched_mod = "vllm.config.scheduler"
        schsrc = idx.zf.read(idx.source_of(sched_mod)).decode()
        if "self.max_num_batched_tokens < max_model_len" not in schsrc or "not self.enable_chunked_prefill" not in schsrc:
            raise SystemExit("scheduler check changed")
        rules["scheduler"] = {
            "source": idx.source_of(sched_mod),
            "rules": [
                "chunked prefill disabled and max_num_batched_tokens < max_model_len -> error",
                "max_num_batched_tokens < max_num_seqs -> error",
                "max_num_active_seqs > max_num_seqs -> error",
            ],
        }
        model_mod = "vllm.config.model"
        msrc = idx.zf.read(idx.source_of(model_mod)).decode()
        if "than the derived max_model_len" not in msrc or "VLLM_ALLOW_LONG_MAX_MODEL_LEN" not in msrc:
            raise SystemExit("max_model_len check changed")
        rules["max_model_len"] = {
            "source": idx.source_of(model_mod),
            "rule": "max_model_len (not -1/auto) greater than the model's derived max is rejected "
            "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
        }
        # data-parallel launch checks in EngineArgs.create_engine_config
        ausrc = idx.zf.read(idx.source_of(self.ARG_UTILS)).decode()
        for needle in (
            "data_parallel_hybrid_lb is not applicable in headless mode",
            "requires \"\n                \"`--data-parallel-backend mp`",
            "must evenly divide the total",
            "`--node-rank` must \"",
            "`--data-parallel-external-lb` requires a data-parallel",
            "rank requires `--data-parallel-size-local",
            "`--data-parallel-hybrid-lb` requires",
        ):
            if needle not in ausrc:
                raise SystemExit(f"EngineArgs DP launch checks changed: {needle!r}")
        rules["dp_launch"] = {
            "source": idx.source_of(self.ARG_UTILS),
            "rules": [
                "--headless with --data-parallel-hybrid-lb -> error",
                "--nnodes > 1 requires --data-parallel-backend mp",
                "--nnodes > 1: nnodes must divide dp*pp*tp*pcp; 0 <= node_rank < nnodes",
                "external LB (--data-parallel-external-lb / --data-parallel-rank) needs a rank "
                "(given, or inferred when nnodes > 1 and dp > 1 and nnodes % dp == 0) and "
                "--data-parallel-size-local 1 or unset",
                "--data-parallel-hybrid-lb without external LB requires --data-parallel-size-local",
            ],
        }
        if "is larger than the number of " not in psrc or "self.nnodes > 1" not in psrc:
            raise SystemExit("world size vs GPU count check changed")
        rules["world_size_vs_gpus"] = {
            "source": idx.source_of(par_mod),
            "rule": "with no --distributed-executor-backend and --nnodes 1, a world size "
            "tp*pp*pcp (per DP rank) larger than the GPUs on the node -> "
            "'World size (N) is larger than the number of available GPUs (M) in this node'",
        }
        # default model when none is given
        mcls, _ = idx.find_class(model_mod, "ModelConfig")
        mf = dataclass_fields(idx, self.ta, mcls, model_mod)["model"]
        rules["default_model"] = {"source": idx.source_of(model_mod), "value": mf["default"]}
        return rules

    def backend_info(self, mod: str, clsname: str) -> dict:
        idx = self.idx
        if idx.module_ast(mod) is None:
            return {}
        try:
            cls, cmod = idx.find_class(mod, clsname)
        except SystemExit:
            return {}
        chain: list[tuple[ast.ClassDef, str]] = []
        c, m = cls, cmod
        for _ in range(10):
            chain.append((c, m))
            nxt = None
            for b in c.bases:
                res = idx.resolve_expr(b, m)
                if res and res[0] == "class":
                    nxt = (res[1], res[2])
                    break
            if nxt is None:
                break
            c, m = nxt

        def lookup(name: str) -> tuple[ast.AST, str] | None:
            for c, m in chain:
                for st in c.body:
                    if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == name:
                        return st, m
                    if isinstance(st, (ast.Assign, ast.AnnAssign)):
                        tgt = st.targets[0] if isinstance(st, ast.Assign) else st.target
                        if isinstance(tgt, ast.Name) and tgt.id == name:
                            return st, m
            return None

        info: dict[str, Any] = {"class": f"{mod}.{clsname}"}
        is_mla = any(c.name == "MLACommonBackend" for c, _ in chain[1:])
        f = lookup("is_mla")
        if f is not None and isinstance(f[0], ast.FunctionDef):
            ret = [n for n in ast.walk(f[0]) if isinstance(n, ast.Return)]
            if ret and isinstance(ret[0].value, ast.Constant):
                is_mla = bool(ret[0].value.value)
        info["mla"] = is_mla
        f = lookup("is_sparse")
        sparse = False
        if f is not None and isinstance(f[0], ast.FunctionDef):
            ret = [n for n in ast.walk(f[0]) if isinstance(n, ast.Return)]
            if ret and isinstance(ret[0].value, ast.Constant):
                sparse = bool(ret[0].value.value)
        info["sparse"] = sparse
        # kv cache dtypes
        f = lookup("supported_kv_cache_dtypes")
        if f is not None:
            v = try_eval(idx, f[0].value, f[1])
            info["kv_cache_dtypes"] = list(v) if isinstance(v, (list, tuple)) else None
        # kernel block sizes
        f = lookup("get_supported_kernel_block_sizes")
        if f is not None:
            bases = []
            ret = [n for n in ast.walk(f[0]) if isinstance(n, ast.Return)]
            if ret and isinstance(ret[0].value, ast.List):
                for e in ret[0].value.elts:
                    if isinstance(e, ast.Constant):
                        bases.append(e.value)
                    elif isinstance(e, ast.Call) and dotted(e.func) == "MultipleOf":
                        bases.append(e.args[0].value)
                info["block_size_bases"] = bases
        f = lookup("supports_block_size")
        if f is not None and f[1] == cmod and any(st is f[0] for st in cls.body):
            for n in ast.walk(f[0]):
                if isinstance(n, ast.Compare) and isinstance(n.left, ast.BinOp) and isinstance(n.left.op, ast.Mod):
                    info["block_size_bases"] = [n.left.right.value]
        # compute capability
        f = lookup("supports_compute_capability")
        if f is not None:
            info["compute_capability_majors"] = self._cc_majors(f[0])
        # supports_combination: device family helpers (e.g. FlashMLA dense: Hopper only)
        f = lookup("supports_combination")
        if f is not None and isinstance(f[0], ast.FunctionDef):
            fam = self._combination_families(f[0], f[1], sparse)
            if fam is not None:
                info["device_family_majors"], info["device_family_source"], info["device_family_message"] = fam
        return info

    @staticmethod
    def _cc_majors(fn: ast.FunctionDef) -> Any:
        rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
        if len(rets) != 1:
            return "unknown"
        v = rets[0].value
        if isinstance(v, ast.Constant) and v.value is True:
            return "any"
        if isinstance(v, ast.Compare) and dotted(v.left).endswith(".major"):
            op, rhs = v.ops[0], v.comparators[0]
            if isinstance(op, ast.Eq) and isinstance(rhs, ast.Constant):
                return [rhs.value]
            if isinstance(op, ast.In) and isinstance(rhs, (ast.List, ast.Tuple)):
                return [e.value for e in rhs.elts]
            if isinstance(op, ast.GtE) and isinstance(rhs, ast.Constant):
                return {"min": rhs.value}
        return "unknown"

    def _combination_families(self, fn: ast.FunctionDef, mod: str, sparse: bool) -> tuple[list[int], str, str | None] | None:
        """Follow `if use_sparse: ... else: return helper()[1]` into the helper
        and collect its is_device_capability_family(N) tests."""
        for n in ast.walk(fn):
            if not (isinstance(n, ast.If) and dotted(n.test) == "use_sparse"):
                continue
            branch = n.body if sparse else n.orelse
            imports: dict[str, str] = {}
            helper = None
            for st in branch:
                for c in ast.walk(st):
                    if isinstance(c, ast.ImportFrom) and c.module:
                        for a in c.names:
                            imports[a.asname or a.name] = c.module
                    if helper is None and isinstance(c, ast.Call) and isinstance(c.func, ast.Name):
                        helper = c.func.id
            if helper and helper in imports:
                hmod = imports[helper]
                hfn = self.idx.find_function(hmod, helper)
                fams = [
                    c.args[0].value // 10
                    for c in ast.walk(hfn)
                    if isinstance(c, ast.Call) and dotted(c.func).endswith("is_device_capability_family")
                ]
                msgs = [
                    c.value
                    for r in ast.walk(hfn) if isinstance(r, ast.Return)
                    for c in ast.walk(r)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str) and "only supported" in c.value
                ]
                if fams:
                    return fams, self.idx.source_of(hmod), (msgs[0] if msgs else None)
        return None

    def auto_priority(self) -> dict:
        mod = "vllm.platforms.cuda"
        fn = self.idx.find_function(mod, "_get_backend_priorities")
        out: dict[str, Any] = {"source": self.idx.source_of(mod)}
        use_mla = next(n for n in fn.body if isinstance(n, ast.If) and dotted(n.test) == "use_mla")

        def names_in_return(stmts: list[ast.stmt]) -> list[str]:
            for st in stmts:
                if isinstance(st, ast.Return) and isinstance(st.value, ast.List):
                    return [e.attr for e in st.value.elts if isinstance(e, ast.Attribute)]
            return []

        node: ast.If | None = use_mla.body[0] if isinstance(use_mla.body[0], ast.If) else None
        while node is not None:
            test = node.test
            if isinstance(test, ast.Compare) and dotted(test.left) == "device_capability.major":
                out[f"sm{test.comparators[0].value}x"] = names_in_return(node.body)
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                node = node.orelse[0]
            else:
                out["other"] = names_in_return(node.orelse)
                node = None
        return out


# ---------------------------------------------------------------------------
# SGLang
# ---------------------------------------------------------------------------


class SglangExtractor:
    SERVER_ARGS = "sglang.srt.server_args"
    ARG_UTILS = "sglang.srt.arg_groups.arg_utils"

    def __init__(self, idx: SourceIndex):
        self.idx = idx
        self.flags: list[Flag] = []

    def _namespaces(self) -> list[tuple[ast.ClassDef, str]]:
        tree = self.idx.require_ast(self.SERVER_ARGS)
        for st in tree.body:
            if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and st.targets[0].id == "_INPUT_NAMESPACES":
                return [self.idx.find_class(self.SERVER_ARGS, e.id) for e in st.value.elts]
        raise SystemExit("_INPUT_NAMESPACES not found")

    def _check_mirror(self) -> None:
        """Make sure add_cli_args_from_dataclass still has the structure this
        extractor mirrors."""
        src = self.idx.zf.read(self.idx.source_of(self.ARG_UTILS)).decode()
        for needle in (
            "if arg_meta.no_cli:",
            'nargs = arg_meta.nargs or "+"',
            'kwargs = dict(action="store_true"',
            "choices = arg_meta.choices or literal_vals",
            "if origin is list and arg_meta.type_parser is None:",
        ):
            if needle not in src:
                raise SystemExit(f"add_cli_args_from_dataclass changed: {needle!r} missing")

    def _type_parser(self, node: ast.AST | None) -> str | None:
        if node is None:
            return None
        name = dotted(node).split(".")[-1]
        return {
            "loads": "json",
            "json_list_type": "json",
            "human_readable_int": "si_iec_int",
            "nullable_str": "str",
            "parse_cuda_graph_backend_arg": "str",
            "parse_cuda_graph_config_arg": "json",
        }.get(name, "str")

    def _unwrap(self, node: ast.AST) -> tuple[ast.AST, bool]:
        """Optional[X] / X | None -> (X, True) when exactly one non-None arm."""
        if isinstance(node, ast.Subscript) and dotted(node.value) in ("Optional", "typing.Optional"):
            return node.slice, True
        if isinstance(node, ast.Subscript) and dotted(node.value) in ("Union", "typing.Union"):
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            non_none = [e for e in elts if not (isinstance(e, ast.Constant) and e.value is None)]
            if len(non_none) == 1:
                return non_none[0], True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            arms = [node.left, node.right]
            non_none = [e for e in arms if not (isinstance(e, ast.Constant) and e.value is None)]
            if len(non_none) == 1:
                return non_none[0], True
        return node, False

    def _scalar(self, node: ast.AST) -> str:
        n = dotted(node)
        return {"int": "int", "float": "float", "str": "str"}.get(n, "str")

    def field_flag(self, st: ast.AnnAssign, mod: str, cls: ast.ClassDef) -> Flag | None:
        ann = st.annotation
        if not (isinstance(ann, ast.Subscript) and dotted(ann.value) in ("A", "Annotated")):
            return None
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        raw_type, metas = elts[0], elts[1:]
        meta: dict[str, ast.AST] | None = None
        for m in metas:
            if isinstance(m, ast.Constant) and isinstance(m.value, str):
                meta = {}
                break
            if isinstance(m, (ast.Constant, ast.JoinedStr, ast.BinOp)) and not isinstance(m, ast.Call):
                # help text built from an f-string / concatenation
                meta = {}
                break
            if isinstance(m, ast.Call) and dotted(m.func) == "Arg":
                meta = {k.arg: k.value for k in m.keywords}
                break
            if isinstance(m, ast.Call):
                continue  # NS(...) / Derived(...)
        if meta is None:
            return None
        if "no_cli" in meta and try_eval(self.idx, meta["no_cli"], mod) is True:
            return None
        name = st.target.id
        cli = try_eval(self.idx, meta["cli_name"], mod) if "cli_name" in meta else "--" + name.replace("_", "-")
        aliases = try_eval(self.idx, meta["aliases"], mod) if "aliases" in meta else []
        opts = [cli] + list(aliases or [])
        src = self.idx.source_of(mod)
        fl = Flag(option_strings=opts, dest=name, source=src, origin=f"{cls.name}.{name}")
        has_default = st.value is not None
        if has_default:
            d = try_eval(self.idx, st.value, mod)
            fl.default = jsonable(d) if d is not Unresolved else None

        def choices_of(node: ast.AST) -> Any:
            v = try_eval(self.idx, node, mod)
            if v is Unresolved:
                raise SystemExit(f"cannot evaluate choices {dotted(node)} for {name}")
            return jsonable(v)

        tparser = self._type_parser(meta.get("type_parser"))
        if "action" in meta:
            action = dotted(meta["action"]).split(".")[-1]
            fl.action = action
            akw = {}
            if "action_kwargs" in meta and isinstance(meta["action_kwargs"], ast.Dict):
                for k, v in zip(meta["action_kwargs"].keys, meta["action_kwargs"].values):
                    if isinstance(k, ast.Constant) and k.value == "nargs":
                        akw["nargs"] = try_eval(self.idx, v, mod)
            if action == "BooleanOptionalAction":
                fl.kind = "flag"
                fl.option_strings, fl.negated = boolean_optional_strings(opts, enable_disable=False)
            elif action in ("store_true", "store_false"):
                fl.kind = "flag"
            else:
                nargs = akw.get("nargs") if isinstance(akw, dict) else None
                fl.nargs = nargs
                fl.type = "str"
            return fl
        inner, _opt = self._unwrap(raw_type)
        if isinstance(inner, ast.Subscript) and dotted(inner.value) in ("Literal", "typing.Literal"):
            lit = try_eval(self.idx, inner, mod)
            vals = list(lit.values) if isinstance(lit, LiteralType) else []
            fl.choices = choices_of(meta["choices"]) if "choices" in meta else jsonable(vals)
            first = vals[0] if vals else ""
            fl.type = tparser or {int: "int", float: "float", str: "str"}.get(type(first), "str")
            return fl
        if isinstance(inner, ast.Subscript) and dotted(inner.value) in ("List", "list", "typing.List") and tparser is None:
            fl.type = self._scalar(inner.slice)
            fl.nargs = try_eval(self.idx, meta["nargs"], mod) if "nargs" in meta else "+"
            if "choices" in meta:
                fl.choices = choices_of(meta["choices"])
            return fl
        if dotted(inner) == "bool":
            fl.kind = "flag"
            fl.action = "store_true"
            return fl
        fl.type = tparser or self._scalar(inner)
        if "choices" in meta:
            fl.choices = choices_of(meta["choices"])
        if "nargs" in meta:
            fl.nargs = try_eval(self.idx, meta["nargs"], mod)
            if fl.nargs == "?":
                fl.kind = "optional_value"
        req = try_eval(self.idx, meta["required"], mod) if "required" in meta else None
        if req is True or (req is None and not has_default):
            fl.required = True
        return fl

    def explicit_flags(self) -> None:
        cls, mod = self.idx.find_class(self.SERVER_ARGS, "ServerArgs")
        fn = method_of(cls, "add_cli_args")
        src = self.idx.source_of(mod)
        local: dict[str, Any] = {}
        for st in fn.body:
            if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
                v = self._eval_local(st.value, mod, local)
                local[st.targets[0].id] = v
                continue
            if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call)):
                continue
            call = st.value
            if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
                continue
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
                if "type" in kws:
                    fl.type = self._type_parser(kws["type"]) if dotted(kws["type"]) not in ("int", "float", "str") else dotted(kws["type"])
                if "choices" in kws:
                    v = self._eval_local(kws["choices"], mod, local)
                    if v is Unresolved:
                        fl.note = "choices are computed at runtime; not checked"
                    else:
                        fl.choices = jsonable(v)
            self.flags.append(fl)

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

    def extract(self) -> None:
        self._check_mirror()
        cls, _ = self.idx.find_class(self.SERVER_ARGS, "ServerArgs")
        body = method_of(cls, "add_cli_args").body
        if not any(isinstance(s, ast.Expr) and "add_cli_args_from_dataclass" in dotted(s.value) for s in body):
            raise SystemExit("ServerArgs.add_cli_args no longer derives flags from the dataclass")
        for ncls, nmod in self._namespaces():
            for st in ncls.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    fl = self.field_flag(st, nmod, ncls)
                    if fl is not None:
                        self.flags.append(fl)
        self.explicit_flags()

    def rules(self) -> dict:
        idx = self.idx
        rules: dict[str, Any] = {}
        ch_mod = "sglang.srt.arg_groups.choices"
        abc = evaluate(idx, ast.Name(id="ATTENTION_BACKEND_CHOICES"), ch_mod)
        rules["attention_backend_choices"] = {"source": idx.source_of(ch_mod), "values": abc}

        # Blackwell helpers in sglang/srt/utils/common.py
        common = "sglang.srt.utils.common"
        ctree = idx.require_ast(common)
        majors: dict[str, list[int]] = {}
        for st in ctree.body:
            if isinstance(st, ast.Assign):
                for c in ast.walk(st.value):
                    if isinstance(c, ast.Call) and dotted(c.func) == "partial":
                        for kw in c.keywords:
                            if kw.arg == "device_capability_majors":
                                for t in st.targets:
                                    majors[t.id] = evaluate(idx, kw.value, common)
        rt_mod = "sglang.srt.runtime_context"
        rtsrc = idx.zf.read(idx.source_of(rt_mod)).decode()
        props = dict(re.findall(r'"(is_[a-z0-9_]+)":\s*"([a-z0-9_]+)"', rtsrc))
        blackwell = majors[props["is_blackwell"]]
        sm100 = majors[props["is_sm100"]]

        ov_mod = "sglang.srt.arg_groups.overrides"
        ovtree = idx.require_ast(ov_mod)
        ovsrc = idx.zf.read(idx.source_of(ov_mod)).decode()

        def fn_src(name: str) -> ast.FunctionDef:
            for st in ovtree.body:
                if isinstance(st, ast.FunctionDef) and st.name == name:
                    return st
            raise SystemExit(f"{name} not found in overrides.py")

        def list_after(fn: ast.FunctionDef, attr: str) -> list:
            """Lists compared with `view.<attr> not in [...]`."""
            out = []
            for n in ast.walk(fn):
                if isinstance(n, ast.Compare) and dotted(n.left) == f"view.{attr}" and isinstance(n.ops[0], ast.NotIn):
                    out.append(evaluate(idx, n.comparators[0], ov_mod))
            return out

        kvfn = fn_src("_mla_kv_cache_dtype_checks")
        if "get_platform().is_blackwell" not in ast.unparse(kvfn):
            raise SystemExit("trtllm_mla Blackwell check changed")
        cutefn = fn_src("_cutedsl_prefill_backend_fill")
        if "get_platform().is_sm100" not in ast.unparse(cutefn):
            raise SystemExit("cutedsl_mla SM100 check changed")
        pagefn = fn_src("_mla_backend_page_constraints")
        page_lists = []
        for n in ast.walk(pagefn):
            if isinstance(n, ast.Compare) and dotted(n.left) == "page_size" and isinstance(n.ops[0], ast.NotIn):
                page_lists.append(evaluate(idx, n.comparators[0], ov_mod))
        if "FlashMLA only supports a page_size of 64" not in ovsrc:
            raise SystemExit("flashmla page size rule changed")
        src_ov = idx.source_of(ov_mod)
        rules["mla_backends"] = {
            "source": src_ov + " (fa3: see its own source)",
            "trtllm_mla": {
                "source": src_ov,
                "applies_to": ["--attention-backend", "--decode-attention-backend"],
                "compute_capability_majors": blackwell,
                "kv_cache_dtypes": list_after(kvfn, "kv_cache_dtype")[0],
                "page_sizes": page_lists[0],
                "page_size_otherwise": 64,
                "page_size_severity": "override",
                "message": "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x).",
            },
            "cutedsl_mla": {
                "source": src_ov,
                "applies_to": ["--attention-backend", "--decode-attention-backend", "--prefill-attention-backend"],
                "decode_only": True,
                "compute_capability_majors": sm100,
                "kv_cache_dtypes": list_after(cutefn, "kv_cache_dtype")[0],
                "page_sizes": page_lists[1],
                "page_size_otherwise": 64,
                "page_size_severity": "override",
                "message": "CuteDSL MLA backend is only supported on Blackwell GPUs (SM100).",
            },
            "flashmla": {
                "source": src_ov,
                "applies_to": ["--attention-backend", "--decode-attention-backend"],
                "page_sizes": [64],
                "page_size_otherwise": 64,
                "page_size_severity": "override",
            },
        }
        rules["platform_majors"] = {
            "source": idx.source_of(common),
            "is_blackwell": blackwell,
            "is_sm100": sm100,
        }
        # fa3 with MLA: SM90 only (runtime assertion when the backend is built)
        reg_mod = "sglang.srt.layers.attention.attention_registry"
        rfn = idx.find_function(reg_mod, "create_flashattention_v3_backend")
        fa3_src = ast.unparse(rfn)
        if "major == 9" not in fa3_src or "not runner.use_mla_backend" not in fa3_src:
            raise SystemExit("fa3 capability assertion changed")
        rules["mla_backends"]["fa3"] = {
            "source": idx.source_of(reg_mod),
            "applies_to": ["--attention-backend", "--decode-attention-backend", "--prefill-attention-backend"],
            "compute_capability_majors": [9],
            "message": "FlashAttention v3 Backend requires SM>=80 and SM<=90 (SM90 for MLA models).",
        }
        # deprecated aliases
        sv_mod = "sglang.srt.arg_groups.serving_hook"
        svtree = idx.require_ast(sv_mod)
        aliases = None
        for n in ast.walk(svtree):
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "aliases":
                aliases = evaluate(idx, n.value, sv_mod)
        if not aliases or "tokenspeed_mla" not in aliases:
            raise SystemExit("backend alias table changed")
        rules["attention_backend_aliases"] = {
            "source": idx.source_of(sv_mod),
            "aliases": aliases,
            "tokenspeed_mla_forces_kv_cache_dtype": "fp8_e4m3",
        }
        # parallelism
        ph_mod = "sglang.srt.arg_groups.parallel_hook"
        phsrc = idx.zf.read(idx.source_of(ph_mod)).decode()
        for needle in (
            "data-parallel replicas combined with attention data parallelism",
            "assert cfg.tp_size % cfg.attn_dp_size == 0",
            "attn_dp_size=cfg.dp_size",
        ):
            if needle not in phsrc:
                raise SystemExit(f"parallel_hook changed: {needle}")
        rules["parallel"] = {
            "source": idx.source_of(ph_mod),
            "rules": [
                "--enable-dp-attention with attn_dp_size == 1: attn_dp_size := dp_size, dp_size := 1",
                "attn_dp_size < 1 -> error",
                "attn_dp_size > 1 and dp_size > 1 -> error (data-parallel replicas combined with attention data parallelism are not supported)",
                "attn_dp_size > 1 -> assert tp_size % attn_dp_size == 0",
                "attn_cp_size > 1 -> assert tp_size % attn_cp_size == 0 and tp_size % (attn_dp_size * attn_cp_size) == 0",
            ],
        }
        return rules


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def wheel_version(idx: SourceIndex, dist: str) -> str:
    for n in idx.names:
        if n.endswith(".dist-info/METADATA") and n.lower().startswith(dist):
            for line in idx.zf.read(n).decode().splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    raise SystemExit(f"no METADATA for {dist}")


def flags_to_json(flags: list[Flag]) -> dict:
    out: dict[str, Any] = {}
    for fl in flags:
        key = fl.option_strings[0]
        if key in out:
            raise SystemExit(f"duplicate flag {key}")
        d = fl.to_json()
        aliases = [o for o in fl.option_strings[1:] if o not in fl.negated]
        if aliases:
            d["aliases"] = aliases
        else:
            d.pop("aliases")
        if d.get("nargs", "x") is None:
            d.pop("nargs")
        if d["dest"] == key.lstrip("-").replace("-", "_"):
            d.pop("dest")
        out[key] = d
    # no option string may be registered twice
    seen: dict[str, str] = {}
    for key, d in out.items():
        for o in [key, *d.get("aliases", []), *d.get("negated", [])]:
            if o in seen:
                raise SystemExit(f"option string {o} registered by {seen[o]} and {key}")
            seen[o] = key
    return out


def build_vllm(wheel: Path) -> dict:
    idx = SourceIndex(wheel)
    ex = VllmExtractor(idx)
    ex.extract()
    flags = flags_to_json(ex.flags)
    return {
        "engine": "vllm",
        "version": wheel_version(idx, "vllm"),
        "wheel": wheel.name,
        "wheel_sha256": sha256_of(wheel),
        "program": "vllm serve",
        "parser": {
            "class": "FlexibleArgumentParser (argparse.ArgumentParser subclass)",
            "source": idx.source_of("vllm.utils.argparse_utils"),
            "allow_abbrev": "allow_abbrev=False" not in idx.zf.read(idx.source_of("vllm.utils.argparse_utils")).decode(),
            "underscore_to_dash": True,
            "dotted_json_args": True,
            "O_shorthand": "-O<n> / -O=<n> / -O <0-3> -> --optimization-level <n>",
            "model_option_moved_to_positional": True,
        },
        "positionals": ex.positionals,
        "flags": flags,
        "rules": ex.rules(),
    }


def build_sglang(wheel: Path) -> dict:
    idx = SourceIndex(wheel)
    ex = SglangExtractor(idx)
    ex.extract()
    flags = flags_to_json(ex.flags)
    ssrc = idx.zf.read(idx.source_of(SglangExtractor.SERVER_ARGS)).decode()
    m = re.search(r"parser = argparse\.ArgumentParser\(([^)]*)\)", ssrc)
    if not m:
        raise SystemExit("prepare_server_args parser construction changed")
    return {
        "engine": "sglang",
        "version": wheel_version(idx, "sglang"),
        "wheel": wheel.name,
        "wheel_sha256": sha256_of(wheel),
        "program": "python -m sglang.launch_server",
        "parser": {
            "class": "argparse.ArgumentParser(" + m.group(1) + ")",
            "source": idx.source_of(SglangExtractor.SERVER_ARGS),
            "allow_abbrev": "allow_abbrev" not in m.group(1),
        },
        "positionals": [],
        "flags": flags,
        "rules": ex.rules(),
    }


def write_json(obj: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, sort_keys=True, indent=1, ensure_ascii=False)
        f.write("\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-wheel", type=Path)
    ap.add_argument("--sglang-wheel", type=Path)
    ap.add_argument("--out-dir", type=Path, default=Path("tests/fixtures/engines"))
    args = ap.parse_args(argv)
    if not args.vllm_wheel and not args.sglang_wheel:
        ap.error("give --vllm-wheel and/or --sglang-wheel")
    if args.vllm_wheel:
        obj = build_vllm(args.vllm_wheel)
        out = args.out_dir / f"vllm-{obj['version']}.json"
        write_json(obj, out)
        print(f"{out}: {len(obj['flags'])} flags")
    if args.sglang_wheel:
        obj = build_sglang(args.sglang_wheel)
        out = args.out_dir / f"sglang-{obj['version']}.json"
        write_json(obj, out)
        print(f"{out}: {len(obj['flags'])} flags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
