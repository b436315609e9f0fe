"""Annotations of vLLM config dataclass fields, reduced to flat "type atoms".

This mirrors what vLLM's ``get_type_hints()`` (``vllm/engine/arg_utils.py``)
sees: ``Optional``/``Union``/``|`` are flattened, ``Annotated`` is unwrapped,
type aliases and ``NewType`` are followed through imports.  The atoms are::

    ('none',) ('bool',) ('int',) ('float',) ('str',) ('dict',) ('classvar',)
    ('literal', values) ('list'|'set', [atoms]) ('tuple', [[atoms]...], has_ellipsis)
    ('dataclass', name) ('other', name)
"""

from __future__ import annotations

import ast

from .evaluate import LiteralType, dotted, try_eval
from .symbols import SourceIndex

BUILTIN_ATOMS = {
    "bool": ("bool",), "int": ("int",), "float": ("float",), "str": ("str",),
    "dict": ("dict",), "Dict": ("dict",), "Mapping": ("dict",), "MutableMapping": ("dict",),
}
DATACLASS_DECORATORS = {"config", "dataclass"}
MAX_DEPTH = 30
MAX_BASE_DEPTH = 5


def _name_of(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else (node.attr if isinstance(node, ast.Attribute) else "")


def _is_ellipsis(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def atoms_contain(atoms: list[tuple], kind: str) -> bool:
    return any(a[0] == kind for a in atoms)


class TypeAnalyzer:
    def __init__(self, idx: SourceIndex):
        self.idx = idx

    def is_dataclass(self, cls: ast.ClassDef) -> bool:
        for dec in cls.decorator_list:
            d = dec.func if isinstance(dec, ast.Call) else dec
            if _name_of(d) in DATACLASS_DECORATORS:
                return True
        return False

    def class_kind(self, cls: ast.ClassDef, modname: str, depth: int = 0) -> tuple:
        if self.is_dataclass(cls):
            return ("dataclass", cls.name)
        for b in cls.bases:
            if isinstance(b, ast.Subscript):  # e.g. class X(dict[str, Y])
                b = b.value
            bn = _name_of(b)
            if bn in ("dict", "Dict"):
                return ("dict",)
            if bn == "TypedDict":
                return ("other", cls.name)
            if depth < MAX_BASE_DEPTH:
                res = self.idx.resolve_expr(b, modname)
                if res and res[0] == "class":
                    k = self.class_kind(res[1], res[2], depth + 1)
                    if k[0] == "dict":
                        return k
        return ("other", cls.name)

    def analyze(self, node: ast.AST, modname: str, depth: int = 0) -> list[tuple]:
        """Flattened set of type atoms (mirrors vLLM's get_type_hints())."""
        if depth > MAX_DEPTH:
            return [("other", "?")]
        if isinstance(node, ast.Constant):
            if node.value is None:
                return [("none",)]
            if isinstance(node.value, str):  # forward reference
                return self.analyze(ast.parse(node.value, mode="eval").body, modname, depth + 1)
            return [("other", repr(node.value))]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.analyze(node.left, modname, depth + 1) + self.analyze(node.right, modname, depth + 1)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, modname, depth)
        if isinstance(node, ast.Name):
            return self._name(node, modname, depth)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in ("typing", "t") and node.attr == "Any":
                return [("other", "Any")]
            res = self.idx.resolve_expr(node, modname)
            return self._from_resolved(res, dotted(node), depth)
        return [("other", type(node).__name__)]

    def _subscript(self, node: ast.Subscript, modname: str, depth: int) -> list[tuple]:

        def rec(n: ast.AST) -> list[tuple]:
            return self.analyze(n, modname, depth + 1)

        bname = _name_of(node.value)
        sl = node.slice
        elts = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
        if bname == "Optional":
            return rec(elts[0]) + [("none",)]
        if bname == "Union":
            return [a for e in elts for a in rec(e)]
        if bname == "Annotated":
            return rec(elts[0])
        if bname == "Literal":
            v = try_eval(self.idx, node, modname)
            if isinstance(v, LiteralType):
                return [("literal", v.values)]
            return [("other", "Literal?")]
        container = self._container(bname, elts, rec)
        if container is not None:
            return container
        # Generic alias of a user class, e.g. Foo[int]
        return rec(node.value)

    @staticmethod
    def _container(bname: str, elts: list[ast.expr], rec) -> list[tuple] | None:
        if bname in ("list", "List", "Sequence"):
            return [("list", rec(elts[0]))]
        if bname in ("set", "Set", "frozenset"):
            return [("set", rec(elts[0]))]
        if bname in ("tuple", "Tuple"):
            ell = any(_is_ellipsis(e) for e in elts)
            return [("tuple", [rec(e) for e in elts if not _is_ellipsis(e)], ell)]
        if bname in ("dict", "Dict", "Mapping", "MutableMapping"):
            return [("dict",)]
        if bname in ("ClassVar", "InitVar"):
            return [("classvar",)]
        if bname in ("type", "Type", "Callable"):
            return [("other", bname)]
        return None

    def _name(self, node: ast.Name, modname: str, depth: int) -> list[tuple]:
        if node.id in BUILTIN_ATOMS:
            return [BUILTIN_ATOMS[node.id]]
        if node.id == "None":
            return [("none",)]
        if node.id in ("Any",):
            return [("other", "Any")]
        res = self.idx.resolve(modname, node.id)
        return self._from_resolved(res, node.id, depth)

    def _from_resolved(self, res: tuple | None, label: str, depth: int) -> list[tuple]:
        if res is None:
            return [("other", label)]
        if res[0] == "class":
            return [self.class_kind(res[1], res[2])]
        if res[0] == "assign":
            return self._alias(res[1], res[2], label, depth)
        if res[0] == "external":
            mod, name = res[1], res[2]
            if mod in ("typing", "typing_extensions") and name in BUILTIN_ATOMS:
                return [BUILTIN_ATOMS[name]]
            return [("other", f"{mod}.{name}")]
        return [("other", label)]

    def _alias(self, val: ast.AST, modname: str, label: str, depth: int) -> list[tuple]:
        """Type aliases: X = Literal[...] / X = A | B / X = SomeClass / X = str."""
        if isinstance(val, ast.Call):
            fname = _name_of(val.func)
            if fname == "NewType" and len(val.args) == 2:
                return self.analyze(val.args[1], modname, depth + 1)
            return [("other", label)]  # TypeVar(...) and other calls
        return self.analyze(val, modname, depth + 1)
