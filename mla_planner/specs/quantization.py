"""How a checkpoint stores its weights, read from config.json's `quantization_config` (or ModelOpt's
`hf_quant_config.json` beside it): the spec's weight fields (`weight_dtype`, `expert_weight_dtype`, scale
blocks and groups, and the modules a format leaves unquantized).

Formats read, each as vLLM 0.33.0 / SGLang 0.5.23 detect it:
- fp8 block-scaled (DeepSeek-V3/R1: `quant_method: fp8`, `weight_block_size`);
- AutoAWQ 4-bit (`awq`: every decoder linear int4, less `modules_to_not_convert`);
- meituan's INT8 (`blockwise_int8`, `w8a8_int8`);
- compressed-tensors (vLLM `layers/quantization/compressed_tensors/compressed_tensors.py`): int 4-bit groups
  (Kimi-K2-Thinking / K2.5 experts), float 8-bit blocks (`FP8_BLOCK`: Mistral Large 3, RedHatAI FP8-BLOCK),
  float 4-bit groups of 16 (NVFP4, `nvfp4-pack-quantized`) or 32 (MXFP4, `mxfp4-pack-quantized`), with
  `ignore` naming the modules left in bf16 (`re:` regexes or names);
- ModelOpt NVFP4 (`quant_method: modelopt`, `quant_algo: NVFP4`, `exclude_modules` / `ignore` wildcards;
  vLLM `layers/quantization/modelopt.py`): NVIDIA's DeepSeek-R1/V3 FP4 releases keep attention, lm_head and
  the MTP layer in bf16 that way;
- `mxfp4` (gpt-oss style: routed experts only, vLLM `layers/quantization/mxfp4.py`).
Anything else is refused in one line, never priced as another format.
"""

from __future__ import annotations

import re
from pathlib import Path

from mla_planner.core.errors import InputError
from mla_planner.core.files import read_mapping
from mla_planner.specs.weights import module_skipped


def quantization_of(cfg: dict, folder: Path, text: dict | None = None) -> dict | None:
    """config.json's `quantization_config`, else the text model's (a multimodal config keeps it in
    `text_config`: vLLM 0.33.0 `transformers_utils/model_arch_config_convertor.py` looks there second), else
    ModelOpt's `hf_quant_config.json` beside it (older ModelOpt exports keep it there; vLLM 0.33.0
    `transformers_utils/config.py` reads it when config.json has none)."""
    for where in (cfg, text or {}):
        if where.get("quantization_config") is not None:
            return where["quantization_config"]
    side = folder / "hf_quant_config.json"
    if not side.is_file():
        return None
    data = read_mapping(side)
    quant = data.get("quantization")
    if quant is None:                  # nothing quantized
        return None
    if not isinstance(quant, dict):
        raise InputError(str(side), "expected a `quantization` mapping with quant_algo", "quantization")
    return {"quant_method": "modelopt", **quant}


def weight_fields(quant: dict | None, where: str, layers: int = 1, dense: int | None = None) -> dict:
    """The spec's weight fields for QUANT (none: bf16). `layers`, `dense`: the model's decoder and dense-FFN
    layer counts (AWQ's fused-layer check)."""
    if not quant:
        return {"weight_dtype": "bf16"}
    if not isinstance(quant, dict):
        raise InputError(where, f"expected a mapping with quant_method, got {type(quant).__name__}",
                         "quantization_config")
    method = str(quant.get("quant_method") or "")
    if method == "fp8":
        return {"weight_dtype": "fp8", "weight_block_size": _block(quant.get("weight_block_size"), where)}
    if method == "awq":
        return _awq(quant, where, layers, dense)
    if method == "blockwise_int8":      # meituan DeepSeek-R1-Block-INT8 (SGLang blockwise_int8.py; vLLM has none)
        return {"weight_dtype": "int8", "int8_block": True,
                "weight_block_size": _block(quant.get("weight_block_size"), where)}
    if method == "w8a8_int8":           # per-channel INT8 (SGLang w8a8_int8.py)
        return {"weight_dtype": "int8"}
    if method == "compressed-tensors":
        return _compressed_tensors(quant, where)
    if method.startswith("modelopt"):
        return _modelopt(quant, where)
    if method == "mxfp4":               # routed experts only; linear layers stay unquantized (vLLM mxfp4.py)
        return {"weight_dtype": "bf16", "expert_weight_dtype": "mxfp4"}
    raise InputError(where, f"unsupported quant_method {method!r}; supported: fp8 (block-scaled), awq (4-bit), "
                            "blockwise_int8, w8a8_int8, compressed-tensors (int4, FP8 blocks, NVFP4, MXFP4), "
                            "modelopt NVFP4, mxfp4", "quantization_config")


def _compressed_tensors(quant: dict, where: str) -> dict:
    """One config group: int 4-bit groups are the routed experts' (Kimi's INT4 releases, whose `ignore` keeps
    everything else bf16); float formats apply to every linear layer but those `ignore` names."""
    groups = quant.get("config_groups") or {}
    if not isinstance(groups, dict) or not all(isinstance(g, dict) and isinstance(g.get("weights") or {}, dict)
                                               for g in groups.values()):
        raise InputError(where, "config_groups must map group names to mappings with a `weights` mapping",
                         "quantization_config.config_groups")
    groups = list(groups.values())
    kinds = {_ct_format(g.get("weights") or {}, where) for g in groups}
    if len(kinds) != 1:
        raise InputError(where, f"compressed-tensors with {len(kinds) or 'no'} weight formats in config_groups; "
                                "expected one", "quantization_config.config_groups")
    kind = kinds.pop()
    weights = groups[0].get("weights") or {}
    if kind == "int4":
        return {"weight_dtype": "bf16", "expert_weight_dtype": "int4", "int4_group_size": weights.get("group_size") or 32}
    fields = {"weight_dtype": kind, "expert_weight_dtype": kind, "unquantized_modules": _names(quant.get("ignore"),
                                                                                              where, "ignore")}
    if kind == "fp8":
        fields["weight_block_size"] = _block(weights.get("block_structure"), where)
    return fields


def _block(value, where: str) -> tuple[int, int]:
    """A scale block [rows, cols] of positive integers (128 x 128 when not given)."""
    if value is None:
        return (128, 128)
    if not isinstance(value, (list, tuple)) or len(value) != 2 or \
            not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise InputError(where, f"a weight scale block must be two positive integers, got {value!r}",
                         "quantization_config.weight_block_size")
    return (value[0], value[1])


def _ct_format(weights: dict, where: str) -> str:
    """int4, fp8 (128 x 128 blocks), nvfp4 (float 4-bit, groups of 16) or mxfp4 (groups of 32)."""
    bits, kind, strategy = weights.get("num_bits"), weights.get("type"), weights.get("strategy")
    group = weights.get("group_size")
    if bits == 4 and kind == "int":
        return "int4"
    if bits == 4 and kind == "float" and group in (16, 32):
        return "nvfp4" if group == 16 else "mxfp4"
    if bits == 8 and kind == "float" and strategy == "block":
        return "fp8"
    raise InputError(where, f"compressed-tensors weights of {bits} bits, type {kind}, strategy {strategy}, group "
                            f"{group} are not modelled (int4 groups, float 8-bit blocks, NVFP4 and MXFP4 are)",
                     "quantization_config.config_groups")


def _modelopt(quant: dict, where: str) -> dict:
    """ModelOpt NVFP4: every linear layer FP4 (e2m1, an e4m3 scale per 16 and an fp32 one per tensor) but those
    `exclude_modules` (or `ignore`) match by wildcard. Its FP8 and mixed-precision exports are not modelled."""
    algo = str(quant.get("quant_algo") or "")
    if algo.upper() != "NVFP4":
        raise InputError(where, f"ModelOpt quant_algo {algo!r} is not modelled (NVFP4 is)",
                         "quantization_config.quant_algo")
    group = quant.get("group_size", 16)
    if group != 16:
        raise InputError(where, f"ModelOpt NVFP4 group_size {group!r}; expected 16", "quantization_config.group_size")
    excluded = quant.get("exclude_modules", quant.get("ignore"))
    return {"weight_dtype": "nvfp4", "expert_weight_dtype": "nvfp4",
            "unquantized_modules": _names(excluded, where, "exclude_modules")}


def _names(value, where: str, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise InputError(where, f"{key} must be a list of module names or patterns", f"quantization_config.{key}")
    for m in value:
        if m.startswith("re:"):
            try:
                re.compile(m[3:])
            except re.error as exc:
                raise InputError(where, f"{m!r} is not a valid regular expression ({exc})",
                                 f"quantization_config.{key}") from None
    return tuple(value)


AWQ_GROUP_SIZES = (32, 64, 128)   # vLLM marlin_utils.py MARLIN_SUPPORTED_GROUP_SIZES, less -1 (per channel)
# vLLM's fused linear layers of DeepSeek-V2/V3 (models/deepseek_v2.py) and the checkpoint modules they load
FUSED_MODULES = {"fused_qkv_a_proj": ("self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"),
                 "gate_up_proj": ("gate_proj", "up_proj")}


def _awq(quant: dict, where: str, layers: int = 1, dense: int | None = None) -> dict:
    bits, group = quant.get("bits", quant.get("w_bit")), quant.get("group_size", quant.get("q_group_size"))
    zero = quant.get("zero_point", True)
    if type(bits) is not int or bits != 4:
        raise InputError(where, f"AWQ bits {bits!r}; expected the integer 4 (the engines' AutoAWQ kernels are "
                                "4-bit)", "quantization_config.bits")
    if type(group) is not int or group not in AWQ_GROUP_SIZES:
        raise InputError(where, f"AWQ group_size {group!r}; expected one of {', '.join(map(str, AWQ_GROUP_SIZES))} "
                                "(per-channel -1 is not modelled)", "quantization_config.group_size")
    if not isinstance(zero, bool):
        raise InputError(where, f"AWQ zero_point {zero!r}; expected true or false", "quantization_config.zero_point")
    if quant.get("lm_head"):
        raise InputError(where, "AWQ with a quantized lm_head is not modelled; expected lm_head: false",
                         "quantization_config.lm_head")
    skip = quant.get("modules_to_not_convert") or []
    if not isinstance(skip, list) or not all(isinstance(m, str) for m in skip):
        raise InputError(where, "modules_to_not_convert must be a list of module names",
                         "quantization_config.modules_to_not_convert")
    skip = _whole_fused_layers(skip, where, layers, layers if dense is None else dense)
    return {"weight_dtype": "int4", "int4_group_size": group, "int4_zero_point": zero,
            "unquantized_modules": tuple(skip)}


def _whole_fused_layers(skip: list[str], where: str, layers: int, dense: int) -> list[str]:
    """vLLM loads q_a_proj + kv_a_proj_with_mqa and gate_proj + up_proj as one fused layer each: a fused name
    in `modules_to_not_convert` keeps both halves unquantized, and naming one half only is refused
    ("Detected some but not all shards ... are quantized", layers/quantization/utils/quant_utils.py
    `is_layer_skipped`), so it is refused here too. `dense`: the first layers, which have a dense MLP; the
    rest have shared experts."""
    skip = list(skip) + [half for name, halves in FUSED_MODULES.items() if any(name in s for s in skip)
                         for half in halves]
    for halves in FUSED_MODULES.values():
        where_found = ({"mlp.": range(dense), "mlp.shared_experts.": range(dense, layers)}
                       if halves[0] == "gate_proj" else {"": range(layers)})
        for prefix, idx in where_found.items():
            for i in idx:
                hit = [module_skipped(skip, prefix + h, (i,)) for h in halves]
                if hit[0] != hit[1]:
                    raise InputError(where, f"modules_to_not_convert names {prefix}{halves[hit.index(True)]} but "
                                            f"not {prefix}{halves[hit.index(False)]}: vLLM loads them as one fused "
                                            "layer and refuses a half-quantized one",
                                     "quantization_config.modules_to_not_convert")
    return skip


V4_EXPERT_DTYPES = {"fp4": "mxfp4", "fp8": "fp8"}


def v4_expert_fields(text: dict, quant: dict | None, where: str) -> dict:
    """DeepSeek-V4 names its routed experts' storage beside quantization_config: `expert_dtype` "fp4" (absent
    means fp4: the released checkpoints) is MXFP4, e2m1 with an e8m0 scale per 32; "fp8" (V4-Flash-Base) FP8
    blocks like the rest; quantization_config `moe_quant_algo: NVFP4` NVFP4 experts (vLLM 0.33.0
    `models/deepseek_v4/quant_config.py`)."""
    if isinstance(quant, dict) and str(quant.get("moe_quant_algo") or "").upper() == "NVFP4":
        return {"expert_weight_dtype": "nvfp4"}
    value = text.get("expert_dtype", "fp4")
    if value not in V4_EXPERT_DTYPES:
        raise InputError(where, f"expert_dtype {value!r}: expected fp4 or fp8", "expert_dtype")
    return {"expert_weight_dtype": V4_EXPERT_DTYPES[value]}

