"""FlashAttention-3's MLA decode (the query split into its RoPE part as Q and its latent part as `qv`) behind
verify's kernel contract (bench.KernelBuild), called as the engines call it:
- vLLM 0.33.0's FLASH_ATTN_MLA (vllm/v1/attention/backends/mla/flashattn_mla.py `forward_mqa`; bf16 only: vLLM
  raises for an fp8 cache): `vllm.vllm_flash_attn.flash_attn_varlen_func(q=q_pe, k=k_pe_cache[..., None, :],
  v=kv_c_cache[..., None, :], q_v=q_nope, max_seqlen_q=1, cu_seqlens_q, max_seqlen_k, seqused_k, block_table,
  softmax_scale, causal=True, fa_version=3, scheduler_metadata, num_splits)`, the scheduler metadata from
  `get_scheduler_metadata` as its builder makes it (`_schedule_decode`), and `num_splits` its CUDA-graph bound
  (`flash_attn_max_num_splits_for_cuda_graph`, 32, under the default full-graph decode) or 0 in eager mode;
- SGLang 0.5.23's fa3 (srt/layers/attention/flashattention_backend.py `forward_decode`, MLA branch):
  `sglang.kernels.ops.attention.flash_attention.flash_attn_with_kvcache(q=q_rope, k_cache=k_rope_cache,
  v_cache=c_kv_cache, qv=q_nope, page_table, cache_seqlens, cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q=1,
  softmax_scale, causal=True, softcap=0.0, k_descale=None, v_descale=None, return_softmax_lse=False, num_splits=0,
  ver=3)`. SGLang reads the cache as `get_key_buffer(...).to(q.dtype)`: an fp8 cache is cast to bf16 inside every
  call (timed so here). SGLang's MLA pool stores fp8 unscaled; verify's fp8 cache carries a power-of-two scale,
  so the scale is folded exactly into the softmax scale and the output (one multiply of the [B, H, 512] output).
Neither returns an lse here (SGLang never does on this path; vLLM only under DCP): the output alone is checked.
Importable or not is decided here, at import; nothing here runs on a CPU (the tests hand the builds stand-ins with
the same signatures).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch

from mla_planner.verify.bench import DecodeInputs

try:
    from vllm.vllm_flash_attn import flash_attn_varlen_func as VLLM_VARLEN, get_scheduler_metadata as VLLM_SCHEDULE
except Exception:  # noqa: BLE001 - ImportError, or a vLLM built without its FA3 extension
    VLLM_VARLEN = VLLM_SCHEDULE = None
try:
    from sglang.kernels.ops.attention.flash_attention import flash_attn_with_kvcache as SGL_WITH_KVCACHE
except Exception:  # noqa: BLE001
    SGL_WITH_KVCACHE = None

VLLM_GRAPH_SPLITS = 32      # vLLM AttentionConfig.flash_attn_max_num_splits_for_cuda_graph (default)
LATENT = 512                # verify's decode problem: 512 latent values (also V) + 64 RoPE (bench.random_decode_inputs)


def _parts(inp: DecodeInputs) -> tuple:
    """(q_nope, q_pe, the latent cache [nb, bs, 1, 512], the RoPE cache [nb, bs, 1, 64], cu_seqlens_q [B + 1])."""
    cache = inp.kv.cache.unsqueeze(-2)
    cu_q = torch.arange(inp.q.shape[0] + 1, dtype=torch.int32, device=inp.q.device)
    return (inp.q[..., :LATENT], inp.q[..., LATENT:], cache[..., :LATENT],
            cache[..., LATENT:], cu_q)


def vllm_build(varlen: Callable, schedule: Callable, graphs: bool) -> Callable:
    """KernelBuild for vLLM's FLASH_ATTN_MLA (a bf16 cache)."""
    def build(inp: DecodeInputs, scale: float) -> Callable[[], tuple]:
        q_nope, q_pe, kv_c, k_pe, cu_q = _parts(inp)
        max_len, splits = int(inp.seqlens.max()), VLLM_GRAPH_SPLITS if graphs else 0
        meta = schedule(batch_size=inp.q.shape[0], max_seqlen_q=1, max_seqlen_k=max_len,
                        num_heads_q=inp.q.shape[1], num_heads_kv=1, headdim=q_pe.shape[-1],
                        cache_seqlens=inp.seqlens, qkv_dtype=inp.kv.cache.dtype, headdim_v=LATENT,
                        page_size=inp.kv.cache.shape[1], cu_seqlens_q=cu_q, causal=True, num_splits=splits)

        def run() -> tuple:
            out = varlen(q=q_pe, k=k_pe, v=kv_c, q_v=q_nope, max_seqlen_q=1, cu_seqlens_q=cu_q, max_seqlen_k=max_len,
                         seqused_k=inp.seqlens, block_table=inp.block_table, softmax_scale=scale, causal=True,
                         return_softmax_lse=False, fa_version=3, scheduler_metadata=meta, num_splits=splits)
            return out, None
        return run
    return build


def sglang_build(with_kvcache: Callable) -> Callable:
    """KernelBuild for SGLang's fa3 (a bf16 cache, or an fp8 one cast to the query's dtype in the call)."""
    def build(inp: DecodeInputs, scale: float) -> Callable[[], tuple]:
        q_nope, q_pe, _, _, cu_q = _parts(inp)
        cu_k = torch.nn.functional.pad(torch.cumsum(inp.seqlens, 0, dtype=torch.int32), (1, 0))
        k_scale = inp.kv.k_scale if inp.kv.kind == "fp8" else 1.0

        def run() -> tuple:
            cache = inp.kv.cache.to(inp.q.dtype).unsqueeze(-2)       # SGLang: get_key_buffer(...).to(q.dtype)
            out = with_kvcache(q=q_pe, k_cache=cache[..., LATENT:], v_cache=cache[..., :LATENT],
                               qv=q_nope, page_table=inp.block_table, cache_seqlens=inp.seqlens, cu_seqlens_q=cu_q,
                               cu_seqlens_k_new=cu_k, max_seqlen_q=1, softmax_scale=scale * k_scale, causal=True,
                               softcap=0.0, k_descale=None, v_descale=None, return_softmax_lse=False, num_splits=0,
                               ver=3)
            return (out * k_scale if k_scale != 1.0 else out), None
        return run
    return build


def kernel(engine: str, kv_kind: str, graphs: bool) -> tuple[Optional[Callable], str, str]:
    """(KernelBuild or None, what runs, why not) for vLLM's FLASH_ATTN_MLA or SGLang's fa3."""
    if engine == "vllm":
        if kv_kind != "bf16":
            return None, "", "vLLM's FLASH_ATTN_MLA has no fp8 cache path (it raises NotImplementedError)"
        if VLLM_VARLEN is None:
            return None, "", "vllm.vllm_flash_attn (FlashAttention-3) is not importable"
        return vllm_build(VLLM_VARLEN, VLLM_SCHEDULE, graphs), \
            "FlashAttention-3 MLA decode (vllm.vllm_flash_attn)", ""
    if SGL_WITH_KVCACHE is None:
        return None, "", "sglang.kernels.ops.attention.flash_attention is not importable"
    return sglang_build(SGL_WITH_KVCACHE), \
        "FlashAttention-3 MLA decode (sglang.kernels.ops.attention.flash_attention)", ""
