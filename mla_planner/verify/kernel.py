"""MLA decode in plain torch: random weights, YaRN RoPE, the paged latent cache, the naive
and the weight-absorbed decode step, and the absorbed attention core that gets timed.

One decode token per sequence (s_q = 1). Axis letters: b batch, h head, t cached token,
c latent (d_c), r rope (d_r), d nope/value head dim, k latent+rope (d_c + d_r).
Sources: DeepSeek-V2 paper (arXiv 2405.04434) section 2.1; deepseek-ai/DeepSeek-V3
`inference/model.py` (MLA naive/absorb, YaRN); FlashMLA `flash_mla_with_kvcache` contract;
vLLM vllm/v1/attention/backends/mla/common.py (latent cache layout, W_UK/W_UV).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor


@dataclass(frozen=True)
class MLADims:
    """Shapes of one MLA layer on one rank (HF config.json keys; defaults = DeepSeek-V3's config.json)."""

    heads: int                      # H_t, query heads on this rank
    kv_lora_rank: int = 512         # d_c
    qk_nope_head_dim: int = 128     # d_n
    qk_rope_head_dim: int = 64      # d_r
    v_head_dim: int = 128           # d_v
    hidden: int = 7168              # d
    q_lora_rank: int | None = 1536  # r_q; None means a direct wq (DeepSeek-V2-Lite)

    @property
    def latent_dim(self) -> int:
        """Cached values per token: d_c + d_r (576 for DeepSeek)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class DecodeOut(NamedTuple):
    y: Tensor      # [B, d]     layer output before the TP all-reduce
    o_lat: Tensor  # [B, H, d_c] attention output in latent space (FlashMLA `out`)
    lse: Tensor    # [B, H]     natural-log sum-exp of the scaled scores; +inf where T_b = 0


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """Softmax/norm precision: fp32, or fp64 when the inputs are fp64."""
    return torch.promote_types(dtype, torch.float32)


def make_weights(dims: MLADims, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                 generator: torch.Generator | None = None) -> dict[str, Tensor]:
    """Random MLA weights in nn.Linear layout [out, in], drawn N(0, 1/fan_in) in fp64 on CPU.

    1/fan_in keeps the RMS-normalised latents from making the softmax one-hot
    (this project's choice). Names and shapes: DeepSeek-V3 inference/model.py `MLA`.
    """
    H, d = dims.heads, dims.hidden
    shapes = {"wkv_a": (dims.latent_dim, d),
              "wkv_b": (H * (dims.qk_nope_head_dim + dims.v_head_dim), dims.kv_lora_rank),
              "wo": (d, H * dims.v_head_dim)}
    if dims.q_lora_rank is None:
        shapes["wq"] = (H * dims.qk_head_dim, d)
    else:
        shapes["wq_a"] = (dims.q_lora_rank, d)
        shapes["wq_b"] = (H * dims.qk_head_dim, dims.q_lora_rank)
    w = {name: torch.randn(shape, generator=generator, dtype=torch.float64) / math.sqrt(shape[1])
         for name, shape in shapes.items()}
    w["kv_norm"] = torch.ones(dims.kv_lora_rank, dtype=torch.float64)
    if dims.q_lora_rank is not None:
        w["q_norm"] = torch.ones(dims.q_lora_rank, dtype=torch.float64)
    return {name: t.to(device=device, dtype=dtype) for name, t in w.items()}


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight, computed in at least fp32 (DeepSeek-V3 RMSNorm)."""
    xf = x.to(work_dtype(x.dtype))
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


# --- RoPE / YaRN (DeepSeek-V3 inference/model.py) -----------------------------------------

def yarn_mscale(factor: float, mscale: float) -> float:
    """m = 0.1 * mscale * ln(factor) + 1, or 1 when factor <= 1 (DeepSeek/HF `yarn_get_mscale`)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def softmax_scale(qk_nope_head_dim: int, qk_rope_head_dim: int, rope_scaling: dict | None = None) -> float:
    """Model softmax scale (d_n + d_r)^-1/2 * m^2 with m from `mscale_all_dim` (DeepSeek-V3 inference/model.py).

    A missing `mscale_all_dim` means no correction, as in HF `modeling_deepseek` and vLLM.
    V3 0.1352338, V2 (0.707) 0.1147214, Kimi-K2 (factor 32) 0.1308608, no YaRN 1/sqrt(192).
    """
    scale = (qk_nope_head_dim + qk_rope_head_dim) ** -0.5
    if rope_scaling:
        scale *= yarn_mscale(float(rope_scaling.get("factor", 1.0)),
                             float(rope_scaling.get("mscale_all_dim", 0.0))) ** 2
    return scale


def rope_frequencies(rope_dim: int, theta: float = 10000.0, rope_scaling: dict | None = None) -> Tensor:
    """Per-pair angular frequencies f_i' [d_r/2] in fp64, YaRN-blended when rope_scaling is given.

    f_i = theta^(-2i/d_r); the ramp between floor(corr(beta_fast)) and ceil(corr(beta_slow)),
    corr(n) = d_r ln(L0 / (2 pi n)) / (2 ln theta), mixes f_i/factor (ramp 1) with f_i (ramp 0).
    Source: DeepSeek-V3 inference/model.py `precompute_freqs_cis`.
    """
    freqs = theta ** (-torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    factor = float(rope_scaling.get("factor", 1.0)) if rope_scaling else 1.0
    if factor <= 1:
        return freqs
    orig_len = rope_scaling.get("original_max_position_embeddings", 4096)

    def corr(rotations: float) -> float:
        return rope_dim * math.log(orig_len / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(corr(rope_scaling.get("beta_fast", 32))), 0)
    high = min(math.ceil(corr(rope_scaling.get("beta_slow", 1))), rope_dim - 1)
    high = high + 0.001 if high == low else high
    ramp = ((torch.arange(rope_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    return freqs / factor * ramp + freqs * (1 - ramp)


def apply_rope(x: Tensor, pos: Tensor, freqs: Tensor) -> Tensor:
    """Rotate adjacent pairs (x[2i], x[2i+1]) by pos * f_i (DeepSeek-V3 `apply_rotary_emb`).

    x: [B, ..., d_r]; pos: [B] integer positions; freqs: [d_r/2].
    """
    work = work_dtype(x.dtype)
    angle = pos.to(torch.float64)[:, None] * freqs.to(device=pos.device, dtype=torch.float64)  # [B, d_r/2]
    angle = angle.view(angle.shape[0], *([1] * (x.dim() - 2)), angle.shape[1])
    cos, sin = angle.cos().to(work), angle.sin().to(work)
    x0, x1 = x.to(work).unflatten(-1, (-1, 2)).unbind(-1)
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).flatten(-2).to(x.dtype)


# --- paged latent cache (FlashMLA, vLLM MLA backends) ------------------------------------

@dataclass
class PagedLatentCache:
    """vLLM/FlashMLA-style paged latent cache; row = cat(kv_norm(c_kv), rope(k_pe))."""

    kv: Tensor           # [num_blocks, block_size, d_c + d_r]
    block_table: Tensor  # int32 [B, max_blocks]; entries past ceil(T_b / bs) are never read
    seqlens: Tensor      # int32 [B], T_b including the token being decoded

    @property
    def block_size(self) -> int:
        return self.kv.shape[1]


def page_sequences(seqs: list[Tensor], block_size: int, generator: torch.Generator | None = None,
                   spare_blocks: int = 1, sentinel: int = 2_147_480_000) -> PagedLatentCache:
    """Scatter contiguous sequences [T_b, D] into a paged cache with randomly permuted block ids.

    Unused blocks and the tail of each last block hold NaN and unused block_table entries hold
    `sentinel`, so any stray read shows up (FlashMLA test hygiene, tests/test_flash_mla_dense_decoding.py).
    `generator` must be a CPU generator (it drives the block permutation only).
    """
    lens = [s.shape[0] for s in seqs]
    nbs = [-(-n // block_size) for n in lens]
    num_blocks = sum(nbs) + spare_blocks
    ref = seqs[0]
    kv = ref.new_full((num_blocks, block_size, ref.shape[-1]), float("nan"))
    table = torch.full((len(seqs), max(nbs) + 1), sentinel, dtype=torch.int32)    # >= 1 sentinel per row
    ids = torch.randperm(num_blocks, generator=generator).split(nbs + [spare_blocks])
    for b, (seq, blocks) in enumerate(zip(seqs, ids)):
        if len(blocks) == 0:
            continue
        table[b, :len(blocks)] = blocks.to(torch.int32)
        padded = seq.new_full((len(blocks) * block_size, seq.shape[-1]), float("nan"))
        padded[:seq.shape[0]] = seq
        kv[blocks.to(kv.device)] = padded.view(len(blocks), block_size, -1)
    return PagedLatentCache(kv, table.to(ref.device), torch.tensor(lens, dtype=torch.int32, device=ref.device))


def write_token(cache: PagedLatentCache, kv_new: Tensor) -> None:
    """Store kv_new [B, D] at position T_b - 1 of each sequence with T_b > 0 (slot = blk*bs + off)."""
    pos = cache.seqlens.long() - 1
    live = (pos >= 0).nonzero().squeeze(1)
    pos, bs = pos[live], cache.block_size
    blk = cache.block_table[live, pos // bs].long()
    cache.kv[blk, pos % bs] = kv_new[live].to(cache.kv.dtype)


def gather(cache: PagedLatentCache) -> tuple[Tensor, Tensor]:
    """Reference read: kv [B, T, D] padded with zeros and valid [B, T] (t < T_b), T = nb_max * bs.

    Only the first ceil(T_b / bs) block_table entries of each row are used; the rest (sentinels)
    are replaced by block 0 before indexing and their rows masked out.
    """
    bs, lens = cache.block_size, cache.seqlens.long()
    nb_max = max(1, -(-int(lens.max()) // bs)) if lens.numel() else 1
    j = torch.arange(nb_max, device=lens.device)
    used = j[None, :] < (lens[:, None] + bs - 1) // bs                             # [B, nb]
    ids = torch.where(used, cache.block_table[:, :nb_max].long(), 0)               # [B, nb]
    kv = cache.kv[ids].flatten(1, 2)                                                # [B, nb*bs, D]
    valid = torch.arange(nb_max * bs, device=lens.device)[None, :] < lens[:, None]  # [B, T]
    return kv.masked_fill(~valid[..., None], 0), valid


# --- decode (DeepSeek-V3 inference/model.py, naive and absorb) ---------------------------

def masked_softmax(s: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """p [B, H, T] and lse [B, H] over t < T_b; empty rows give p = 0 and lse = +inf (FlashMLA)."""
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    empty = ~valid.any(-1)[:, None]                                  # [B, 1]
    lse = torch.logsumexp(s, -1)                                     # [B, H]
    p = torch.exp(s - torch.where(empty, 0.0, lse)[..., None])
    return p, torch.where(empty, float("inf"), lse)


def absorbed_core(q_mqa: Tensor, cache: Tensor, block_table: Tensor, seqlens: Tensor, scale: float,
                  head_dim_v: int = 512) -> tuple[Tensor, Tensor]:
    """MQA-form attention over the paged latent: o_lat [B, H, d_v], lse [B, H] (fp32 or fp64).

    q_mqa [B, H, d_c + d_r], cache [num_blocks, bs, d_c + d_r]; V is the first d_v = d_c
    columns of K. Scores and softmax in fp32 (fp64 for fp64 inputs): like FlashMLA, QK^T is
    never rounded to bf16, which alone would break its lse tolerance. P is rounded to the
    input dtype for P.V, as a tensor-core kernel does.
    """
    work = work_dtype(q_mqa.dtype)
    kv, valid = gather(PagedLatentCache(cache, block_table, seqlens))              # [B, T, k]
    s = torch.einsum("bhk,btk->bht", q_mqa.to(work), kv.to(work))                 # [B, H, T]
    p, lse = masked_softmax(s * scale, valid)
    o_lat = torch.einsum("bht,btc->bhc", p.to(q_mqa.dtype), kv[..., :head_dim_v].to(q_mqa.dtype))
    return o_lat, lse


def split_wkv_b(w: dict[str, Tensor], dims: MLADims) -> tuple[Tensor, Tensor]:
    """W_UK [H, d_n, d_c] and W_UV [H, d_v, d_c] from wkv_b's per-head [k_nope; v] row blocks."""
    wkv_b = w["wkv_b"].view(dims.heads, dims.qk_nope_head_dim + dims.v_head_dim, dims.kv_lora_rank)
    return wkv_b[:, :dims.qk_nope_head_dim], wkv_b[:, dims.qk_nope_head_dim:]


def project_query(x: Tensor, w: dict[str, Tensor], dims: MLADims, pos: Tensor, freqs: Tensor,
                  eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """q_nope [B, H, d_n] and q_pe [B, H, d_r] roped at pos (DeepSeek-V3 model.py, query path)."""
    if dims.q_lora_rank is None:
        q = x @ w["wq"].T
    else:
        q = rms_norm(x @ w["wq_a"].T, w["q_norm"], eps) @ w["wq_b"].T
    q_nope, q_pe = q.view(x.shape[0], dims.heads, dims.qk_head_dim).split(
        [dims.qk_nope_head_dim, dims.qk_rope_head_dim], -1)
    return q_nope, apply_rope(q_pe, pos, freqs)


def project_latent(x: Tensor, w: dict[str, Tensor], dims: MLADims, pos: Tensor, freqs: Tensor,
                   eps: float = 1e-6) -> Tensor:
    """Cache row [B, d_c + d_r] = cat(kv_norm(c_kv), rope(k_pe)): normalised and roped before caching."""
    c_kv, k_pe = (x @ w["wkv_a"].T).split([dims.kv_lora_rank, dims.qk_rope_head_dim], -1)
    return torch.cat([rms_norm(c_kv, w["kv_norm"], eps), apply_rope(k_pe, pos, freqs)], -1)


def _write_and_query(x: Tensor, w: dict[str, Tensor], dims: MLADims, cache: PagedLatentCache,
                     freqs: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Write the new token's latent at T_b - 1 (before attention), return q_nope, q_pe."""
    pos = (cache.seqlens.long() - 1).clamp(min=0)
    write_token(cache, project_latent(x, w, dims, pos, freqs, eps))
    return project_query(x, w, dims, pos, freqs, eps)


def decode_naive(x: Tensor, w: dict[str, Tensor], dims: MLADims, cache: PagedLatentCache, freqs: Tensor,
                 scale: float, eps: float = 1e-6) -> DecodeOut:
    """One decode step with per-head K/V materialised from the latent (DeepSeek-V3 model.py naive)."""
    q_nope, q_pe = _write_and_query(x, w, dims, cache, freqs, eps)               # [B, H, d_n], [B, H, r]
    kv, valid = gather(cache)
    c, k_pe = kv.to(x.dtype).split([dims.kv_lora_rank, dims.qk_rope_head_dim], -1)  # [B, T, c], [B, T, r]
    w_uk, w_uv = split_wkv_b(w, dims)
    k_nope = torch.einsum("btc,hdc->bthd", c, w_uk)                               # [B, T, H, d_n]
    v = torch.einsum("btc,hdc->bthd", c, w_uv)                                    # [B, T, H, d_v]
    s = torch.einsum("bhd,bthd->bht", q_nope, k_nope) + torch.einsum("bhr,btr->bht", q_pe, k_pe)
    p, lse = masked_softmax(s.to(work_dtype(x.dtype)) * scale, valid)         # [B, H, T]
    p = p.to(x.dtype)
    o = torch.einsum("bht,bthd->bhd", p, v)                                       # [B, H, d_v]
    o_lat = torch.einsum("bht,btc->bhc", p, c)                                    # [B, H, c]
    return DecodeOut(o.flatten(1) @ w["wo"].T, o_lat, lse)


def decode_absorbed(x: Tensor, w: dict[str, Tensor], dims: MLADims, cache: PagedLatentCache, freqs: Tensor,
                    scale: float, eps: float = 1e-6, core: Callable = absorbed_core) -> DecodeOut:
    """One decode step with W_UK absorbed into q and W_UV applied after attention (DeepSeek-V3 model.py absorb).

    `core` is the attention core, `absorbed_core` or a fast path with the same signature.
    """
    q_nope, q_pe = _write_and_query(x, w, dims, cache, freqs, eps)
    w_uk, w_uv = split_wkv_b(w, dims)
    q_lat = torch.einsum("bhd,hdc->bhc", q_nope, w_uk)                            # [B, H, c]
    q_mqa = torch.cat([q_lat, q_pe], -1)                                          # [B, H, k]
    o_lat, lse = core(q_mqa, cache.kv, cache.block_table, cache.seqlens, scale, dims.kv_lora_rank)
    o = torch.einsum("bhc,hdc->bhd", o_lat.to(x.dtype), w_uv)                     # [B, H, d_v]
    return DecodeOut(o.flatten(1) @ w["wo"].T, o_lat, lse)
