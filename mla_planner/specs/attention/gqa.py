"""Grouped-query attention (Ainslie et al., arXiv:2305.13245), the baseline MLA is compared with: one K/V
cache group per layer, 2 x kv_heads x head_dim values per token, the KV heads split over the TP ranks
(at least one per rank: past kv_heads ranks they are replicated, as vLLM's QKVParallelLinear does)."""

from __future__ import annotations

from math import ceil

from mla_planner.core.units import ACT_BYTES
from mla_planner.specs.attention import cost
from mla_planner.specs.attention.base import AttentionKind, CoreCost, KVGroup, Projection, element_bytes


class GQA(AttentionKind):
    name = "gqa"

    def check(self, spec) -> str:
        kv_heads = spec.num_key_value_heads or spec.num_attention_heads
        if spec.num_attention_heads % kv_heads:
            return (f"num_attention_heads={spec.num_attention_heads} is not a multiple of "
                    f"num_key_value_heads={kv_heads}")
        if spec.head_dim is None and spec.hidden_size % spec.num_attention_heads:
            return (f"hidden_size={spec.hidden_size} is not divisible by "
                    f"num_attention_heads={spec.num_attention_heads}; give head_dim")
        return ""

    def projections(self, spec) -> list[Projection]:
        """q, k, v and o per head (kv_heads for k and v), and the fused qkv bias where the model has one."""
        d, H, hd, kv = spec.hidden_size, spec.num_attention_heads, spec.gqa_head_dim, spec.kv_heads
        out = [Projection("attn.q_proj", (H * hd, d), "column"), Projection("attn.k_proj", (kv * hd, d), "column"),
               Projection("attn.v_proj", (kv * hd, d), "column"), Projection("attn.o_proj", (d, H * hd), "row")]
        if spec.attention_bias:
            out.append(Projection("attn.qkv_bias", ((H + 2 * kv) * hd,), "column", True))
        return out

    def kv_formats(self, spec) -> tuple[str, ...]:
        return ("bf16", "fp8")

    def kv_groups(self, spec, kv_dtype: str, layout=None) -> tuple[KVGroup, ...]:
        """K and V per KV head: 2 x kv_heads x head_dim x element bytes; a rank keeps ceil(kv_heads/tp) heads."""
        per_layer = 2 * spec.kv_heads * spec.gqa_head_dim * element_bytes(kv_dtype)
        share = 1.0 if layout is None else ceil(spec.kv_heads / layout.tp) / spec.kv_heads
        return (KVGroup("kv_heads", per_layer, share),)

    def tp_holding(self, spec, layout) -> str:
        """K/V heads split over the TP ranks; past kv_heads ranks each head is held by tp / kv_heads of them."""
        kv, tp = spec.kv_heads, layout.tp
        if tp == 1:
            return "one copy per rank"
        if tp <= kv:
            return f"KV heads split over {tp} TP ranks ({kv // tp} per rank)"
        return f"one KV head per TP rank, each on {tp // kv} ranks ({tp // kv} copies)"

    def layout_problems(self, spec, layout) -> list[str]:
        out = []
        if layout.tp > spec.kv_heads and layout.tp % spec.kv_heads:
            out.append(f"tp={layout.tp} neither divides nor is a multiple of {spec.kv_heads} KV heads")
        if layout.dcp > 1:
            out.append("dcp is modelled for the MLA latent cache only")
        if layout.kv_layout == "latent-sharded":
            out.append("latent-sharded KV needs an MLA model")
        return out

    def decode_core(self, spec, layout, kv_dtype: str, requests: int, context: int, q_len: int) -> CoreCost:
        """Per-head K/V cache split by TP down to one KV head per rank (cost.naive_core_flops)."""
        kv_b = self.bytes_per_token_layer(spec, kv_dtype)
        hd, heads = spec.gqa_head_dim, spec.num_attention_heads // layout.tp
        kv_share = self.kv_groups(spec, kv_dtype, layout)[0].rank_share
        total = requests * context
        return CoreCost(total * kv_b * kv_share + 2 * requests * heads * hd * ACT_BYTES,
                        cost.naive_core_flops(heads, total, hd, hd))

    def prefill_core(self, spec, layout, kv_dtype: str, chunk: int, prefix: int) -> CoreCost:
        """Causal scores over c*P + c(c+1)/2 key positions; the cached K/V read once."""
        heads = spec.num_attention_heads // layout.tp
        pairs = chunk * prefix + chunk * (chunk + 1) / 2
        hd = spec.gqa_head_dim
        return CoreCost((prefix + chunk) * self.bytes_per_token_layer(spec, kv_dtype),
                        cost.naive_core_flops(heads, pairs, hd, hd))
