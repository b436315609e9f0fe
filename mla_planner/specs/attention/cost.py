"""FLOPs and bytes of one attention call on one rank, for one layer: MLA's weight-absorbed decode core, and the
naive per-head form (MLA prefill, GQA) that the attention kinds price with.

These are the *same* functions the step-time model uses to predict attention time and
`verify` uses to turn a measured time into achieved GB/s and FLOP/s, so prediction and
measurement cannot drift apart.

Source: FlashMLA's test formulas (deepseek-ai/FlashMLA `tests/test_flash_mla*.py`):
FLOPs = b * h_q * s_q * (2 * d * s_k + 2 * s_k * dv) and bytes = Q + KV + O with
d = kv_lora_rank + rope_dim = 576, dv = kv_lora_rank = 512, h_kv = 1;
also deepseek-ai/FlashMLA docs/20250422-new-kernel-deep-dive.md.
"""

from __future__ import annotations


def absorbed_core_flops(heads_per_rank: int, context_tokens_total: int, kv_lora_rank: int = 512,
                        rope_dim: int = 64, q_len: int = 1) -> float:
    """Tensor-core FLOPs of the weight-absorbed (MQA-form) attention core.

    Counts QK^T over the 576-wide latent+rope key and P.V over the 512-wide latent:
    2 * H_t * s_q * sum(T_b) * (d_c + d_r) + 2 * H_t * s_q * sum(T_b) * d_c
    (= 2176 * H_t * sum(T_b) for DeepSeek dims). `context_tokens_total` is sum(T_b) over
    the batch, each T_b including the token being decoded. Source: FlashMLA's test formulas (above).
    """
    return 2.0 * heads_per_rank * q_len * context_tokens_total * (2 * kv_lora_rank + rope_dim)


def absorbed_core_bytes(batch: int, heads_per_rank: int, context_tokens_total: int,
                        kv_bytes_per_token_layer: float, kv_lora_rank: int = 512,
                        rope_dim: int = 64, q_len: int = 1, act_bytes: int = 2) -> float:
    """HBM bytes moved by the absorbed attention core on one rank for one layer.

    latent cache read (sum(T_b) * kv_bytes_per_token_layer; NOT divided by TP)
    + the new tokens' latents written (batch * s_q * kv_bytes_per_token_layer)
    + q_mqa read (batch * s_q * H_t * (d_c + d_r) * act_bytes)
    + o_lat written (batch * s_q * H_t * d_c * act_bytes).
    Source: FlashMLA test bytes = (total_seqlens*d + b*s_q*h_q*d + b*s_q*h_q*dv) * 2;
    docs/step-model.md section 2 (attn.core).
    """
    cache_read = context_tokens_total * kv_bytes_per_token_layer
    cache_write = batch * q_len * kv_bytes_per_token_layer
    q_read = batch * q_len * heads_per_rank * (kv_lora_rank + rope_dim) * act_bytes
    o_write = batch * q_len * heads_per_rank * kv_lora_rank * act_bytes
    return cache_read + cache_write + q_read + o_write


def naive_core_flops(heads_per_rank: int, context_tokens_total: int, qk_head_dim: int = 192,
                     v_head_dim: int = 128, q_len: int = 1) -> float:
    """FLOPs of attention over a per-head K/V cache (naive/MHA form, no recompute).

    2 * H_t * s_q * sum(T_b) * (d_qk + d_v) = 640 * H_t * sum(T_b) for DeepSeek dims.
    Source: DeepSeek-V3 inference/model.py naive mode (per-head K/V cache).
    """
    return 2.0 * heads_per_rank * q_len * context_tokens_total * (qk_head_dim + v_head_dim)
