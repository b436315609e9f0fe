"""The plan's latent cache as the engine stores it, for the attention check to time and check the plan's own
reads: unquantised rows (`bf16`; float32 in a CPU rehearsal), plain fp8 rows (`fp8`: 576 float8_e4m3fn values
per token with one per-tensor scale, as vLLM's FLASHMLA and FLASHINFER_MLA keep them, `layer._k_scale`) or
FlashMLA's `fp8_ds_mla` rows for sparse models (656 bytes per token: the 512 latent values in e4m3, 4 float32
scales, one per 128 of them, then the 64 RoPE values in bf16, unquantised; FlashMLA README "FP8 KV cache
format", vLLM `_canonicalize_sparse_mla_kv_cache_dtype`).

Scales are powers of two, the smallest at or above amax / 448 (448: e4m3's largest finite value), so
dequantising (value x scale) is exact in bf16, fp32 and fp64: the naive reference sees exactly the values the
kernel reads, and a kernel that drops the scale is off by that factor (the output check catches it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

E4M3_MAX = 448.0
FP8 = torch.float8_e4m3fn
DS_MLA_TILE = 128              # latent values per float32 scale in an fp8_ds_mla row
DS_MLA_LATENT = 512            # the quantised part of the row; the rest is RoPE in bf16
KINDS = ("bf16", "fp8", "fp8_ds_mla")


def pow2_scale(amax: Tensor) -> Tensor:
    """The power of two at or above amax / 448 (1 where amax is 0), elementwise, float32."""
    amax = amax.float()
    safe = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return torch.exp2(torch.ceil(torch.log2(safe)))


def quantize_fp8(x: Tensor) -> tuple[Tensor, float]:
    """(x / scale as float8_e4m3fn, the per-tensor power-of-two scale)."""
    scale = float(pow2_scale(x.detach().abs().max()))
    return (x.float() / scale).to(FP8), scale


def on_fp8_grid(x: Tensor) -> tuple[Tensor, float]:
    """x rounded to the e4m3 grid of its own per-tensor scale, in x's dtype, and that scale: the values an fp8
    kernel reads once the engine quantises x (the engines quantise the decode query this way with q_scale)."""
    q8, scale = quantize_fp8(x)
    return (q8.float() * scale).to(x.dtype), scale


def pack_ds_mla(rows: Tensor) -> Tensor:
    """fp8_ds_mla rows: uint8 [..., 656] from rows [..., 576] (latent 512 + RoPE 64)."""
    latent, rope = rows[..., :DS_MLA_LATENT].float(), rows[..., DS_MLA_LATENT:]
    tiles = latent.unflatten(-1, (-1, DS_MLA_TILE))                                   # [..., 4, 128]
    scales = pow2_scale(tiles.abs().amax(-1))                                          # [..., 4]
    values = (tiles / scales[..., None]).to(FP8).flatten(-2)                          # [..., 512]
    parts = (values.view(torch.uint8), scales.contiguous().view(torch.uint8),
             rope.to(torch.bfloat16).contiguous().view(torch.uint8))
    return torch.cat(parts, -1)


def unpack_ds_mla(packed: Tensor, dtype: torch.dtype) -> Tensor:
    """Rows [..., 576] in `dtype` from fp8_ds_mla rows uint8 [..., 656]."""
    n_scales = DS_MLA_LATENT // DS_MLA_TILE
    values = packed[..., :DS_MLA_LATENT].contiguous().view(FP8).to(dtype)
    scales = packed[..., DS_MLA_LATENT:DS_MLA_LATENT + 4 * n_scales].contiguous().view(torch.float32).to(dtype)
    rope = packed[..., DS_MLA_LATENT + 4 * n_scales:].contiguous().view(torch.bfloat16).to(dtype)
    latent = (values.unflatten(-1, (n_scales, DS_MLA_TILE)) * scales[..., None]).flatten(-2)
    return torch.cat([latent, rope], -1)


@dataclass(frozen=True)
class StoredKV:
    """A paged cache [num_blocks, block_size, row] as stored: `kind` (bf16: the work dtype itself), the tensor,
    and the per-tensor scale of an `fp8` cache (1 otherwise)."""
    kind: str
    cache: Tensor
    k_scale: float = 1.0

    @property
    def row_bytes(self) -> int:
        """Bytes one token's row takes as stored (576 x 2 for bf16, 576 for fp8, 656 for fp8_ds_mla)."""
        return self.cache.shape[-1] * self.cache.element_size()

    def dequantized(self, dtype: torch.dtype) -> Tensor:
        """The rows as values of `dtype` (exact for fp8 kinds: power-of-two scales)."""
        if self.kind == "fp8":
            return self.cache.to(dtype) * self.k_scale
        if self.kind == "fp8_ds_mla":
            return unpack_ds_mla(self.cache, dtype)
        return self.cache.to(dtype)

    def text(self) -> str:
        """'float8_e4m3fn cache (per-tensor scale 2^-10)' and the like, for the check's detail."""
        if self.kind == "fp8":
            return f"float8_e4m3fn cache (per-tensor scale 2^{int(math.log2(self.k_scale))})"
        if self.kind == "fp8_ds_mla":
            return "fp8_ds_mla cache (656-B rows: e4m3 latent, a float32 scale per 128 values, bf16 RoPE)"
        return f"{str(self.cache.dtype).removeprefix('torch.')} cache"


def store(rows: Tensor, kind: str) -> StoredKV:
    """Paged rows [num_blocks, block_size, 576] in the work dtype, stored as `kind` (bf16: as they are)."""
    if kind not in KINDS:
        raise ValueError(f"unknown KV storage {kind!r}; one of {KINDS}")
    if kind == "fp8":
        cache, scale = quantize_fp8(rows)
        return StoredKV(kind, cache, scale)
    if kind == "fp8_ds_mla":
        return StoredKV(kind, pack_ds_mla(rows))
    return StoredKV(kind, rows)
