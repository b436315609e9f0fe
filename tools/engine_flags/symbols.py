"""Module-level names of a wheel's modules, and following imports to definitions.

A symbol is one of::

    ('assign', value_node, module)            X = ... / X: T = ...
    ('assign', value_node, module, classdef)  class attribute (via resolve_expr)
    ('class', classdef, module)
    ('func', functiondef, module)
    ('import', source_module, name)           from m import name [as alias]
    ('module', module)                        import m / a submodule
    ('external', module, name)                defined outside the wheel

Only what exists at runtime is indexed: of ``if TYPE_CHECKING:`` the else
branch; of other ``if``/``try`` statements every branch.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .wheel import WheelSource

MAX_IMPORT_DEPTH = 25


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _collect_definition(st: ast.stmt, modname: str, table: dict[str, tuple]) -> None:
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


def _class_member(cls: ast.ClassDef, modname: str, attr: str) -> tuple | None:
    """``Cls.attr`` for a class statement; assignments carry the class."""
    for st in cls.body:
        if isinstance(st, ast.Assign):
            for tgt in st.targets:
                if isinstance(tgt, ast.Name) and tgt.id == attr:
                    return ("assign", st.value, modname, cls)
        if (
            isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
            and st.target.id == attr and st.value is not None
        ):
            return ("assign", st.value, modname)
        if isinstance(st, (ast.FunctionDef, ast.ClassDef)) and st.name == attr:
            return ("func" if isinstance(st, ast.FunctionDef) else "class", st, modname)
    return None


class SourceIndex(WheelSource):
    """A wheel's modules plus their symbol tables and import following."""

    def __init__(self, wheel_path: Path):
        super().__init__(wheel_path)
        self._symbols: dict[str, dict[str, tuple]] = {}

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
        """name -> symbol (see the module docstring) for one module."""
        if modname in self._symbols:
            return self._symbols[modname]
        table: dict[str, tuple] = {}
        self._symbols[modname] = table
        tree = self.module_ast(modname)
        if tree is not None:
            self._collect(tree.body, modname, table)
        return table

    def _collect(self, stmts: list[ast.stmt], modname: str, table: dict[str, tuple]) -> None:
        for st in stmts:
            if isinstance(st, ast.If):
                if _is_type_checking(st.test):
                    # What exists at runtime is the else branch.
                    self._collect(st.orelse, modname, table)
                else:
                    self._collect(st.body, modname, table)
                    self._collect(st.orelse, modname, table)
            elif isinstance(st, ast.Try):
                self._collect(st.body, modname, table)
                for h in st.handlers:
                    self._collect(h.body, modname, table)
            elif isinstance(st, (ast.Import, ast.ImportFrom)):
                self._collect_import(st, modname, table)
            else:
                _collect_definition(st, modname, table)

    def _collect_import(self, st: ast.Import | ast.ImportFrom, modname: str, table: dict[str, tuple]) -> None:
        if isinstance(st, ast.ImportFrom):
            src = self._abs_module(modname, st.level, st.module)
            for alias in st.names:
                if alias.name != "*":
                    table[alias.asname or alias.name] = ("import", src, alias.name)
            return
        for alias in st.names:
            if alias.asname:
                table[alias.asname] = ("module", alias.name)
            else:
                top = alias.name.split(".")[0]
                table.setdefault(top, ("module", top))

    def resolve(self, modname: str, name: str, _depth: int = 0) -> tuple | None:
        """Follow imports until a definition is found."""
        if _depth > MAX_IMPORT_DEPTH:
            return None
        sym = self.symbols(modname).get(name)
        if sym is None:
            # `from pkg import submodule`
            sub = f"{modname}.{name}"
            if self.module_path(sub) is not None:
                return ("module", sub)
            return None
        if sym[0] != "import":
            return sym
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

    def resolve_expr(self, node: ast.AST, modname: str) -> tuple | None:
        """Resolve a Name / dotted Attribute to a definition."""
        if isinstance(node, ast.Name):
            return self.resolve(modname, node.id)
        if not isinstance(node, ast.Attribute):
            return None
        base = self.resolve_expr(node.value, modname)
        if base is None:
            return None
        if base[0] == "module":
            if self.module_ast(base[1]) is None:
                return ("external", base[1], node.attr)
            return self.resolve(base[1], node.attr)
        if base[0] == "class":
            return _class_member(base[1], base[2], node.attr)
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
        """The first function of that name anywhere in the module (methods included)."""
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
