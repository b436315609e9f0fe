"""Weight bytes held by one GPU of one pipeline stage: the weight inventory walked with each tensor's split.

Table-driven like gpt-fast's `tp.py`: `weights.inventory` says how each tensor splits; this module turns
that into per-GPU bytes for one stage of a `Layout`:
  replicated       whole on every GPU
  column / row     1/tp of the matrix (attention-TP; see `dense_tp` for the FFN under DP attention)
  vocab            1/tp of the rows (embedding on the first stage, lm_head + final norm on the last;
                   SGLang's lm_head under DP attention: 1/(tp x dp), see `dense_tp`)
  expert_*         experts / ep, each expert's intermediate dim / moe_tp
Layer tensors count once per layer: a stage holds its share of them, dense-first layers
(`first_k_dense_replace`) falling on the stages that own layers [0, n_dense). fp8 block scales are
counted on the *shard's* shape by `weights.bytes_of`, so ceil(rows/128) rounding is exact per GPU.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from functools import lru_cache
from math import ceil

from mla_planner.engines.parallel import dense_tp
from mla_planner.engines.profile import profile
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.layout import Layout, weight_key
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.weights import Tensor, draft_inventory, dtype_of, inventory, stored_bytes, vision_inventory

MOE_GROUPS = ("routed_experts", "shared_experts", "gate")  # tensors present once per MoE layer
DENSE_GROUPS = ("dense_ffn",)                              # tensors present once per dense-FFN layer


def stage_weight_terms(spec: ModelSpec, layout: Layout, layers: range, first: bool, last: bool,
                       engine: str = "vllm", mtp: bool = False, fp8_marlin: bool = False,
                       dense_per_rank: bool = False, images: bool = False,
                       rocm_fp8_pad: bool = False) -> "OrderedDict[str, float]":
    """Bytes of weights one GPU of the stage holds, per group (see `_stage_weight_terms`).

    Memoised: the plan search asks for the same stage under many knob settings and layer splits, and only
    tp, dp and ep (not pp, dcp, the KV layout or replicas) change how weights split, and only how many layers
    (and how many of them dense) the stage owns, not which - unless the attention kind has a weight on some
    layers only (GLM-5.2's indexers): then the stage's layers themselves."""
    counts = (len(layers), spec.dense_layers_in(layers), layers if _weights_on_some_layers(spec) else None)
    return OrderedDict(_stage_weight_terms(spec, weight_key(layout), counts, first, last, engine, mtp, fp8_marlin,
                                           dense_per_rank, images, rocm_fp8_pad))


@lru_cache(maxsize=64)
def _weights_on_some_layers(spec: ModelSpec) -> bool:
    """Whether the attention kind has a weight on some decoder layers only (GLM-5.2's indexers)."""
    return any(p.layers is not None for p in attention_of(spec).projections(spec))


def marlin_scale_bytes(t: Tensor, block: tuple[int, int]) -> float:
    """What FP8 Marlin adds to a block-FP8 weight [N, K] on a GPU without FP8 (vLLM 0.33
    utils/marlin_utils_fp8.py: "block-wise quantization -> group-wise quantization", the fp32 scale per
    128 x 128 block repeated along N into one bf16 scale per output row and 128-wide K group): N x K/128 x 2
    bytes replace ceil(N/128) x ceil(K/128) x 4, about 1/64 of the FP8 bytes more."""
    if t.dtype != "fp8" or len(t.shape) != 2:
        return 0.0
    n, k = t.shape
    groups = ceil(k / block[1])
    return (n * groups * 2 - ceil(n / block[0]) * groups * 4) * t.count


@lru_cache(maxsize=4096)
def _stage_weight_terms(spec: ModelSpec, layout: Layout, counts: tuple, first: bool, last: bool,
                        engine: str, mtp: bool, fp8_marlin: bool = False, dense_per_rank: bool = False,
                        images: bool = False, rocm_fp8_pad: bool = False) -> tuple:
    """Bytes of weights one GPU of the stage owning `counts` = (decoder layers, dense-FFN layers among them)
    holds, per reporting group.

    Walks `inventory(spec)` (+ `draft_inventory` on the last stage when `mtp`, vLLM/SGLang run the
    drafter, MTP layer or DSpark draft, beside the last stage's layers; + `vision_inventory` where the engine builds
    the encoder: SGLang always, vLLM when served with `images` (whole on every GPU: its K2.5 recipe runs
    --mm-encoder-tp-mode data)) and adds `mla_absorb`, the bf16 W_UK/W_UV copies
    both engines derive from a quantized `wkv_b` (see `mla_absorb_bytes`), and with `fp8_marlin` the
    group scales FP8 Marlin builds (`marlin_scale_bytes`). Groups are keyed `weights/<group>`.
    """
    out: OrderedDict[str, float] = OrderedDict()
    marlin = padding = 0.0
    tensors = inventory(spec) + (draft_inventory(spec) if mtp and last else []) + \
        (vision_inventory(spec) if profile(engine).text_only_keeps_vision or images else [])
    for t in tensors:
        count = _stage_count(spec, t, counts, first, last)
        if count:
            shard = _shard(replace(t, count=count), layout, dense_tp(layout, engine, t.group, dense_per_rank))
            key = f"weights/{t.group}"
            out[key] = out.get(key, 0.0) + stored_bytes(shard, spec)
            marlin += marlin_scale_bytes(shard, spec.weight_block_size) if fp8_marlin else 0.0
            padding += rocm_fp8_padding_bytes(shard) if rocm_fp8_pad else 0.0
    absorb = mla_absorb_bytes(spec, layout, counts[0] + (spec.num_nextn_predict_layers if mtp and last else 0))
    if absorb:
        out["weights/mla_absorb"] = absorb
    if marlin:
        out["weights/fp8_marlin_scales"] = marlin
    if padding:
        out["weights/rocm_fp8_padding"] = padding
    return tuple(out.items())


def rocm_fp8_padding_bytes(t: Tensor) -> float:
    """What vLLM on ROCm adds to a dense FP8 linear weight [N, K] whose rows are a multiple of 512 bytes: 256 bytes a
    row, so that tensors sit further apart in memory (VLLM_ROCM_FP8_PADDING, on by default; vLLM 0.33.0
    model_executor/layers/quantization/utils/fp8_utils.py `_maybe_pad_fp8_weight`, called as the linear kernels
    process their weights, not for the fused-MoE experts)."""
    if t.dtype != "fp8" or len(t.shape) != 2 or t.split.startswith("expert"):
        return 0.0
    n, k = t.shape
    return n * 256 * t.count if k % 512 == 0 else 0.0


def mla_absorb_bytes(spec: ModelSpec, layout: Layout, layers: int) -> float:
    """bf16 copies of the per-head up-projections W_UK and W_UV that the engines build from a
    quantized `wkv_b`: H/tp x (d_n + d_v) x d_c x 2 bytes per layer.

    vLLM `MLACommonImpl.process_weights_after_loading` dequantizes kv_b_proj and keeps W_UK_T / W_UV
    (views of the bf16 copy); SGLang `DeepseekV2ForCausalLM.post_load_weights` builds w_kc / w_vc.
    A bf16 `wkv_b` (a bf16 checkpoint, or AWQ's `modules_to_not_convert` naming it) is aliased, so nothing
    extra is held (zero).
    """
    per_head = attention_of(spec).absorb_params_per_head(spec)
    if not per_head or dtype_of(spec, "attn.wkv_b") == "bf16":
        return 0.0
    heads = ceil(spec.num_attention_heads / layout.tp)
    return float(layers * heads * per_head * 2)


def _stage_count(spec: ModelSpec, t: Tensor, counts: tuple[int, int], first: bool, last: bool) -> int:
    """Copies of tensor `t` on this stage: whole-model tensors by placement, layer tensors by the
    number of this stage's layers of the tensor's kind (every layer, dense-FFN layers, MoE layers)."""
    if t.where == "first":
        return t.count if first else 0
    if t.where in ("last", "mtp"):
        return t.count if last else 0
    layers, dense_here, which = counts
    if t.layers is not None:
        return len(set(t.layers).intersection(which))
    if t.group in DENSE_GROUPS:
        total, here = spec.num_dense_layers, dense_here
    elif t.group in MOE_GROUPS:
        total, here = spec.num_moe_layers, layers - dense_here
    else:
        total, here = spec.num_hidden_layers, layers
    return t.count // total * here if total else 0


def _shard(t: Tensor, layout: Layout, tp: int) -> Tensor:
    """The slice of `t` one GPU holds (shape and count), for `bytes_of` to price with its scales."""
    shape = t.shape
    if t.split in ("column", "vocab"):
        shape = (ceil(shape[0] / tp),) + shape[1:]
    elif t.split == "row":
        shape = (shape[0], ceil(shape[1] / tp))
    elif t.split == "expert_column":
        return replace(t, count=ceil(t.count / layout.ep), shape=(ceil(shape[0] / layout.moe_tp), shape[1]))
    elif t.split == "expert_row":
        return replace(t, count=ceil(t.count / layout.ep), shape=(shape[0], ceil(shape[1] / layout.moe_tp)))
    return replace(t, shape=shape)
