"""Multi-head Latent Attention (DeepSeek-V2 paper, arXiv:2405.04434, section 2.1): one latent cache
group per layer, kv_lora_rank + qk_rope_head_dim values per token (576 for DeepSeek), whole on every
TP rank (vLLM and SGLang replicate it; /tp only in the seed's latent-sharded Route B). Decode runs the
weight-absorbed MQA form over the latent (FlashMLA); prefill the naive form after up-projecting every
cached latent (docs/step-model.md section 2)."""

from __future__ import annotations

from math import ceil

from mla_planner.core.units import ACT_BYTES
from mla_planner.specs.attention import cost
from mla_planner.specs.attention.base import AttentionKind, CoreCost, KVGroup, Projection, element_bytes
from mla_planner.specs.knobs import KV_DTYPES

FP8_DS_MLA_BYTES_PER_TOKEN_LAYER = 656  # 512 fp8 + 4 fp32 scales + 64 bf16 rope (FlashMLA README)
REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


class MLA(AttentionKind):
    name = "mla"
    backend_family = "mla"
    latent = True
    verify_kernel = True

    def check(self, spec) -> str:
        for key in REQUIRED:
            if getattr(spec, key) is None:
                return f"{key} is required for an MLA model (attention: mla)"
        if spec.num_key_value_heads not in (None, spec.num_attention_heads):
            return ("num_key_value_heads must equal num_attention_heads for MLA "
                    f"(got {spec.num_key_value_heads} vs {spec.num_attention_heads})")
        return ""

    def qk_head_dim(self, spec) -> int:
        return spec.qk_nope_head_dim + spec.qk_rope_head_dim

    def v_head_dim(self, spec) -> int:
        return spec.v_head_dim

    def projections(self, spec) -> list[Projection]:
        """DeepSeek-V3 inference/model.py MLA: q through a low-rank wq_a/q_norm/wq_b (or one wq), the
        compressed kv and the rope key from wkv_a, kv_norm, the per-head up-projection wkv_b, the output wo."""
        d, H, qk = spec.hidden_size, spec.num_attention_heads, self.qk_head_dim(spec)
        dc, dr = spec.kv_lora_rank, spec.qk_rope_head_dim
        out = []
        if spec.q_lora_rank:
            rq = spec.q_lora_rank
            out += [Projection("attn.wq_a", (rq, d), "replicated"), Projection("attn.q_norm", (rq,), "replicated", True),
                    Projection("attn.wq_b", (H * qk, rq), "column")]
        else:
            out.append(Projection("attn.wq", (H * qk, d), "column"))
        return out + [Projection("attn.wkv_a", (dc + dr, d), "replicated"),
                      Projection("attn.kv_norm", (dc,), "replicated", True),
                      Projection("attn.wkv_b", (H * (spec.qk_nope_head_dim + spec.v_head_dim), dc), "column"),
                      Projection("attn.wo", (d, H * spec.v_head_dim), "row")]

    def absorb_params_per_head(self, spec) -> int:
        return (spec.qk_nope_head_dim + spec.v_head_dim) * spec.kv_lora_rank

    def kv_formats(self, spec) -> tuple[str, ...]:
        return KV_DTYPES

    def kv_groups(self, spec, kv_dtype: str, layout=None) -> tuple[KVGroup, ...]:
        """The latent: (kv_lora_rank + qk_rope_head_dim) x element bytes (1152 B bf16, 576 B fp8), or 656 B in
        FlashMLA's fp8-with-scale layout; every TP rank holds it whole, 1/tp of it when latent-sharded."""
        per_layer = (FP8_DS_MLA_BYTES_PER_TOKEN_LAYER if kv_dtype == "fp8_ds_mla"
                     else spec.latent_dim * element_bytes(kv_dtype))
        sharded = layout is not None and layout.kv_layout == "latent-sharded"
        return (KVGroup("mla_latent", per_layer, 1 / layout.tp if sharded else 1.0),)

    def tp_holding(self, spec, layout) -> str:
        if layout.kv_layout == "latent-sharded":
            return f"latent width split over {layout.tp} TP ranks"
        return f"replicated on every TP rank ({layout.tp} copies)" if layout.tp > 1 else "one copy per rank"

    def latent_bytes(self, spec, kv_dtype: str) -> float:
        """What one token's latent costs one layer in `kv_dtype` (the first cache group; a subclass may add more)."""
        return self.kv_groups(spec, kv_dtype)[0].bytes_per_token_layer

    def layout_problems(self, spec, layout) -> list[str]:
        if layout.kv_layout == "latent-sharded" and (layout.tp == 1 or spec.kv_lora_rank % layout.tp):
            return [f"latent-sharded KV needs tp>1 dividing kv_lora_rank={spec.kv_lora_rank}"]
        return []

    def decode_core(self, spec, layout, kv_dtype: str, requests: int, context: int, q_len: int,
                    padded_heads: int | None = None) -> CoreCost:
        """Absorbed core (cost.absorbed_core_*). replicated: H/tp heads over every cached token; dcp: q heads
        all-gathered over the DCP group, so H/tp x dcp heads over 1/dcp of the tokens; latent-sharded: all H
        heads over a 1/tp slice of the latent (kv_lora_rank/tp and rope/tp). `padded_heads`: the heads the
        backend's kernel computes for those (AITER MLA rounds them up to a multiple of 16; Backend.padded_heads)."""
        kv_b = self.latent_bytes(spec, kv_dtype)
        H, tp, b = spec.num_attention_heads, layout.tp, requests
        dc, dr = spec.kv_lora_rank, spec.qk_rope_head_dim
        if layout.kv_layout == "latent-sharded":
            heads, total, dc, dr, kv_b = H, b * context, dc // tp, dr // tp, kv_b / tp
        else:
            heads, total = max(H // tp * layout.dcp, padded_heads or 0), ceil(b * context / layout.dcp)
        return CoreCost(cost.absorbed_core_bytes(b, heads, total, kv_b, dc, dr, q_len, ACT_BYTES),
                        cost.absorbed_core_flops(heads, total, dc, dr, q_len))

    def prefill_core(self, spec, layout, kv_dtype: str, chunk: int, prefix: int) -> CoreCost:
        """Causal scores over sum_i (P + i) = c*P + c(c+1)/2 key positions in the naive form, plus the K/V
        up-projection of all P + c cached latents, 2 (P + c) d_c H_t (d_n + d_v) FLOPs; bytes: the latent
        read and written, and the materialised K/V (docs/step-model.md section 2, attn.prefill)."""
        c, P = chunk, prefix
        heads = spec.num_attention_heads // layout.tp
        pairs = c * P + c * (c + 1) / 2
        kv_b = self.latent_bytes(spec, kv_dtype)
        flops = cost.naive_core_flops(heads, pairs, self.qk_head_dim(spec), spec.v_head_dim)
        flops += 2.0 * (P + c) * spec.kv_lora_rank * heads * (spec.qk_nope_head_dim + spec.v_head_dim)
        kv_mat = (P + c) * heads * (self.qk_head_dim(spec) + spec.v_head_dim) * ACT_BYTES
        return CoreCost((P + c) * kv_b + c * kv_b + kv_mat, flops)

    def per_head_bytes_per_token_layer(self, spec, kv_dtype: str) -> float:
        """The MHA-style cache MLA avoids: H x (d_qk + d_v) x bytes (DeepSeek-V2 paper section 2.1)."""
        return spec.num_attention_heads * (self.qk_head_dim(spec) + spec.v_head_dim) * element_bytes(kv_dtype)
