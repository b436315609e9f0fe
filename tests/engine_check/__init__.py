"""Offline checker for vLLM / SGLang launch commands.

``check_command(argv, engine, gpu_arch)`` parses ``argv`` the way the engine's
argparse parser would (using the flag tables extracted from the published
wheels, see ``tests/fixtures/engines/README.md``) and then applies the
cross-flag rules recorded under ``rules`` in the same fixtures.  It returns a
list of human-readable problems; an empty list means the command is accepted.

Only the standard library is used; nothing from vLLM or SGLang is imported.

Parsing follows CPython 3.11 argparse (allow_abbrev=True for both engines):
exact option strings, ``--opt=value``, unique-prefix abbreviations of long
options (an ambiguous prefix is an error), ``-xVALUE`` for one-letter short
options, negative numbers as values, nargs None/?/*/+/N.  vLLM's
FlexibleArgumentParser pre-processing is reproduced as well: ``--model X`` is
moved to the positional model, underscores in option names become dashes,
``-O3`` means ``--optimization-level 3`` and dotted JSON options
(``--compilation-config.cudagraph_mode FULL``) are merged into their JSON
option.

The package: ``fixtures`` (the flag tables and rules, ``load_fixture``), ``values`` (value conversion),
``preprocess`` (vLLM's pre-processing), ``parsing`` (the argparse emulation), ``vllm_rules`` and
``sglang_rules`` (the cross-flag rules); this module holds the entry point, ``check_command``.
"""

from __future__ import annotations

# _convert, _parse, _vllm_preprocess and _ParseError are also used by tests/test_engine_check.py, which
# rebuilds the parser with the standard library's argparse and compares the two
from .fixtures import _ENGINE_ALIASES, FIXTURE_FILES, _gpu_major, _is_rocm, load_fixture
from .parsing import _parse
from .preprocess import _vllm_preprocess
from .sglang_rules import _sglang_rules
from .values import _convert, _ParseError  # noqa: F401
from .vllm_rules import _vllm_rules

__all__ = ["check_command", "load_fixture", "FIXTURE_FILES"]


def check_command(
    argv: list[str],
    engine: str,
    gpu_arch: str | None = None,
    *,
    model_max_len: int | None = None,
    allow_long_max_model_len: bool = False,
    sparse_attention: bool | None = None,
    model_backend: str | None = None,
    gpus_per_node: int | None = None,
    include_overrides: bool = True,
) -> list[str]:
    """Check an engine command line; return a list of problems (empty = accepted).

    argv: for vLLM everything after ``vllm serve`` (``[MODEL, "-tp", "8", ...]``),
        for SGLang everything after ``python -m sglang.launch_server``.
    engine: ``"vllm"`` or ``"sglang"``.
    gpu_arch: ``"sm90"`` (Hopper), ``"sm100"`` (Blackwell), ``"sm80"``,
        ``"sm89"``, ..., an AMD Instinct ``"gfx942"`` / ``"gfx950"`` (ROCm: only the
        engines' ROCm-capable attention backends), or None to skip these checks.
    model_max_len: the model's maximum context (e.g. 163840 for DeepSeek-V3);
        enables the vLLM ``--max-model-len`` / chunked-prefill checks that
        need it.
    allow_long_max_model_len: as if VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 were set.
    sparse_attention: True for sparse-attention MLA models (DeepSeek-V3.2),
        False for dense MLA models, None to not check backend sparsity.
    model_backend: the attention backend the model's own code selects (vLLM's DeepSeek-V4 attention picks
        FLASHMLA_SPARSE_DSV4 itself, models/deepseek_v4/attention.py); the MLA backend rules, which the
        extracted table holds for MLA and DSA backends only, are then skipped, and an --attention-backend
        must name it.
    gpus_per_node: GPUs on one node; enables vLLM's "World size (N) is larger
        than the number of available GPUs" check.
    include_overrides: also report settings the engine silently replaces
        (SGLang page sizes forced by MLA backends); those messages start
        with ``[override]``.
    """
    key = _ENGINE_ALIASES.get(engine.lower())
    if key is None:
        raise ValueError(f"unknown engine {engine!r}; expected 'vllm' or 'sglang'")
    argv = [str(a) for a in argv]
    major, rocm = _gpu_major(gpu_arch), _is_rocm(gpu_arch)
    fx = load_fixture(key)
    problems: list[str] = []
    if key == "vllm":
        argv = _vllm_preprocess(argv, problems)
    try:
        values, given, positionals, parse_problems = _parse(argv, key)
    except _ParseError as e:
        return problems + [f"{fx['program']}: error: {e}"]
    problems += parse_problems
    if key == "vllm":
        problems += _vllm_rules(
            fx, values, given, positionals, major, model_max_len, allow_long_max_model_len, sparse_attention,
            gpus_per_node, model_backend, rocm,
        )
    else:
        problems += _sglang_rules(fx, values, given, major, include_overrides, rocm)
    return problems
