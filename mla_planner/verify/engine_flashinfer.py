"""FlashInfer's trtllm-gen MLA decode kernel behind verify's kernel contract (bench.KernelBuild), called as vLLM's
FLASHINFER_MLA backend calls it (vllm/v1/attention/backends/mla/flashinfer_mla.py `forward_mqa`, vLLM 0.33.0) and
SGLang's trtllm_mla backend: `flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla` with the query
[B, 1, H, 576], the cache [num_blocks, 1, block_size, 576], a 128 MiB int8 workspace, bmm1_scale = softmax scale
(x q_scale x k_scale for an fp8 cache, the query then in e4m3) and bmm2_scale = 1 (k_scale for fp8). It returns
the output [B, 1, H, 512] and no lse. Importable or not is decided here, at import; nothing here runs on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch

from mla_planner.verify.bench import DecodeInputs
from mla_planner.verify.kv_storage import FP8

try:
    from flashinfer.decode import trtllm_batch_decode_with_kv_cache_mla as TRTLLM_MLA
except Exception:  # noqa: BLE001 - ImportError, or a FlashInfer that fails to load here
    TRTLLM_MLA = None

WORKSPACE_BYTES = 128 * 2**20     # vLLM's FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE


def trtllm_build(qk_nope_head_dim: int) -> Callable:
    """KernelBuild for a bf16 or fp8 cache (the model's qk_nope_head_dim is the kernel's argument)."""
    def build(inp: DecodeInputs, scale: float) -> Callable[[], tuple]:
        fp8 = inp.kv.kind == "fp8"
        q = (inp.q.float() / inp.q_scale).to(FP8) if fp8 else inp.q
        q, kv = q.unsqueeze(1), inp.kv.cache.unsqueeze(1)
        workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.int8, device=inp.q.device)
        bmm1 = scale * (inp.q_scale * inp.kv.k_scale if fp8 else 1.0)
        bmm2 = inp.kv.k_scale if fp8 else 1.0
        max_len = int(inp.seqlens.max())
        batch, heads = inp.q.shape[:2]

        def run() -> tuple:
            out = TRTLLM_MLA(query=q, kv_cache=kv, workspace_buffer=workspace, qk_nope_head_dim=qk_nope_head_dim,
                             kv_lora_rank=512, qk_rope_head_dim=64, block_tables=inp.block_table,
                             seq_lens=inp.seqlens, max_seq_len=max_len, bmm1_scale=bmm1, bmm2_scale=bmm2)
            return out.reshape(batch, heads, -1), None
        return run
    return build


def kernel(qk_nope_head_dim: int) -> tuple[Optional[Callable], str, str]:
    """(KernelBuild or None, what runs, why not)."""
    if TRTLLM_MLA is None:
        return None, "", "flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla is not importable"
    return trtllm_build(qk_nope_head_dim), "FlashInfer trtllm-gen MLA (flashinfer.decode)", ""
