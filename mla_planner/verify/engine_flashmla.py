"""FlashMLA's dense decode kernel behind verify's kernel contract (bench.KernelBuild), called as the engines call it.

Where it comes from, in order of preference:
- vLLM plans: vLLM's own build, `vllm.v1.attention.ops.flashmla` (vLLM 0.33.0; its FLASHMLA backend,
  vllm/v1/attention/backends/mla/flashmla.py `_forward_decode`): bf16 through `get_mla_metadata` /
  `flash_mla_with_kvcache`, an fp8 cache through `get_mla_metadata_dense_fp8` / `flash_mla_with_kvcache_fp8` with
  the query in e4m3 and `descale_q` / `descale_k` (the layer's q and k scales, [1] float32 tensors);
- SGLang plans: SGLang 0.5.23's own wrapper, `sglang.kernels.ops.attention.flash_mla_interface` (the ops
  sgl-kernel used to ship, over the `sgl-flash-mla` wheel; `use_legacy=True` by default, the SM90 dense decode
  side), as its flashmla backend calls it (srt/layers/attention/flashmla_backend.py `forward_decode`): bf16, and an
  fp8 cache with `get_mla_metadata(..., is_fp8_kvcache=True)`, the query quantised to e4m3 and
  `descale_q` / `descale_k`. SGLang quantises the query with the layer's k scale (1 without a checkpoint scale) and
  passes it as both descales; verify's query carries its own power-of-two scale, passed as `descale_q` (the kernel
  computes q x descale_q either way). Then SGLang's older `sgl_kernel.flash_mla` (bf16);
- then the upstream `flash_mla` package (deepseek-ai/FlashMLA; bf16).
The cache is [num_blocks, 64, 1, 576] (one KV head), the query [B, 1, H, 576] (one decode token); the outputs
[B, 1, H, 512] and lse [B, H, 1]. The bf16 call is fast.flash_mla_core's. Scheduling metadata is built outside the
timed call, as the engines build it once per step. What is importable is decided here, at import; nothing here
runs on a CPU (the tests hand these builds stand-in ops with the same signatures).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch

from mla_planner.verify.bench import DecodeInputs
from mla_planner.verify.fast import flash_mla_core
from mla_planner.verify.kv_storage import FP8

try:   # vLLM's FlashMLA ops (raises on import where vLLM is absent or built without them)
    from vllm.v1.attention.ops import flashmla as VLLM_OPS
except Exception:  # noqa: BLE001 - ImportError, or a vLLM that fails to load on this machine
    VLLM_OPS = None
try:   # SGLang 0.5.23's wrapper over sgl-flash-mla
    from sglang.kernels.ops.attention import flash_mla_interface as SGL_WRAPPER
except Exception:  # noqa: BLE001
    SGL_WRAPPER = None
try:   # older SGLang releases
    from sgl_kernel import flash_mla as SGL_OPS
except Exception:  # noqa: BLE001
    SGL_OPS = None
try:
    import flash_mla as UPSTREAM_OPS
except Exception:  # noqa: BLE001
    UPSTREAM_OPS = None

VLLM_NAME, SGL_WRAPPER_NAME = "vllm.v1.attention.ops.flashmla", "sglang.kernels.ops.attention.flash_mla_interface"


def _vllm_usable() -> tuple[bool, str]:
    if VLLM_OPS is None:
        return False, f"{VLLM_NAME} is not importable"
    ok, why = VLLM_OPS.is_flashmla_dense_supported()
    return bool(ok), why or ""


def library(engine: str, kv_kind: str) -> tuple[Optional[object], str, str]:
    """(the ops module to call or None, its name, why none): the plan's engine's own build first, then the
    others as the module docstring orders them; an fp8 cache only through the engine's own fp8 path."""
    vllm_ok, vllm_why = _vllm_usable()
    if kv_kind == "fp8":
        if engine == "vllm":
            return (VLLM_OPS, f"{VLLM_NAME} (dense fp8)", "") if vllm_ok else \
                (None, "", f"FlashMLA's dense fp8 kernel is vLLM's own ({vllm_why})")
        return (SGL_WRAPPER, f"{SGL_WRAPPER_NAME} (fp8)", "") if SGL_WRAPPER is not None else \
            (None, "", f"SGLang's fp8 FlashMLA path is its own wrapper ({SGL_WRAPPER_NAME} is not importable)")
    candidates = ([(VLLM_OPS if vllm_ok else None, VLLM_NAME)] if engine == "vllm" else
                  [(SGL_WRAPPER, SGL_WRAPPER_NAME), (SGL_OPS, "sgl_kernel.flash_mla")]) + [(UPSTREAM_OPS, "flash_mla")]
    for ops, name in candidates:
        if ops is not None:
            return ops, name, ""
    return None, "", f"no FlashMLA build is importable ({', '.join(name for _, name in candidates)})"


def bf16_build(ops) -> Callable:
    """KernelBuild for a bf16 cache through `ops` (any of the builds: the same call, fast.flash_mla_core)."""
    def build(inp: DecodeInputs, scale: float) -> Callable[[], tuple]:
        core = flash_mla_core(ops, inp.seqlens, inp.q.shape[1])
        return lambda: core(inp.q, inp.kv.cache, inp.block_table, inp.seqlens, scale)
    return build


def _fp8_parts(inp: DecodeInputs) -> tuple:
    """The query in e4m3 at its scale (lossless: bench.decode_inputs put it on that grid), the cache with its KV-head
    axis, and the two descale tensors."""
    device = inp.q.device
    q = (inp.q.float() / inp.q_scale).to(FP8).unsqueeze(1)
    descale_q = torch.tensor([inp.q_scale], dtype=torch.float32, device=device)
    descale_k = torch.tensor([inp.kv.k_scale], dtype=torch.float32, device=device)
    return q, inp.kv.cache.unsqueeze(2), descale_q, descale_k


def vllm_fp8_build(ops) -> Callable:
    """KernelBuild for an fp8 cache through vLLM's dense fp8 kernel."""
    def build(inp: DecodeInputs, scale: float) -> Callable[[], tuple]:
        meta, splits = ops.get_mla_metadata_dense_fp8(inp.seqlens, inp.q.shape[1], 1)
        q, k_cache, descale_q, descale_k = _fp8_parts(inp)

        def run() -> tuple:
            out, lse = ops.flash_mla_with_kvcache_fp8(q, k_cache, inp.block_table, inp.seqlens, 512, meta, splits,
                                                      softmax_scale=scale, causal=True, descale_q=descale_q,
                                                      descale_k=descale_k)
            return out.squeeze(1), lse.squeeze(-1)
        return run
    return build


def sglang_fp8_build(wrapper) -> Callable:
    """KernelBuild for an fp8 cache through SGLang's wrapper, as its flashmla backend's fp8 branch calls it."""
    def build(inp: DecodeInputs, scale: float) -> Callable[[], tuple]:
        meta, splits = wrapper.get_mla_metadata(inp.seqlens, inp.q.shape[1], 1, is_fp8_kvcache=True)
        q, k_cache, descale_q, descale_k = _fp8_parts(inp)

        def run() -> tuple:
            out, lse = wrapper.flash_mla_with_kvcache(q=q, k_cache=k_cache, block_table=inp.block_table,
                                                      cache_seqlens=inp.seqlens, head_dim_v=512,
                                                      tile_scheduler_metadata=meta, num_splits=splits,
                                                      softmax_scale=scale, causal=True, descale_q=descale_q,
                                                      descale_k=descale_k)
            return out.squeeze(1), lse.squeeze(-1)
        return run
    return build


def kernel(engine: str, kv_kind: str) -> tuple[Optional[Callable], str, str]:
    """(KernelBuild or None, what runs, why not)."""
    ops, name, why = library(engine, kv_kind)
    if ops is None:
        return None, "", why
    if kv_kind == "fp8":
        return (vllm_fp8_build(ops) if engine == "vllm" else sglang_fp8_build(ops)), f"FlashMLA ({name})", ""
    return bf16_build(ops), f"FlashMLA ({name})", ""
