"""DeepSeek-V4 hybrid compressed attention decode in plain torch: one layer, one decode token per sequence.

Every layer attends to its sliding window (the last `window` raw rows, the new token included) plus, when
compress_ratio r > 1, compressed rows (one per r tokens; T tokens have floor(T / r) complete ones): all of
them for HCA (r = 128), the lightning indexer's top-k for CSA (r = 4), none for r = 0 (SWA only). One KV
head, K = V = the stored 512-wide row (448 NoPE + 64 RoPE, RoPE already applied); one softmax over the
union with a per-head attention sink s_h in the denominator only:
out_h = sum_t exp(l_t) v_t / (exp(s_h) + sum_t exp(l_t)).
Each cache is paged with its own block table; the index keys share the compressed cache's block table.
Sources: DeepSeek-V4 technical report and the deepseek-ai/DeepSeek-V4-Pro and DeepSeek-V4-Flash model cards
(`inference/model.py`: get_window_topk_idxs, get_compress_topk_idxs, Compressor, Indexer;
`inference/kernel.py`: sparse_attn with attn_sink); vLLM 0.33.0
`vllm/model_executor/models/deepseek_v4/attention.py` and `compressor.py`. The indexer score is
DeepSeek-V3.2's (sparse_kernel.index_scores), here over compressed entries. What it gathers (`rows_gathered`) is
held equal to the step model's count, `specs/attention/compressed.rows_read` (tests/test_compressed_kernel.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from mla_planner.verify.kernel import PagedLatentCache, masked_softmax, work_dtype
from mla_planner.verify.sparse_kernel import PagedIndexCache, index_scores, select_top_k

CSA_RATIO = 4  # the one ratio whose layers carry a lightning indexer (config.json `compress_ratios`)


@dataclass
class CompressedLayerCache:
    """One layer's paged caches for a batch. Positions are read as block_table[b, p // bs], p % bs."""

    swa: PagedLatentCache                   # raw rows [nb, bs, D]; seqlens = T_b, the new token included
    compressed: Tensor | None = None        # [nb_c, bs_c, D] compressed rows (r > 1)
    compressed_table: Tensor | None = None  # int32 [B, max_blocks_c]
    index_keys: Tensor | None = None        # [nb_c, bs_c, e] (r = 4), addressed by compressed_table


class CompressedDecodeOut(NamedTuple):
    """The output, its softmax denominator and what was read."""

    out: Tensor             # [B, H, D]
    lse: Tensor             # [B, H] log(exp(s_h) + sum_t exp(l_t)); +inf where nothing is attended
    compressed_pos: Tensor  # [B, n] compressed entries attended, -1 = none
    window_pos: Tensor      # [B, window] raw positions attended, -1 = none
    index_keys: Tensor      # [B] index keys scored by the indexer (0 without one)


def uses_indexer(ratio: int) -> bool:
    """True for CSA layers (r = 4); HCA (r = 128) reads every compressed entry, r <= 1 none."""
    return ratio == CSA_RATIO


def read_rows(kv: Tensor, block_table: Tensor, pos: Tensor) -> tuple[Tensor, Tensor]:
    """Rows [B, n, D] at positions pos [B, n] through the block table (zeros where pos < 0) and valid [B, n].

    Block-table entries of masked positions are never dereferenced (replaced by block 0), so freed or
    sentinel entries and unused pages cannot reach the result.
    """
    valid = pos >= 0
    p = pos.clamp(min=0).long()
    bs = kv.shape[1]
    blocks = torch.gather(block_table.long(), 1, p // bs)
    blocks = torch.where(valid, blocks, 0)
    rows = kv[blocks, p % bs]
    return rows.masked_fill(~valid[..., None], 0), valid


def window_positions(seqlens: Tensor, window: int) -> Tensor:
    """Raw positions [B, window] of each sequence's window, T - window .. T - 1; -1 before position 0."""
    pos = seqlens.long()[:, None] - window + torch.arange(window, device=seqlens.device)[None, :]
    return torch.where(pos >= 0, pos, -1)


def compressed_positions(cache: CompressedLayerCache, ratio: int, topk: int, q_index: Tensor | None,
                         index_weights: Tensor | None) -> tuple[Tensor, Tensor]:
    """Compressed entries to attend [B, n] (-1 = none) and index keys scored [B].

    CSA: the indexer's top-k over the T // 4 complete entries; HCA: all T // r entries; r <= 1: none.
    """
    B, device = cache.swa.seqlens.shape[0], cache.swa.seqlens.device
    none = torch.zeros(B, dtype=torch.long, device=device)
    if ratio <= 1:
        return torch.full((B, 0), -1, dtype=torch.long, device=device), none
    entries = cache.swa.seqlens.long() // ratio
    if uses_indexer(ratio):
        if q_index is None or index_weights is None or cache.index_keys is None:
            raise ValueError("a CSA layer needs q_index, index_weights and index_keys")
        comp = PagedLatentCache(cache.compressed, cache.compressed_table, entries.to(torch.int32))
        scores = index_scores(q_index, index_weights, PagedIndexCache(cache.index_keys), comp)
        return select_top_k(scores, entries, topk).long(), torch.isfinite(scores).sum(-1)
    n = int(entries.max()) if B else 0
    pos = torch.arange(n, device=device)[None, :].expand(B, n)
    return torch.where(pos < entries[:, None], pos, -1), none


def compressed_decode(q: Tensor, cache: CompressedLayerCache, ratio: int, sink: Tensor, scale: float,
                      window: int = 128, topk: int = 512, q_index: Tensor | None = None,
                      index_weights: Tensor | None = None) -> CompressedDecodeOut:
    """One decode step of a DeepSeek-V4 layer: attention of q [B, H, D] over window + compressed rows.

    Scores and softmax in fp32 (fp64 for fp64 inputs), P rounded to q's dtype for P.V (as in
    kernel.absorbed_core); the sink scales P by 1 / (1 + exp(s_h - lse)) = sigmoid(lse - s_h).
    q_index [B, I, e] and index_weights [B, I] are required when ratio == 4.
    """
    work = work_dtype(q.dtype)
    comp_pos, n_index = compressed_positions(cache, ratio, topk, q_index, index_weights)
    win_pos = window_positions(cache.swa.seqlens, window)
    win_rows, win_valid = read_rows(cache.swa.kv, cache.swa.block_table, win_pos)
    if comp_pos.shape[1]:
        comp_rows, comp_valid = read_rows(cache.compressed, cache.compressed_table, comp_pos)
        kv, valid = torch.cat([comp_rows, win_rows], 1), torch.cat([comp_valid, win_valid], 1)
    else:
        kv, valid = win_rows, win_valid
    s = torch.einsum("bhd,btd->bht", q.to(work), kv.to(work))                        # [B, H, n]
    p, lse = masked_softmax(s * scale, valid)
    sink = sink.to(device=q.device, dtype=work)[None, :]                              # [1, H]
    p = p * torch.sigmoid(lse - sink)[..., None]
    out = torch.einsum("bht,btd->bhd", p.to(q.dtype), kv.to(q.dtype))
    return CompressedDecodeOut(out, torch.logaddexp(lse, sink), comp_pos, win_pos, n_index)


def rows_gathered(result: CompressedDecodeOut) -> list[tuple[int, int, int]]:
    """Per sequence, the (compressed rows, window rows, index keys) the kernel actually read."""
    comp = (result.compressed_pos >= 0).sum(-1).tolist()
    win = (result.window_pos >= 0).sum(-1).tolist()
    return list(zip(comp, win, result.index_keys.tolist()))
