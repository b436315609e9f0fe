"""vLLM's ``get_kwargs``/``_compute_kwargs`` (``vllm/engine/arg_utils.py``), mirrored.

Each field of a vLLM config dataclass becomes a set of argparse keywords:
a bool becomes ``BooleanOptionalAction`` (vLLM registers EnableDisableAction
for it); a Literal gets choices unless ``str`` is also allowed;
list/tuple/set set ``nargs``; an int is an int, or a human-readable int for
the fields that ``_compute_kwargs`` lists; a dataclass or dict is read as
JSON; pydantic ``Field(gt/ge/lt/le)`` bounds are kept as ``bounds``.
"""

from __future__ import annotations

import ast
from typing import Any

from .evaluate import Unresolved, evaluate, jsonable, try_eval
from .symbols import SourceIndex
from .type_atoms import TypeAnalyzer, atoms_contain

ARG_UTILS = "vllm.engine.arg_utils"
SCALAR_TYPES = {"int": "int", "float": "float", "str": "str", "bool": "bool"}


def _field_default(idx: SourceIndex, v: ast.AST | None, modname: str) -> tuple[Any, dict]:
    """(default or Unresolved, pydantic bounds) of a field's ``= value``."""
    default: Any = Unresolved
    bounds: dict = {}
    if isinstance(v, ast.Call):
        fn = v.func
        fname = fn.id if isinstance(fn, ast.Name) else (fn.attr if isinstance(fn, ast.Attribute) else "")
        if fname not in ("Field", "field"):
            return Unresolved, bounds
        for kw in v.keywords:
            if kw.arg == "default":
                default = try_eval(idx, kw.value, modname)
            elif kw.arg in ("gt", "ge", "lt", "le"):
                b = try_eval(idx, kw.value, modname)
                if isinstance(b, (int, float)) and not isinstance(b, bool):
                    bounds[kw.arg] = b
            elif kw.arg == "default_factory":
                default = Unresolved
    elif v is not None:
        default = try_eval(idx, v, modname)
    return default, bounds


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
        default, bounds = _field_default(idx, st.value, modname)
        out[st.target.id] = {
            "atoms": atoms,
            "annotation": ast.unparse(st.annotation),
            "default": jsonable(default) if default is not Unresolved else Unresolved,
            "has_default": st.value is not None,
            "bounds": bounds or None,
            "module": modname,
            "class": cls.name,
        }
    return out


def read_human_int_fields(idx: SourceIndex) -> tuple[set[str], set[str]]:
    """Fields that ``_compute_kwargs`` parses as human-readable ints:
    (``human_readable_int_args``, the ``name == "..."`` human_readable_int_or_auto ones)."""
    fn = idx.find_function(ARG_UTILS, "_compute_kwargs")
    human: set[str] = set()
    auto: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "human_readable_int_args" for t in node.targets
        ):
            human = set(evaluate(idx, node.value, ARG_UTILS))
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


def _literal_kwargs(atoms: list[tuple], kinds: set[str]) -> dict:
    lit = next(a for a in atoms if a[0] == "literal")
    vals = list(lit[1])
    kw: dict[str, Any] = {"type": type(vals[0]).__name__}
    if "str" not in kinds:
        kw["choices"] = sorted(vals)
    else:
        kw["metavar_values"] = sorted(vals)
    return kw


def _collection_kwargs(atoms: list[tuple]) -> dict:
    coll = next(a for a in atoms if a[0] in ("tuple", "list", "set"))
    kw: dict[str, Any] = {}
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
        kw["type"] = SCALAR_TYPES.get(elem[0][0], "str")
    return kw


class KwargsMirror:
    """``get_kwargs(Cls)[field]`` for the config dataclasses of one vLLM wheel."""

    def __init__(self, idx: SourceIndex, ta: TypeAnalyzer):
        self.idx = idx
        self.ta = ta
        self._human_int_fields, self._human_int_or_auto_fields = read_human_int_fields(idx)

    def field_kwargs(self, cls_ref: tuple[ast.ClassDef, str], fname: str) -> dict:
        cls, mod = cls_ref
        fields_ = dataclass_fields(self.idx, self.ta, cls, mod)
        if fname not in fields_:
            raise SystemExit(f"field {cls.name}.{fname} not found")
        f = fields_[fname]
        atoms = [a if a[0] != "dict" else ("dict",) for a in f["atoms"]]
        kinds = {a[0] for a in atoms}
        kw: dict[str, Any] = {"origin": f"{cls.name}.{fname}", "default": f["default"], "bounds": f["bounds"]}
        kw.update(self._type_kwargs(atoms, kinds, fname, f"{cls.name}.{fname}: {f['annotation']}"))
        if "none" in kinds and "bool" not in kinds:
            kw["optional"] = True
            if kw.get("choices") is not None:
                kw["choices"] = list(kw["choices"]) + [None]
        return kw

    def _type_kwargs(self, atoms: list[tuple], kinds: set[str], fname: str, label: str) -> dict:
        if "dataclass" in kinds:
            return {"type": "json"}
        if kinds == {"bool", "str", "none"}:
            return {"type": "str", "nargs": "?", "const": True}
        if "bool" in kinds:
            return {"action": "BooleanOptionalAction"}
        if "literal" in kinds:
            return _literal_kwargs(atoms, kinds)
        if kinds & {"tuple", "list", "set"}:
            return _collection_kwargs(atoms)
        if "int" in kinds:
            return {"type": self._int_type(fname)}
        if "float" in kinds:
            return {"type": "float"}
        if "dict" in kinds and ("str" in kinds or "other" in kinds or "dataclass" in kinds):
            return {"type": "json_or_str"}
        if "dict" in kinds:
            return {"type": "json"}
        if "str" in kinds or "other" in kinds:
            return {"type": "str"}
        raise SystemExit(f"unsupported type for {label}")

    def _int_type(self, fname: str) -> str:
        if fname in self._human_int_or_auto_fields:
            return "human_int_or_auto"
        if fname in self._human_int_fields:
            return "human_int"
        return "int"
