"""vLLM's TRITON_MLA decode kernel behind verify's kernel contract (bench.KernelBuild), called as vLLM 0.33.0's
TRITON_MLA backend calls it (vllm/v1/attention/backends/mla/triton_mla.py `forward_mqa`):
`vllm.v1.attention.ops.triton_decode_attention.decode_attention_fwd(q, kv_c_and_k_pe_cache, kv_c_cache, o, lse,
block_table, seq_lens, attn_logits, num_kv_splits, scale, page_size, k_scale=, v_scale=, is_mla=True)` with the
query [B, H, 576] in the work dtype, the cache [num_blocks, block_size, 1, 576] and its first 512 columns as V,
the split scratch [B, H, splits, 513] fp32 and `num_kv_splits` as vLLM sizes it (`_compute_num_kv_splits`: the next
power of two of max_seq_len / 512, at most twice the SMs). An fp8 cache stays fp8: the kernel dequantises each tile
with the layer's k scale (vLLM keeps the query in bf16 there, `supports_quant_query_input = False`), so the check's
class is bf16. vLLM allocates the lse in the query's dtype; here it is fp32 (the kernel stores its fp32 value
either way), so the output check reads it unrounded. Importable or not is decided here, at import; nothing here
runs on a CPU (the tests hand the build a stand-in with the same signature).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch

from mla_planner.verify.bench import DecodeInputs

try:
    from vllm.v1.attention.ops.triton_decode_attention import decode_attention_fwd as DECODE_ATTENTION_FWD
except Exception:  # noqa: BLE001 - ImportError, or a vLLM that fails to load on this machine
    DECODE_ATTENTION_FWD = None

MIN_WORK_PER_SPLIT, SPLIT_OCCUPANCY = 512, 2       # triton_mla.py _MIN_WORK_PER_SPLIT, _SPLIT_OCCUPANCY_MULTIPLIER
LATENT = 512        # verify's decode problem: 512 latent values (also V) + 64 RoPE (bench.random_decode_inputs)


def num_kv_splits(max_seq_len: int, sm_count: int) -> int:
    """vLLM's `_compute_num_kv_splits`: next_power_of_2(max(1, max_seq_len // 512)), at most 2 x the SMs."""
    ideal = max(1, max_seq_len // MIN_WORK_PER_SPLIT)
    return min(1 << (ideal - 1).bit_length(), sm_count * SPLIT_OCCUPANCY)


def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def triton_build(fn: Callable) -> Callable:
    """KernelBuild for a bf16 or fp8 cache through `fn` (decode_attention_fwd's signature)."""
    def build(inp: DecodeInputs, scale: float) -> Callable[[], tuple]:
        (batch, heads), device = inp.q.shape[:2], inp.q.device
        kv = inp.kv.cache.unsqueeze(2)                                # [num_blocks, block_size, 1, 576]
        splits = num_kv_splits(int(inp.seqlens.max()), _sm_count(device))
        o = torch.zeros(batch, heads, LATENT, dtype=inp.q.dtype, device=device)
        lse = torch.zeros(batch, heads, dtype=torch.float32, device=device)
        logits = torch.empty(batch, heads, splits, LATENT + 1, dtype=torch.float32, device=device)
        k_scale = torch.tensor(inp.kv.k_scale, dtype=torch.float32, device=device)   # layer._k_scale

        def run() -> tuple:
            fn(inp.q, kv, kv[..., :LATENT], o, lse, inp.block_table, inp.seqlens, logits, splits, scale,
               kv.shape[1], k_scale=k_scale, v_scale=k_scale, is_mla=True)
            return o, lse
        return run
    return build


def kernel() -> tuple[Optional[Callable], str, str]:
    """(KernelBuild or None, what runs, why not)."""
    if DECODE_ATTENTION_FWD is None:
        return None, "", "vllm.v1.attention.ops.triton_decode_attention is not importable"
    return triton_build(DECODE_ATTENTION_FWD), \
        "vLLM's Triton MLA decode (vllm.v1.attention.ops.triton_decode_attention)", ""
