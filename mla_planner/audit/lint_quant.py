"""What `lint` says of a command's --quantization (or its absence) against the checkpoint it serves.

The engines read a checkpoint's own `quantization_config`; a --quantization that names the same method is
redundant, one that names another contradicts it (sgl-project/sglang#3283: a mismatched --quantization on FP8
DeepSeek-V3 crashed), and a few convert on load. Two cases need the flag: a BF16 checkpoint quantized at
load (priced here as stored, so warned), and meituan's per-channel INT8 release, which has no
quantization_config (SGLang needs --quantization w8a8_int8; launch/sglang.py `int8_flag`). vLLM loads
neither INT8 release (backends.int8_checkpoint_problem).
"""

from __future__ import annotations

from typing import Optional

from mla_planner.engines.backends import int8_checkpoint_problem
from mla_planner.launch.sglang import int8_flag
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.gpu import GPU

# --quantization values that convert an FP8 checkpoint on load (SGLang model_config.py accepts them over fp8)
REQUANTIZE_OK = {"modelopt_fp4", "nvfp4_online"}


def own_methods(spec: ModelSpec, stored: str) -> set[str]:
    """The --quantization names of the checkpoint's own method (awq's Marlin and MoE-WNA16 spellings too; ModelOpt's and
    compressed-tensors' for FP4 storage)."""
    if stored == "int8":
        return {"blockwise_int8"} if spec.int8_block else {"w8a8_int8"}
    # compressed-tensors stores int4, FP8 blocks, NVFP4 and MXFP4 alike (specs/quantization.py): the spec keeps the
    # storage, not the format's name, so its method counts as the checkpoint's own for each of them
    return {"fp8": {"fp8", "compressed-tensors"},
            "int4": {"awq", "awq_marlin", "marlin", "moe_wna16", "compressed-tensors"},
            "nvfp4": {"modelopt_fp4", "modelopt", "compressed-tensors"},
            "mxfp4": {"mxfp4", "compressed-tensors"}}.get(stored, set())


def quantization_findings(engine: str, quant: Optional[str], spec: ModelSpec, gpu: GPU) -> list[tuple[str, str, str]]:
    """(level, flag, text) findings: an INT8 checkpoint the engine cannot load (error), a missing
    w8a8_int8 (error), a redundant method (warn; `awq` over awq_marlin is slower), a BF16 checkpoint quantized
    at load (warn), a method that contradicts the checkpoint (error)."""
    if (problem := int8_checkpoint_problem(engine, spec, gpu)):
        return [("error", "checkpoint", problem)]
    stored = spec.weight_dtype if spec.weight_dtype != "bf16" else spec.expert_dtype
    needed = int8_flag(spec) if engine == "sglang" else None
    if quant is None and needed:
        return [("error", "--quantization", f"missing: this per-channel INT8 checkpoint has no quantization_config, "
                                            f"so SGLang loads it as BF16 without --quantization {needed}")]
    if quant is None:
        return []
    if quant == needed:
        return []
    if stored == "bf16":
        return [("warn", "--quantization", f"{quant} quantizes a BF16 checkpoint at load: the plan prices the "
                                           "checkpoint as stored (bf16); plan with a quantized one")]
    if quant in own_methods(spec, stored):
        slower = " and `awq` forces SGLang's slower kernels over awq_marlin (awq/awq.py)" if quant == "awq" else ""
        return [("warn", "--quantization", f"redundant: the engine reads the checkpoint's own "
                                           f"quantization_config{slower}; drop it")]
    if stored == "fp8" and quant in REQUANTIZE_OK:
        return []
    own = "/".join(sorted(own_methods(spec, stored))) or stored
    return [("error", "--quantization", f"{quant} contradicts the checkpoint, stored as {stored} ({own}): "
                                        + ("pass --quantization w8a8_int8" if needed else "drop it")
                                        + " (sgl-project/sglang#3283: a mismatched --quantization on FP8 DeepSeek-V3 "
                                          "crashed)")]
