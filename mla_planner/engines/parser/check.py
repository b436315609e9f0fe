"""The entry point of the engines' command-line check: a vLLM / SGLang argv parsed as the engine parses it,
then held to the cross-flag rules the engine enforces at start-up (mla_planner/engines/parser/__init__.py)."""

from __future__ import annotations

from mla_planner.engines.parser.tables import ENGINE_ALIASES, gpu_major, is_rocm, load_table
from mla_planner.engines.parser.parsing import parse_args
from mla_planner.engines.parser.preprocess import vllm_preprocess
from mla_planner.engines.parser.sglang_rules import sglang_rules
from mla_planner.engines.parser.values import ParseError
from mla_planner.engines.parser.vllm_rules import vllm_rules


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
    attention_rules: bool = True,
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
    attention_rules: apply the attention-backend rules (backend, KV dtype
        and block size per backend); `lint` turns them off and uses the
        planner's own backend checks, which say more (data/backends.yaml).
    """
    key = ENGINE_ALIASES.get(engine.lower())
    if key is None:
        raise ValueError(f"unknown engine {engine!r}; expected 'vllm' or 'sglang'")
    argv = [str(a) for a in argv]
    major, rocm = gpu_major(gpu_arch), is_rocm(gpu_arch)
    fx = load_table(key)
    problems: list[str] = []
    if key == "vllm":
        argv = vllm_preprocess(argv, problems)
    try:
        values, given, positionals, parse_problems = parse_args(argv, key)
    except ParseError as e:
        return problems + [f"{fx['program']}: error: {e}"]
    problems += parse_problems
    if key == "vllm":
        problems += vllm_rules(
            fx, values, given, positionals, major, model_max_len, allow_long_max_model_len, sparse_attention,
            gpus_per_node, model_backend, rocm, attention_rules,
        )
    else:
        problems += sglang_rules(fx, values, given, major, include_overrides, rocm, attention_rules)
    return problems
