"""GPU fast path for the absorbed MLA attention core: a split-K (flash-decoding) Triton kernel
that reads the paged latent cache in place, plus FlashMLA's dense decode behind the same contract
(`flash_mla_core`, the one wrapper of that call: the engine adapter and the benchmarks use it).

Same contract as `kernel.absorbed_core`: q_mqa [B, H, d_c + d_r], cache [num_blocks, bs,
d_c + d_r], int32 block_table [B, max_blocks] and seqlens [B] -> o_lat [B, H, d_c] in q's
dtype and lse [B, H] fp32 (natural log; +inf and o_lat = 0 where T_b = 0, as FlashMLA).

Kernel layout (FlashMLA `flash_mla_with_kvcache` contract, docs/20250422-new-kernel-deep-dive.md):
- stage 1, grid (head blocks, splits, B): one program takes BLOCK_H heads of one sequence and
  one contiguous range of its tokens. Each BLOCK_N-token tile of the latent is loaded once
  for all BLOCK_H heads (MQA form: one shared 576-wide KV head); scores use the 512 + 64
  split q_c.k_c + q_r.k_r and the same 512-wide tile is V. Online softmax in fp32 (exp2).
  Block ids are fetched one tile ahead so Triton's pipeliner can double-buffer KV tiles
  (cp.async); no gathered copy of the cache is ever made.
- stage 2, grid (H, B): combines the per-split (o, lse) partials with lse weights.
  With one split, stage 1 writes the final o_lat and lse directly.
Without CUDA or without Triton, `absorbed_core_fast` falls back to `kernel.absorbed_core`.
"""

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from mla_planner.verify.kernel import absorbed_core

try:  # CPU-only torch wheels ship without Triton
    import triton
    import triton.language as tl
except ImportError:
    triton = None


if triton is not None:

    @triton.jit
    def _load_rows(row_ptr, row_mask, offs, D: tl.constexpr, BLOCK: tl.constexpr):
        """Tile [rows, BLOCK] of row_ptr[:, None] + offs; columns >= D and masked rows read 0."""
        mask = row_mask[:, None]
        if D != BLOCK:
            mask = mask & (offs < D)[None, :]
        return tl.load(row_ptr[:, None] + offs[None, :], mask=mask, other=0.0)

    @triton.jit
    def _tile_block_ids(table_row, t0, end, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
        """block_table entries of the tile of tokens [t0, t0 + BLOCK_N) (int64; 0 past `end`).

        Tiles start at multiples of BLOCK_N, so when PAGE % BLOCK_N == 0 a tile sits inside
        one page: one scalar id. Otherwise one id per token.
        """
        if PAGE % BLOCK_N == 0:
            ids = tl.load(table_row + t0 // PAGE, mask=t0 < end, other=0)
        else:
            offs_n = t0 + tl.arange(0, BLOCK_N)
            ids = tl.load(table_row + offs_n // PAGE, mask=offs_n < end, other=0)
        return ids.to(tl.int64)

    @triton.jit
    def _tile_rows(kv_ptr, ids, t0, stride_kvb, stride_kvt, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
        """Cache row pointers [BLOCK_N] of the tile at t0: slot = id * PAGE + t % PAGE."""
        offs = tl.arange(0, BLOCK_N)
        if PAGE % BLOCK_N == 0:
            rows = kv_ptr + ids * stride_kvb + (t0 % PAGE + offs) * stride_kvt
        else:
            rows = kv_ptr + ids * stride_kvb + ((t0 + offs) % PAGE) * stride_kvt
        return rows

    @triton.jit
    def _mla_split_kernel(
        q_ptr, kv_ptr, table_ptr, seqlens_ptr, o_ptr, lse_ptr,
        scale_log2, heads, num_splits,
        stride_qb, stride_qh, stride_kvb, stride_kvt, stride_tb,
        stride_ob, stride_oh, stride_os, stride_lb, stride_lh, stride_ls,
        D_C: tl.constexpr, D_R: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr,
        PAGE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr,
        DIRECT: tl.constexpr, DOT_PRECISION: tl.constexpr,
    ):
        hb, split, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        seqlen = tl.load(seqlens_ptr + b)
        tiles_per_split = tl.cdiv(tl.cdiv(seqlen, BLOCK_N), num_splits)
        start = split * tiles_per_split * BLOCK_N
        end = tl.minimum(start + tiles_per_split * BLOCK_N, seqlen)

        offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
        offs_c, offs_r = tl.arange(0, BLOCK_C), tl.arange(0, BLOCK_R)
        h_mask = offs_h < heads
        q_row = q_ptr + b * stride_qb + offs_h * stride_qh
        q_c = _load_rows(q_row, h_mask, offs_c, D_C, BLOCK_C)                     # [BH, BC]
        q_r = _load_rows(q_row + D_C, h_mask, offs_r, D_R, BLOCK_R)               # [BH, BR]

        m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_C], tl.float32)
        table_row = table_ptr + b * stride_tb
        ids_next = _tile_block_ids(table_row, start, end, PAGE, BLOCK_N)
        for n0 in range(start, end, BLOCK_N):
            # block ids are fetched one tile ahead: a KV address that depends on a load in the
            # same iteration stops Triton's pipeliner from multi-buffering the KV tiles
            ids = ids_next
            ids_next = _tile_block_ids(table_row, n0 + BLOCK_N, end, PAGE, BLOCK_N)
            offs_n = n0 + tl.arange(0, BLOCK_N)
            n_mask = offs_n < end
            tok = _tile_rows(kv_ptr, ids, n0, stride_kvb, stride_kvt, PAGE, BLOCK_N)   # [BN] row pointers
            k_c = _load_rows(tok, n_mask, offs_c, D_C, BLOCK_C)                   # [BN, BC], also V
            k_r = _load_rows(tok + D_C, n_mask, offs_r, D_R, BLOCK_R)             # [BN, BR]
            s = tl.dot(q_c, tl.trans(k_c), input_precision=DOT_PRECISION)
            s = tl.dot(q_r, tl.trans(k_r), acc=s, input_precision=DOT_PRECISION)  # [BH, BN] fp32
            s = tl.where(n_mask[None, :], s * scale_log2, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = tl.dot(p.to(k_c.dtype), k_c, acc=acc * alpha[:, None], input_precision=DOT_PRECISION)
            m_i = m_new

        full = l_i > 0
        o = acc / tl.where(full, l_i, 1.0)[:, None]
        lse2 = tl.where(full, m_i + tl.log2(tl.where(full, l_i, 1.0)), float("-inf"))  # log2 units
        if DIRECT:
            lse2 = tl.where(full, lse2 * 0.6931471805599453, float("inf"))        # natural log
        o_row = o_ptr + b * stride_ob + offs_h * stride_oh + split * stride_os
        o_mask = h_mask[:, None]
        if D_C != BLOCK_C:
            o_mask = o_mask & (offs_c < D_C)[None, :]
        tl.store(o_row[:, None] + offs_c[None, :], o.to(o_ptr.dtype.element_ty), mask=o_mask)
        tl.store(lse_ptr + b * stride_lb + offs_h * stride_lh + split * stride_ls, lse2, mask=h_mask)

    @triton.jit
    def _mla_combine_kernel(
        o_part_ptr, lse_part_ptr, o_ptr, lse_ptr, num_splits,
        stride_pb, stride_ph, stride_ps, stride_lpb, stride_lph, stride_ob, stride_oh, stride_lb,
        D_C: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr,
    ):
        h, b = tl.program_id(0), tl.program_id(1)
        offs_s, offs_c = tl.arange(0, BLOCK_S), tl.arange(0, BLOCK_C)
        lse_row = lse_part_ptr + b * stride_lpb + h * stride_lph
        lse_s = tl.load(lse_row + offs_s, mask=offs_s < num_splits, other=float("-inf"))  # [BS] log2
        m = tl.max(lse_s, 0)
        m = tl.where(m == float("-inf"), 0.0, m)
        total = tl.sum(tl.exp2(lse_s - m), 0)
        acc = tl.zeros([BLOCK_C], tl.float32)
        o_row = o_part_ptr + b * stride_pb + h * stride_ph
        for s in range(num_splits):
            w = tl.exp2(tl.load(lse_row + s) - m)
            acc += w * tl.load(o_row + s * stride_ps + offs_c, mask=offs_c < D_C, other=0.0)
        o = acc / tl.where(total > 0, total, 1.0)
        lse = tl.where(total > 0, (m + tl.log2(tl.where(total > 0, total, 1.0))) * 0.6931471805599453,
                       float("inf"))
        tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_c, o.to(o_ptr.dtype.element_ty), mask=offs_c < D_C)
        tl.store(lse_ptr + b * stride_lb + h, lse)


def choose_num_splits(batch: int, head_blocks: int, max_tiles: int, sm_count: int,
                      programs_per_sm: int = 2, max_splits: int = 64) -> int:
    """Token splits per sequence so batch * head_blocks * splits fills ~programs_per_sm waves of SMs.

    Flash-decoding: with few sequences, split each one's context so every SM streams KV;
    never more splits than BLOCK_N tiles. B=64, 16 heads, 132 SMs -> 4; B=128 -> 2.
    """
    programs = max(batch * head_blocks, 1)
    return max(1, min(programs_per_sm * sm_count // programs, max_tiles, max_splits))


def _sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; 4 for the Triton CPU interpreter."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4


def _check_inputs(q_mqa: Tensor, cache: Tensor, block_table: Tensor, seqlens: Tensor, head_dim_v: int) -> None:
    if cache.dim() != 3 or cache.shape[-1] != q_mqa.shape[-1] or q_mqa.dim() != 3:
        raise ValueError(f"want q [B, H, D] and cache [blocks, bs, D], got {tuple(q_mqa.shape)}, {tuple(cache.shape)}")
    if q_mqa.dtype != cache.dtype or not 0 < head_dim_v < q_mqa.shape[-1]:
        raise ValueError(f"q and cache dtypes must match ({q_mqa.dtype}, {cache.dtype}) and 0 < d_v < D")
    if block_table.dtype != torch.int32 or seqlens.dtype != torch.int32:
        raise ValueError("block_table and seqlens must be int32")


@dataclass(frozen=True)
class TritonConfig:
    """Tile and launch settings of the split kernel (benchmarks/attention_bench.py --sweep).

    Default, from an sm_90a compile (Triton 3.9, ptxas -v; not yet timed on a GPU): a
    32 x 576 bf16 tile is 36 KiB; num_stages=3 gives two KV buffers (93 KiB shared, 127
    registers, no spills), so 2 programs fit per SM with 1-2 tiles each in flight.
    num_stages=2 leaves a single KV buffer, i.e. no overlap of load and compute.
    """

    block_n: int = 32      # tokens per tile (>= 16, power of two)
    block_h: int = 16      # heads per program (>= 16: the tl.dot minimum M)
    num_warps: int = 4
    num_stages: int = 3
    programs_per_sm: int = 2


def absorbed_core_triton(q_mqa: Tensor, cache: Tensor, block_table: Tensor, seqlens: Tensor, scale: float,
                         head_dim_v: int = 512, *, num_splits: int | None = None,
                         config: TritonConfig = TritonConfig()) -> tuple[Tensor, Tensor]:
    """Split-K Triton kernel for `kernel.absorbed_core` (CUDA, or CPU under TRITON_INTERPRET=1)."""
    if triton is None:
        raise RuntimeError("triton is not importable")
    if cache.dim() == 4:                                      # FlashMLA layout [blocks, bs, 1, D]
        cache = cache.flatten(2)
    _check_inputs(q_mqa, cache, block_table, seqlens, head_dim_v)
    q_mqa, cache, block_table = q_mqa.contiguous(), cache.contiguous(), block_table.contiguous()
    (B, H, D), page = q_mqa.shape, cache.shape[1]
    head_blocks = triton.cdiv(H, config.block_h)
    max_tiles = triton.cdiv(block_table.shape[1] * page, config.block_n)
    splits = num_splits or choose_num_splits(B, head_blocks, max_tiles, _sm_count(q_mqa.device),
                                             config.programs_per_sm)
    o_lat = q_mqa.new_empty(B, H, head_dim_v)
    lse = torch.empty(B, H, dtype=torch.float32, device=q_mqa.device)
    direct = splits == 1
    f32 = {"dtype": torch.float32, "device": q_mqa.device}
    o_dst = o_lat[:, :, None] if direct else torch.empty(B, H, splits, head_dim_v, **f32)   # [B, H, S, c]
    lse_dst = lse[:, :, None] if direct else torch.empty(B, H, splits, **f32)               # [B, H, S]
    _mla_split_kernel[(head_blocks, splits, B)](
        q_mqa, cache, block_table, seqlens, o_dst, lse_dst,
        scale * math.log2(math.e), H, splits,
        q_mqa.stride(0), q_mqa.stride(1), cache.stride(0), cache.stride(1), block_table.stride(0),
        o_dst.stride(0), o_dst.stride(1), o_dst.stride(2), lse_dst.stride(0), lse_dst.stride(1), lse_dst.stride(2),
        D_C=head_dim_v, D_R=D - head_dim_v, BLOCK_C=_pow2(head_dim_v), BLOCK_R=_pow2(D - head_dim_v),
        PAGE=page, BLOCK_N=config.block_n, BLOCK_H=config.block_h, DIRECT=direct,
        DOT_PRECISION="ieee" if q_mqa.dtype == torch.float32 else "tf32",
        num_warps=config.num_warps, num_stages=config.num_stages)
    if not direct:
        _mla_combine_kernel[(H, B)](
            o_dst, lse_dst, o_lat, lse, splits,
            o_dst.stride(0), o_dst.stride(1), o_dst.stride(2), lse_dst.stride(0), lse_dst.stride(1),
            o_lat.stride(0), o_lat.stride(1), lse.stride(0),
            D_C=head_dim_v, BLOCK_C=_pow2(head_dim_v), BLOCK_S=_pow2(splits), num_warps=4)
    return o_lat, lse


def _pow2(n: int) -> int:
    """Next power of two, at least 16 (tl.dot needs every dimension >= 16)."""
    return max(16, 1 << (n - 1).bit_length())


def fast_path_name(device: str | torch.device = "cuda") -> str:
    """Which implementation `absorbed_core_fast` runs on `device`."""
    if torch.device(device).type == "cuda" and triton is not None and torch.cuda.is_available():
        return "triton-splitk"
    return "torch-reference"


def absorbed_core_fast(q_mqa: Tensor, cache: Tensor, block_table: Tensor, seqlens: Tensor, scale: float,
                       head_dim_v: int = 512) -> tuple[Tensor, Tensor]:
    """`kernel.absorbed_core` contract; the Triton kernel on CUDA for 16/32-bit floats, plain torch elsewhere."""
    kernel_dtypes = (torch.bfloat16, torch.float16, torch.float32)
    if fast_path_name(q_mqa.device) == "triton-splitk" and q_mqa.dtype in kernel_dtypes:
        return absorbed_core_triton(q_mqa, cache, block_table, seqlens, scale, head_dim_v)
    return absorbed_core(q_mqa, cache, block_table, seqlens, scale, head_dim_v)


def flash_mla_available() -> bool:
    """True when the `flash_mla` package (deepseek-ai/FlashMLA) is installed."""
    return importlib.util.find_spec("flash_mla") is not None


def flash_mla_core(ops, seqlens: Tensor, heads: int) -> Callable[..., tuple[Tensor, Tensor]]:
    """FlashMLA's dense bf16 decode behind the `absorbed_core` signature (page size 64, SM90), called through `ops`
    as the engines call it: any build with FlashMLA's interface (the upstream `flash_mla` package, vLLM's
    `vllm.v1.attention.ops.flashmla`, SGLang's `flash_mla_interface` wrapper or `sgl_kernel.flash_mla`).

    Scheduling metadata is built once here, outside any timed region; the model's softmax scale is always passed
    (FlashMLA's default is 1/sqrt(576), flash_mla_interface.py) and causal=True, as vLLM's FLASHMLA
    (`_forward_decode`) and SGLang's flashmla backend pass it (one query token: nothing is masked). Works with both
    the old (tile metadata, num_splits) and the new (sched_meta, None) API. verify/engine_flashmla.py builds on it.
    """
    meta, splits = ops.get_mla_metadata(seqlens, heads, 1)

    def core(q_mqa: Tensor, cache: Tensor, block_table: Tensor, seqlens: Tensor, scale: float,
             head_dim_v: int = 512) -> tuple[Tensor, Tensor]:
        k_cache = cache if cache.dim() == 4 else cache.unsqueeze(2)           # [blocks, 64, 1, 576]
        out, lse = ops.flash_mla_with_kvcache(q_mqa.unsqueeze(1), k_cache, block_table, seqlens,
                                              head_dim_v, meta, splits, softmax_scale=scale, causal=True)
        return out.squeeze(1), lse.squeeze(-1)                                # [B, H, 512], [B, H]

    return core


def make_flash_mla_core(seqlens: Tensor, heads: int) -> Callable[..., tuple[Tensor, Tensor]]:
    """`flash_mla_core` through the upstream `flash_mla` package (benchmarks/attention_bench.py's `flash_mla`)."""
    import flash_mla

    return flash_mla_core(flash_mla, seqlens, heads)
