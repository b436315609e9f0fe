"""Cross-flag rules of SGLang's server, each tied to the wheel file that enforces it.

* attention-backend choices: ``sglang/srt/arg_groups/choices.py``;
* trtllm_mla / cutedsl_mla GPU, KV-cache dtype and page size, flashmla page
  size: ``sglang/srt/arg_groups/overrides.py``; ``is_blackwell`` means SM
  10x/11x/12x and ``is_sm100`` SM 10x (``sglang/srt/utils/common.py`` with the
  property names of ``sglang/srt/runtime_context.py``);
* fa3 with MLA needs SM90: ``sglang/srt/layers/attention/attention_registry.py``;
* deprecated backend aliases: ``sglang/srt/arg_groups/serving_hook.py``;
* attention-DP and TP: ``sglang/srt/arg_groups/parallel_hook.py``.

As for vLLM, code-shaped rules are checked for presence (a known message or
expression) and recorded with their source; values are read from the wheel.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from .evaluate import dotted, evaluate
from .symbols import SourceIndex

CHOICES = "sglang.srt.arg_groups.choices"
COMMON = "sglang.srt.utils.common"
RUNTIME_CONTEXT = "sglang.srt.runtime_context"
OVERRIDES = "sglang.srt.arg_groups.overrides"
ATTENTION_REGISTRY = "sglang.srt.layers.attention.attention_registry"
SERVING_HOOK = "sglang.srt.arg_groups.serving_hook"
PARALLEL_HOOK = "sglang.srt.arg_groups.parallel_hook"
PARALLEL_NEEDLES = (
    "data-parallel replicas combined with attention data parallelism",
    "assert cfg.tp_size % cfg.attn_dp_size == 0",
    "attn_dp_size=cfg.dp_size",
)


def sglang_rules(idx: SourceIndex) -> dict:
    rules: dict[str, Any] = {}
    abc = evaluate(idx, ast.Name(id="ATTENTION_BACKEND_CHOICES"), CHOICES)
    rules["attention_backend_choices"] = {"source": idx.source_of(CHOICES), "values": abc,
                                          "by_platform": choices_by_platform(idx, abc)}
    blackwell, sm100 = platform_majors(idx)
    rules["mla_backends"] = mla_backend_rules(idx, blackwell, sm100)
    rules["platform_majors"] = {
        "source": idx.source_of(COMMON),
        "is_blackwell": blackwell,
        "is_sm100": sm100,
    }
    rules["mla_backends"]["fa3"] = fa3_rule(idx)
    rules["attention_backend_aliases"] = alias_rule(idx)
    rules["parallel"] = parallel_rule(idx)
    return rules


def choices_by_platform(idx: SourceIndex, values: list[str]) -> dict[str, list[str]]:
    """ATTENTION_BACKEND_CHOICES split by the comment headers of its literal ("# Common", "# NVIDIA specific",
    "# AMD specific", "# Other platforms"): which backends run on an AMD GPU (common + AMD) and which only on
    NVIDIA's."""
    text = idx.source_text(CHOICES)
    start = text.index("ATTENTION_BACKEND_CHOICES = [")
    body = text[start:text.index("]", start)]
    groups: dict[str, list[str]] = {}
    current = None
    for line in body.splitlines()[1:]:
        line = line.strip()
        if line.startswith("#"):
            current = line.lstrip("# ").split(" ")[0].lower()
            groups[current] = []
        elif line.startswith('"') and current is not None:
            groups[current].append(line.split('"')[1])
    if sorted(sum(groups.values(), [])) != sorted(values) or not {"common", "nvidia", "amd"} <= set(groups):
        raise SystemExit("SGLang attention-backend choices: the platform headers changed")
    return groups


def platform_majors(idx: SourceIndex) -> tuple[list[int], list[int]]:
    """Compute-capability majors of ``is_blackwell`` and ``is_sm100``: the
    ``partial(..., device_capability_majors=...)`` helpers of utils/common.py,
    by the helper names that runtime_context.py maps those properties to."""
    majors: dict[str, list[int]] = {}
    for st in idx.require_ast(COMMON).body:
        if isinstance(st, ast.Assign):
            for c in ast.walk(st.value):
                if isinstance(c, ast.Call) and dotted(c.func) == "partial":
                    for kw in c.keywords:
                        if kw.arg == "device_capability_majors":
                            for t in st.targets:
                                majors[t.id] = evaluate(idx, kw.value, COMMON)
    props = dict(re.findall(r'"(is_[a-z0-9_]+)":\s*"([a-z0-9_]+)"', idx.source_text(RUNTIME_CONTEXT)))
    return majors[props["is_blackwell"]], majors[props["is_sm100"]]


def _overrides_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for st in tree.body:
        if isinstance(st, ast.FunctionDef) and st.name == name:
            return st
    raise SystemExit(f"{name} not found in overrides.py")


def _lists_not_in(idx: SourceIndex, fn: ast.FunctionDef, left: str) -> list:
    """Lists compared with `<left> not in [...]` (e.g. `view.kv_cache_dtype`)."""
    out = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Compare) and dotted(n.left) == left and isinstance(n.ops[0], ast.NotIn):
            out.append(evaluate(idx, n.comparators[0], OVERRIDES))
    return out


def mla_backend_rules(idx: SourceIndex, blackwell: list[int], sm100: list[int]) -> dict:
    tree = idx.require_ast(OVERRIDES)
    kvfn = _overrides_function(tree, "_mla_kv_cache_dtype_checks")
    if "get_platform().is_blackwell" not in ast.unparse(kvfn):
        raise SystemExit("trtllm_mla Blackwell check changed")
    cutefn = _overrides_function(tree, "_cutedsl_prefill_backend_fill")
    if "get_platform().is_sm100" not in ast.unparse(cutefn):
        raise SystemExit("cutedsl_mla SM100 check changed")
    page_lists = _lists_not_in(idx, _overrides_function(tree, "_mla_backend_page_constraints"), "page_size")
    if "FlashMLA only supports a page_size of 64" not in idx.source_text(OVERRIDES):
        raise SystemExit("flashmla page size rule changed")
    src_ov = idx.source_of(OVERRIDES)
    forced_64 = {"page_size_otherwise": 64, "page_size_severity": "override"}
    return {
        "source": src_ov + " (fa3: see its own source)",
        "trtllm_mla": {
            "source": src_ov,
            "applies_to": ["--attention-backend", "--decode-attention-backend"],
            "compute_capability_majors": blackwell,
            "kv_cache_dtypes": _lists_not_in(idx, kvfn, "view.kv_cache_dtype")[0],
            "page_sizes": page_lists[0],
            **forced_64,
            "message": "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x).",
        },
        "cutedsl_mla": {
            "source": src_ov,
            "applies_to": ["--attention-backend", "--decode-attention-backend", "--prefill-attention-backend"],
            "decode_only": True,
            "compute_capability_majors": sm100,
            "kv_cache_dtypes": _lists_not_in(idx, cutefn, "view.kv_cache_dtype")[0],
            "page_sizes": page_lists[1],
            **forced_64,
            "message": "CuteDSL MLA backend is only supported on Blackwell GPUs (SM100).",
        },
        "flashmla": {
            "source": src_ov,
            "applies_to": ["--attention-backend", "--decode-attention-backend"],
            "page_sizes": [64],
            **forced_64,
        },
    }


def fa3_rule(idx: SourceIndex) -> dict:
    """fa3 with MLA: SM90 only (runtime assertion when the backend is built)."""
    fa3_src = ast.unparse(idx.find_function(ATTENTION_REGISTRY, "create_flashattention_v3_backend"))
    if "major == 9" not in fa3_src or "not runner.use_mla_backend" not in fa3_src:
        raise SystemExit("fa3 capability assertion changed")
    return {
        "source": idx.source_of(ATTENTION_REGISTRY),
        "applies_to": ["--attention-backend", "--decode-attention-backend", "--prefill-attention-backend"],
        "compute_capability_majors": [9],
        "message": "FlashAttention v3 Backend requires SM>=80 and SM<=90 (SM90 for MLA models).",
    }


def alias_rule(idx: SourceIndex) -> dict:
    """Deprecated backend aliases (the ``aliases = {...}`` table)."""
    aliases = None
    for n in ast.walk(idx.require_ast(SERVING_HOOK)):
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "aliases":
            aliases = evaluate(idx, n.value, SERVING_HOOK)
    if not aliases or "tokenspeed_mla" not in aliases:
        raise SystemExit("backend alias table changed")
    return {
        "source": idx.source_of(SERVING_HOOK),
        "aliases": aliases,
        "tokenspeed_mla_forces_kv_cache_dtype": "fp8_e4m3",
    }


def parallel_rule(idx: SourceIndex) -> dict:
    phsrc = idx.source_text(PARALLEL_HOOK)
    for needle in PARALLEL_NEEDLES:
        if needle not in phsrc:
            raise SystemExit(f"parallel_hook changed: {needle}")
    return {
        "source": idx.source_of(PARALLEL_HOOK),
        "rules": [
            "--enable-dp-attention with attn_dp_size == 1: attn_dp_size := dp_size, dp_size := 1",
            "attn_dp_size < 1 -> error",
            "attn_dp_size > 1 and dp_size > 1 -> error (data-parallel replicas combined with attention data parallelism are not supported)",
            "attn_dp_size > 1 -> assert tp_size % attn_dp_size == 0",
            "attn_cp_size > 1 -> assert tp_size % attn_cp_size == 0 and tp_size % (attn_dp_size * attn_cp_size) == 0",
        ],
    }
