"""Derived facts of a model as named breakdowns that sum to their totals (nanoGPT sizing style).

Parameters (total, activated), stored weight bytes, and KV-cache bytes per token in each format the
model's attention kind takes, beside the naive per-head K/V layout MLA avoids. Formulas: DeepSeek-V3
inference/model.py, README_WEIGHTS.md; the KV bytes are the attention kind's (specs/attention: for MLA
(kv_lora_rank + qk_rope_head_dim) x bytes, DeepSeek-V2 paper section 2.1, SGLang `profile_max_num_token`
cell_size; 656 B for FlashMLA's fp8-with-scale layout, FlashMLA README).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.weights import Tensor, dspark_inventory, inventory, mtp_inventory, stored_bytes, vision_inventory


def _grouped(tensors: list[Tensor], value) -> "OrderedDict[str, float]":
    out: OrderedDict[str, float] = OrderedDict()
    for t in tensors:
        out[t.group] = out.get(t.group, 0) + value(t)
    out["total"] = sum(out.values())
    return out


def param_breakdown(spec: ModelSpec) -> "OrderedDict[str, int]":
    """Parameters per group (attention, dense_ffn, routed_experts, ...) and their total; MTP excluded."""
    return _grouped(inventory(spec), lambda t: t.numel)


def activated_param_breakdown(spec: ModelSpec) -> "OrderedDict[str, int]":
    """Parameters touched by one token: routed experts scaled by num_experts_per_tok / n_routed_experts
    (the router picks k of E); everything else counts whole. The input embedding is a lookup (no FLOPs),
    so `total_without_embedding` is also given, matching the published "activated" figures
    (deepseek-ai/DeepSeek-V3 README_WEIGHTS.md, MoonshotAI/Kimi-K2 README.md)."""
    def active(t: Tensor) -> int:
        if t.group == "routed_experts":
            return t.numel * spec.num_experts_per_tok // spec.n_routed_experts
        return t.numel
    out = _grouped(inventory(spec), active)
    out["total_without_embedding"] = out["total"] - out.get("embedding", 0)
    return out


def mtp_params(spec: ModelSpec) -> int:
    """Unique parameters of the MTP module(s), counted apart from the main model."""
    return sum(t.numel for t in mtp_inventory(spec))


def draft_params_and_bytes(spec: ModelSpec) -> tuple[int, float]:
    """(parameters, stored bytes) of a DSpark draft shipped beside the model (0, 0 without one)."""
    tensors = dspark_inventory(spec)
    return sum(t.numel for t in tensors), sum(stored_bytes(t, spec) for t in tensors)


def vision_weight_bytes(spec: ModelSpec) -> float:
    """Bytes of a multimodal checkpoint's vision encoder (bf16), apart from the text model."""
    return sum(stored_bytes(t, spec) for t in vision_inventory(spec))


def weight_bytes_breakdown(spec: ModelSpec, include_mtp: bool = False) -> "OrderedDict[str, float]":
    """Stored weight bytes per group in the checkpoint's own dtypes, fp8 block scales included."""
    tensors = inventory(spec) + (mtp_inventory(spec) if include_mtp else [])
    return _grouped(tensors, lambda t: stored_bytes(t, spec))


WEIGHT_FORMATS = {  # name -> how the checkpoint would be stored; embeddings, norms, gate stay bf16/fp32
    "bf16": {"weight_dtype": "bf16", "expert_weight_dtype": "bf16"},
    "fp8 block-scaled": {"weight_dtype": "fp8", "expert_weight_dtype": "fp8", "weight_block_size": (128, 128)},
    "int4 experts, bf16 rest": {"weight_dtype": "bf16", "expert_weight_dtype": "int4", "int4_group_size": 32,
                                "int4_zero_point": False},
    "int4 AWQ, group 128": {"weight_dtype": "int4", "expert_weight_dtype": "int4", "int4_group_size": 128,
                            "int4_zero_point": True},
    "int8 W8A8, channel scales": {"weight_dtype": "int8", "expert_weight_dtype": "int8", "int8_block": False},
}
# every row as its format stores the whole model, whatever the checkpoint
COMMON = {"unquantized_modules": (), "int8_block": False}


def weight_bytes_by_dtype(spec: ModelSpec, include_mtp: bool = False) -> "OrderedDict[str, float]":
    """Stored weight bytes per storage dtype (scales with their weights: MXFP4 experts with their e8m0 bytes)."""
    tensors = inventory(spec) + (mtp_inventory(spec) if include_mtp else [])
    out: OrderedDict[str, float] = OrderedDict()
    for t in tensors:
        out[t.dtype] = out.get(t.dtype, 0) + stored_bytes(t, spec)
    out["total"] = sum(out.values())
    return out


def weight_bytes_by_format(spec: ModelSpec) -> "OrderedDict[str, float]":
    """Total stored weight bytes (MTP excluded) if the checkpoint were stored in each common format:
    bf16; fp8 with 128x128 block scales (DeepSeek-V3's release); int4 group-quantised experts with the
    rest in bf16 (Kimi-K2-Thinking's release: groups of 32, no zeros); AutoAWQ's 4-bit with a scale
    and a zero per 128 values in every decoder-layer linear layer (the community AWQ releases of
    DeepSeek-V3/R1, the format SGLang's DeepSeek guide lists for 8 x A100); int8 W8A8 with an fp32 scale per
    output channel (meituan's DeepSeek-R1-Channel-INT8, which SGLang's guide runs on 32 x L40S). The
    checkpoint's own format is
    `weight_bytes_breakdown`."""
    out: OrderedDict[str, float] = OrderedDict()
    for name, update in WEIGHT_FORMATS.items():
        out[name] = weight_bytes_breakdown(replace(spec, **(COMMON | update)))["total"]
    return out


def kv_bytes_per_token_layer(spec: ModelSpec, kv_dtype: str = "bf16") -> float:
    """Bytes one token adds to one layer's caches on one rank that holds them whole: the sum over the
    attention kind's KV groups (specs/attention: MLA 576 x element bytes or 656 for `fp8_ds_mla`; GQA
    2 x kv_heads x head_dim x element bytes; DSA adds its index keys, averaged over the layers where only
    some layers have an indexer)."""
    return attention_of(spec).bytes_per_token_layer(spec, kv_dtype)


def kv_bytes_per_token(spec: ModelSpec, kv_dtype: str = "bf16", layers: int | range | None = None) -> float:
    """Bytes one token adds to all decoder layers' caches (or to `layers`: a range, e.g. one pipeline
    stage's, or a count), summed over the attention kind's KV groups and the layers that hold each."""
    return attention_of(spec).bytes_per_token(spec, kv_dtype, range(spec.num_hidden_layers) if layers is None
                                              else layers)


def naive_kv_bytes_per_token(spec: ModelSpec, kv_dtype: str = "bf16") -> float:
    """The MHA-style per-head cache MLA avoids: layers x H x (d_qk + d_v) x bytes (DeepSeek-V2 paper section 2.1).
    For a kind with no such comparison (GQA) this is its real cache."""
    per_layer = attention_of(spec).per_head_bytes_per_token_layer(spec, kv_dtype)
    if per_layer is None:
        return kv_bytes_per_token(spec, kv_dtype)
    return spec.num_hidden_layers * per_layer


def kv_table(spec: ModelSpec) -> "OrderedDict[str, dict]":
    """KV bytes per token per layer and per token for each cache format, and the naive layout."""
    out: OrderedDict[str, dict] = OrderedDict()
    kind = attention_of(spec)
    for fmt in kind.kv_formats(spec):
        out[fmt] = {"bytes_per_token_layer": kv_bytes_per_token_layer(spec, fmt),
                    "bytes_per_token": kv_bytes_per_token(spec, fmt)}
    if kind.per_head_bytes_per_token_layer(spec, "bf16") is not None:
        naive = naive_kv_bytes_per_token(spec, "bf16")
        out["naive_per_head_bf16"] = {"bytes_per_token_layer": naive / spec.num_hidden_layers,
                                      "bytes_per_token": naive}
    return out


def kv_group_table(spec: ModelSpec) -> list[dict]:
    """The attention kind's KV-cache groups: name, how many decoder layers hold each (a DSA index-key cache
    only the layers that keep an indexer), and a token's bytes in one such layer per cache format."""
    kind = attention_of(spec)
    layers = range(spec.num_hidden_layers)
    formats = kind.kv_formats(spec)
    rows = []
    for i, group in enumerate(kind.kv_groups(spec, formats[0])):
        rows.append({"name": group.name, "layers": group.layer_count(layers, spec.num_hidden_layers), "mtp": group.mtp,
                     "bytes_per_token_layer": {fmt: kind.kv_groups(spec, fmt)[i].bytes_per_token_layer
                                               for fmt in formats}})
    return rows
