"""The flags of ``vllm serve``, read from a vLLM wheel.

Starts at ``make_arg_parser`` in ``vllm/entrypoints/common/cli_args.py``
(positional ``model_tag``, ``--headless``, ``--api-server-count``,
``--config``, ``--grpc``, ...) and follows its ``X.add_cli_args(parser)``
calls: ``FrontendArgs`` (every field of ``FrontendArgs``/``BaseFrontendArgs``
becomes ``--field-name``, after the ``_customize_cli_kwargs`` hooks) and
``EngineArgs``/``AsyncEngineArgs`` in ``vllm/engine/arg_utils.py`` (every
``add_argument`` call).
"""

from __future__ import annotations

import ast

from .evaluate import dotted
from .flag import Flag
from .symbols import SourceIndex, method_of
from .type_atoms import TypeAnalyzer
from .vllm_add_cli_args import AddCliArgsWalker
from .vllm_argparse import apply_explicit, kwargs_to_flag
from .vllm_kwargs import KwargsMirror, dataclass_fields

CLI_ARGS = "vllm.entrypoints.common.cli_args"
ENGINE_ARGS_CLASSES = ("AsyncEngineArgs", "EngineArgs")


def _is_nested_kwargs_key(tgt: ast.AST) -> bool:
    """``kwargs["field"][...]`` with a constant field name."""
    return (
        isinstance(tgt, ast.Subscript) and isinstance(tgt.value, ast.Subscript)
        and isinstance(tgt.value.slice, ast.Constant)
    )


class VllmExtractor:
    def __init__(self, idx: SourceIndex):
        self.idx = idx
        self.ta = TypeAnalyzer(idx)
        self.mirror = KwargsMirror(idx, self.ta)
        self.flags: list[Flag] = []
        self.positionals: list[dict] = []

    def extract(self) -> None:
        fn = self.idx.find_function(CLI_ARGS, "make_arg_parser")
        self.run_add_cli_args(fn, CLI_ARGS, self.idx.source_of(CLI_ARGS))

    def run_add_cli_args(self, fn: ast.FunctionDef, mod: str, source: str) -> None:
        AddCliArgsWalker(self, self.mirror, mod, source).walk(fn.body)

    def dispatch_add_cli_args(self, call: ast.Call, mod: str) -> None:
        name = dotted(call.func.value)
        if name == "FrontendArgs":
            self.frontend_args(mod)
        elif name in ENGINE_ARGS_CLASSES:
            cls, cmod = self.idx.find_class(mod, name)
            self.run_add_cli_args(method_of(cls, "add_cli_args"), cmod, self.idx.source_of(cmod))
        else:
            raise SystemExit(f"unknown add_cli_args target {name}")

    def frontend_args(self, mod: str) -> None:
        """BaseFrontendArgs.add_cli_args registers --<field> for every field,
        after the _customize_cli_kwargs hooks of the class hierarchy."""
        cls, cmod = self.idx.find_class(mod, "FrontendArgs")
        fields_ = dataclass_fields(self.idx, self.ta, cls, cmod)
        kwargs = {name: self.mirror.field_kwargs((cls, cmod), name) for name in fields_}
        for c, m in reversed(self._class_chain(cls, cmod)):  # base first
            try:
                fn = method_of(c, "_customize_cli_kwargs")
            except SystemExit:
                continue
            self._apply_customize(fn, kwargs, m)
        src = self.idx.source_of(cmod)
        for name, kw in kwargs.items():
            self.add_flag(["--" + name.replace("_", "-")], kw, src)

    def _class_chain(self, cls: ast.ClassDef, mod: str) -> list[tuple[ast.ClassDef, str]]:
        """cls, its base, the base's base...; of several class bases the last one."""
        chain = []
        c, m = cls, mod
        while True:
            chain.append((c, m))
            nxt = None
            for b in c.bases:
                res = self.idx.resolve_expr(b, m)
                if res and res[0] == "class":
                    nxt = (res[1], res[2])
            if nxt is None:
                return chain
            c, m = nxt

    def _apply_customize(self, fn: ast.FunctionDef, kwargs: dict[str, dict], mod: str) -> None:
        """``kwargs["field"]["key"] = value`` and ``del kwargs["field"]["key"]``."""
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                tgt = node.targets[0]
                if _is_nested_kwargs_key(tgt) and isinstance(tgt.slice, ast.Constant):
                    fname, key = tgt.value.slice.value, tgt.slice.value
                    if fname in kwargs:
                        apply_explicit(self.idx, kwargs[fname], key, node.value, mod)
            elif isinstance(node, ast.Delete):
                for tgt in node.targets:
                    if _is_nested_kwargs_key(tgt):
                        kwargs[tgt.value.slice.value].pop(tgt.slice.value, None)

    def add_flag(self, opts: list[str], kw: dict, source: str) -> None:
        if not opts:
            return
        if not opts[0].startswith("-"):
            self.positionals.append({"name": opts[0], "nargs": kw.get("nargs"), "type": kw.get("type", "str"), "source": source})
            return
        self.flags.append(kwargs_to_flag(opts, kw, source))
