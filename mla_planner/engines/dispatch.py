"""The EP all-to-all's dispatch as each engine builds it for a checkpoint: the format tokens travel in to the experts
(DeepEP on NVIDIA, MoRI on AMD: engines.parallel.a2a_library), and which of MoRI's two ops SGLang builds.

  format  payload per value  scale per token                     who dispatches it
  fp8     1 B                hidden/128 fp32 (one per 128)       DeepEP where the GPU has FP8; MoRI for FP8 experts
  fp4     0.5 B              hidden/32 e8m0 bytes (one per 32)   SGLang's MoRI for DeepSeek-V4's MXFP4 experts
  bf16    2 B                none                                every other MoRI case (vLLM's V4 included)

vLLM 0.33.0 (model_executor/layers/fused_moe/all2all_utils.py, maybe_make_prepare_finalize): MoRI dispatches FP8
where the experts' activations are per-token, per-tensor or block quantized, packed FP4 only for MXFP4 W4A4 experts,
and BF16 otherwise. For DeepSeek-V4 on ROCm its MXFP4 MoE backends are AITER_MXFP4_BF16, then TRITON_UNFUSED
(fused_moe/oracle/mxfp4.py, the DeepseekV4 routing branch), both W4A16, so V4's MXFP4 experts go out in BF16 there.
SGLang 0.5.23 (layers/moe/token_dispatcher/moriep.py set_quant_config): FP8 for FP8 expert weights, FP4 for
float4_e2m1fn_x2 ones (DeepSeek-V4's experts on AMD: layers/quantization/fp8.py views them so for AITER's native
MXFP4 MoE; other MXFP4 methods pass no weight dtype), BF16 otherwise. The combine comes back in BF16, except on
SGLang's EPv1 op for FP4 weights (V4 across hosts), whose default combine is MoRI's FP8 blockwise one
(moriep.py _MoriEPv1DispatcherImplBase._default_combine_dtype): 1 B a value and MORI_FP8_COMBINE_SCALE_DIM (56) scales
a token (ROCm/mori dispatch_combine.cpp kDefaultFp8BlockwiseScaleDim; priced as fp32, the size of its other scales).
"""

from __future__ import annotations

from mla_planner.core.units import ACT_BYTES
from mla_planner.engines.parallel import a2a_library, uses_ep_all_to_all
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec

PAYLOAD_BYTES = {"fp8": 1.0, "fp4": 0.5, "bf16": float(ACT_BYTES)}
SCALE_BLOCK_AND_BYTES = {"fp8": (128, 4), "fp4": (32, 1), "bf16": (0, 0)}
MORI_FP8_COMBINE_SCALES = 56     # per token, MoRI's FP8 blockwise combine (MORI_FP8_COMBINE_SCALE_DIM default)
SGLANG_EPV2_MAX_EP = 8     # arg_groups/moe_hook.py _mori_epv2_unsupported_reason: tp_size > 8 falls back to EPv1


def dispatch_format(engine: str, spec: ModelSpec, gpu) -> str:
    """The format `engine` dispatches `spec`'s tokens in over `gpu`'s EP all-to-all (module docstring)."""
    if a2a_library(gpu) == "deepep":
        return "fp8" if gpu.has_fp8 else "bf16"
    if spec.expert_dtype == "fp8":
        return "fp8"
    if engine == "sglang" and spec.expert_dtype == "mxfp4" and _compressed(spec):   # DeepSeek-V4's own checkpoint
        return "fp4"
    return "bf16"


def _compressed(spec: ModelSpec) -> bool:
    return attention_of(spec).backend_family == "mla-compressed"


def combine_format(engine: str, spec: ModelSpec, layout: Layout, gpu) -> str:
    """The format the experts' outputs come back in: "fp8" on SGLang's MoRI EPv1 op for FP4-dispatched tokens, else
    "bf16" (module docstring)."""
    if engine != "sglang" or a2a_library(gpu) != "mori":        # the common case, asked once a step: answered first
        return "bf16"
    fp4_epv1 = dispatch_format(engine, spec, gpu) == "fp4" and not uses_mori_epv2(engine, spec, layout, gpu)
    return "fp8" if fp4_epv1 else "bf16"


def combine_wire_bytes_per_value(fmt: str, hidden: int) -> float:
    """Bytes on the wire per combined value: BF16's 2, or MoRI's FP8 blockwise 1 + 56 x 4 / hidden."""
    return float(ACT_BYTES) if fmt == "bf16" else 1.0 + MORI_FP8_COMBINE_SCALES * 4 / hidden


def scale_bytes_per_token(fmt: str, hidden: int) -> int:
    """Bytes of quantization scales dispatched with one token of `hidden` values in format `fmt`."""
    block, size = SCALE_BLOCK_AND_BYTES[fmt]
    return hidden // block * size if block else 0


def wire_bytes_per_value(fmt: str) -> float:
    """Bytes on the wire per dispatched hidden value, scales included (fp8 1 + 4/128, fp4 0.5 + 1/32, bf16 2)."""
    block, size = SCALE_BLOCK_AND_BYTES[fmt]
    return PAYLOAD_BYTES[fmt] + (size / block if block else 0.0)


def uses_mori_epv2(engine: str, spec: ModelSpec, layout: Layout, gpu) -> bool:
    """SGLang 0.5.23 builds MoRI's EPv2 op (its own cco arena, made while the weights load, before the KV pool is
    sized: layers/quantization/fp8.py -> moriep.py init_mori_epv2_op) rather than EPv1 (the symmetric heap, at the
    first dispatch) for DeepSeek-V4 with the EP group inside one host; SGLANG_MORI_EP_V2 defaults on and
    arg_groups/moe_hook.py falls back to EPv1 for other architectures and for EP above 8 GPUs."""
    return (engine == "sglang" and a2a_library(gpu) == "mori" and uses_ep_all_to_all(layout) and spec.is_moe
            and _compressed(spec) and layout.ep <= SGLANG_EPV2_MAX_EP)
