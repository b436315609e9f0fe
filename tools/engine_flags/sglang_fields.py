"""SGLang ``A[T, Arg(...)]`` namespace fields turned into flags.

``ServerArgs`` in ``sglang/srt/server_args.py`` is assembled from the
namespace structs listed in ``_INPUT_NAMESPACES``
(``sglang/srt/arg_groups/fields/*.py``).  Their annotated fields become flags
by the rules of ``add_cli_args_from_dataclass`` in
``sglang/srt/arg_groups/arg_utils.py``, mirrored here: ``no_cli`` fields are
skipped; ``cli_name``/``aliases`` name the options; an explicit ``action``
wins; a Literal gets its values as choices; ``list[T]`` takes ``nargs="+"``
unless a ``type_parser`` is given; ``bool`` is ``store_true``; a field with
no default is required.
"""

from __future__ import annotations

import ast
from typing import Any

from .evaluate import LiteralType, Unresolved, dotted, jsonable, try_eval
from .flag import Flag, boolean_optional_strings
from .symbols import SourceIndex

SERVER_ARGS = "sglang.srt.server_args"
ARG_UTILS = "sglang.srt.arg_groups.arg_utils"
# Lines of add_cli_args_from_dataclass that this module mirrors
MIRROR_NEEDLES = (
    "if arg_meta.no_cli:",
    'nargs = arg_meta.nargs or "+"',
    'kwargs = dict(action="store_true"',
    "choices = arg_meta.choices or literal_vals",
    "if origin is list and arg_meta.type_parser is None:",
)
# Arg(type_parser=...) / add_argument(type=...) callables -> fixture type
TYPE_PARSERS = {
    "loads": "json",
    "json_list_type": "json",
    "human_readable_int": "si_iec_int",
    "nullable_str": "str",
    "parse_cuda_graph_backend_arg": "str",
    "parse_cuda_graph_config_arg": "json",
}
SCALARS = {"int": "int", "float": "float", "str": "str"}


def check_mirror(idx: SourceIndex) -> None:
    """Make sure add_cli_args_from_dataclass still has the structure this
    extractor mirrors."""
    src = idx.source_text(ARG_UTILS)
    for needle in MIRROR_NEEDLES:
        if needle not in src:
            raise SystemExit(f"add_cli_args_from_dataclass changed: {needle!r} missing")


def namespaces(idx: SourceIndex) -> list[tuple[ast.ClassDef, str]]:
    tree = idx.require_ast(SERVER_ARGS)
    for st in tree.body:
        if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and st.targets[0].id == "_INPUT_NAMESPACES":
            return [idx.find_class(SERVER_ARGS, e.id) for e in st.value.elts]
    raise SystemExit("_INPUT_NAMESPACES not found")


def type_parser(node: ast.AST | None) -> str | None:
    if node is None:
        return None
    return TYPE_PARSERS.get(dotted(node).split(".")[-1], "str")


def _unwrap(node: ast.AST) -> ast.AST:
    """Optional[X] / Union[X, None] / X | None -> X (when exactly one non-None arm)."""
    if isinstance(node, ast.Subscript) and dotted(node.value) in ("Optional", "typing.Optional"):
        return node.slice
    if isinstance(node, ast.Subscript) and dotted(node.value) in ("Union", "typing.Union"):
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        arms = elts
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        arms = [node.left, node.right]
    else:
        return node
    non_none = [e for e in arms if not (isinstance(e, ast.Constant) and e.value is None)]
    return non_none[0] if len(non_none) == 1 else node


def _scalar(node: ast.AST) -> str:
    return SCALARS.get(dotted(node), "str")


def _arg_meta(metas: list[ast.expr]) -> dict[str, ast.AST] | None:
    """Keywords of the field's ``Arg(...)``; {} for a bare help text; None if not a CLI field."""
    for m in metas:
        if isinstance(m, ast.Constant) and isinstance(m.value, str):
            return {}
        if isinstance(m, (ast.Constant, ast.JoinedStr, ast.BinOp)) and not isinstance(m, ast.Call):
            # help text built from an f-string / concatenation
            return {}
        if isinstance(m, ast.Call) and dotted(m.func) == "Arg":
            return {k.arg: k.value for k in m.keywords}
        # other calls: NS(...) / Derived(...)
    return None


class FieldFlag:
    """One ``name: A[T, Arg(...)] = default`` field of a namespace class."""

    def __init__(self, idx: SourceIndex, st: ast.AnnAssign, mod: str, meta: dict[str, ast.AST]):
        self.idx, self.st, self.mod, self.meta = idx, st, mod, meta
        self.name = st.target.id

    def eval(self, key: str) -> Any:
        return try_eval(self.idx, self.meta[key], self.mod)

    def choices(self) -> Any:
        v = self.eval("choices")
        if v is Unresolved:
            raise SystemExit(f"cannot evaluate choices {dotted(self.meta['choices'])} for {self.name}")
        return jsonable(v)

    def base_flag(self, cls: ast.ClassDef) -> Flag:
        cli = self.eval("cli_name") if "cli_name" in self.meta else "--" + self.name.replace("_", "-")
        aliases = self.eval("aliases") if "aliases" in self.meta else []
        opts = [cli] + list(aliases or [])
        fl = Flag(option_strings=opts, dest=self.name, source=self.idx.source_of(self.mod), origin=f"{cls.name}.{self.name}")
        if self.st.value is not None:
            d = try_eval(self.idx, self.st.value, self.mod)
            fl.default = jsonable(d) if d is not Unresolved else None
        return fl

    def apply_action(self, fl: Flag) -> None:
        action = dotted(self.meta["action"]).split(".")[-1]
        fl.action = action
        akw = {}
        akw_node = self.meta.get("action_kwargs")
        if isinstance(akw_node, ast.Dict):
            for k, v in zip(akw_node.keys, akw_node.values):
                if isinstance(k, ast.Constant) and k.value == "nargs":
                    akw["nargs"] = try_eval(self.idx, v, self.mod)
        if action == "BooleanOptionalAction":
            fl.kind = "flag"
            fl.option_strings, fl.negated = boolean_optional_strings(fl.option_strings, enable_disable=False)
        elif action in ("store_true", "store_false"):
            fl.kind = "flag"
        else:
            fl.nargs = akw.get("nargs")
            fl.type = "str"

    def apply_type(self, fl: Flag, inner: ast.AST, tparser: str | None) -> None:
        if isinstance(inner, ast.Subscript) and dotted(inner.value) in ("Literal", "typing.Literal"):
            lit = try_eval(self.idx, inner, self.mod)
            vals = list(lit.values) if isinstance(lit, LiteralType) else []
            fl.choices = self.choices() if "choices" in self.meta else jsonable(vals)
            first = vals[0] if vals else ""
            fl.type = tparser or {int: "int", float: "float", str: "str"}.get(type(first), "str")
        elif isinstance(inner, ast.Subscript) and dotted(inner.value) in ("List", "list", "typing.List") and tparser is None:
            fl.type = _scalar(inner.slice)
            fl.nargs = self.eval("nargs") if "nargs" in self.meta else "+"
            if "choices" in self.meta:
                fl.choices = self.choices()
        elif dotted(inner) == "bool":
            fl.kind = "flag"
            fl.action = "store_true"
        else:
            self.apply_scalar(fl, inner, tparser)

    def apply_scalar(self, fl: Flag, inner: ast.AST, tparser: str | None) -> None:
        fl.type = tparser or _scalar(inner)
        if "choices" in self.meta:
            fl.choices = self.choices()
        if "nargs" in self.meta:
            fl.nargs = self.eval("nargs")
            if fl.nargs == "?":
                fl.kind = "optional_value"
        req = self.eval("required") if "required" in self.meta else None
        if req is True or (req is None and self.st.value is None):
            fl.required = True


def field_flag(idx: SourceIndex, st: ast.AnnAssign, mod: str, cls: ast.ClassDef) -> Flag | None:
    """The flag of one namespace field, or None (no Arg metadata, or no_cli)."""
    ann = st.annotation
    if not (isinstance(ann, ast.Subscript) and dotted(ann.value) in ("A", "Annotated")):
        return None
    elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    meta = _arg_meta(elts[1:])
    if meta is None:
        return None
    if "no_cli" in meta and try_eval(idx, meta["no_cli"], mod) is True:
        return None
    ff = FieldFlag(idx, st, mod, meta)
    fl = ff.base_flag(cls)
    tparser = type_parser(meta.get("type_parser"))
    if "action" in meta:
        ff.apply_action(fl)
    else:
        ff.apply_type(fl, _unwrap(elts[0]), tparser)
    return fl
