"""DeepSeek Sparse Attention decode in plain torch: the lightning indexer scoring every cached token over a
paged index-key cache, the top-k selection, and the weight-absorbed MLA core over the selected latents only.

One decode token per sequence. The index keys share the latent's block table (vLLM puts a layer's latent and
index-key pages in one KV-cache group, so one block id addresses both; docs/dsa-engines.md section 2c).
Axis letters as in kernel.py, plus i (index head) and e (index_head_dim).
Sources: deepseek-ai/DeepSeek-V3.2-Exp `inference/model.py` (Indexer: score_t = sum_i w_i * relu(q_i . k_t),
weights = weights_proj(x) * H_I^-0.5 * index_head_dim^-0.5, top-k over the scores); vLLM 0.33.0
`model_executor/layers/sparse_attn_indexer.py` (top-k indices, -1 past a short sequence). The cost of this work
is the DSA kind's (`specs/attention/dsa.py` decode_core), which the step model prices.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mla_planner.verify.kernel import PagedLatentCache, masked_softmax, work_dtype, gather


@dataclass
class PagedIndexCache:
    """Index keys [num_blocks, block_size, index_head_dim], addressed by the latent cache's block table."""

    keys: Tensor

    def rows(self, latent: PagedLatentCache) -> tuple[Tensor, Tensor]:
        """keys [B, T, e] (zeros past T_b) and valid [B, T], read through `latent`'s block table."""
        return gather(PagedLatentCache(self.keys, latent.block_table, latent.seqlens))


def index_scores(q_index: Tensor, weights: Tensor, keys: PagedIndexCache, latent: PagedLatentCache) -> Tensor:
    """Indexer scores [B, T] (-inf past T_b): sum over index heads of weight x relu(q . k)."""
    work = work_dtype(q_index.dtype)
    k, valid = keys.rows(latent)
    logits = torch.einsum("bie,bte->bit", q_index.to(work), k.to(work)).relu()        # [B, I, T]
    scores = torch.einsum("bit,bi->bt", logits, weights.to(work))
    return scores.masked_fill(~valid, float("-inf"))


def select_top_k(scores: Tensor, seqlens: Tensor, k: int) -> Tensor:
    """Token positions [B, k] of the k highest scores, -1 where a sequence has fewer than k tokens."""
    width = min(k, scores.shape[1])
    top = torch.topk(scores, width, dim=-1).indices                                    # [B, width]
    keep = torch.arange(width, device=scores.device)[None, :] < seqlens.long()[:, None]
    top = torch.where(keep, top, -1)
    return torch.nn.functional.pad(top, (0, k - width), value=-1)


def sparse_absorbed_core(q_mqa: Tensor, latent: PagedLatentCache, top: Tensor, scale: float,
                         head_dim_v: int = 512) -> tuple[Tensor, Tensor]:
    """MQA-form attention over the selected latents only: o_lat [B, H, d_v], lse [B, H].

    `top` [B, k] holds token positions (-1: none); each is read through the block table, never a
    position past T_b, so an unused page's contents cannot reach the output.
    """
    work = work_dtype(q_mqa.dtype)
    bs = latent.block_size
    chosen = top >= 0
    pos = top.clamp(min=0).long()
    blocks = torch.gather(latent.block_table.long(), 1, pos // bs)                     # [B, k]
    blocks = torch.where(chosen, blocks, 0)
    kv = latent.kv[blocks, pos % bs]                                                   # [B, k, c + r]
    kv = kv.masked_fill(~chosen[..., None], 0)
    s = torch.einsum("bhk,bjk->bhj", q_mqa.to(work), kv.to(work))                      # [B, H, k]
    p, lse = masked_softmax(s * scale, chosen)
    o_lat = torch.einsum("bhj,bjc->bhc", p.to(q_mqa.dtype), kv[..., :head_dim_v].to(q_mqa.dtype))
    return o_lat, lse


def sparse_decode_core(q_mqa: Tensor, q_index: Tensor, weights: Tensor, latent: PagedLatentCache,
                       keys: PagedIndexCache, k: int, scale: float,
                       head_dim_v: int = 512) -> tuple[Tensor, Tensor, Tensor]:
    """The whole DSA decode core: scores, top-k, sparse attention. Returns o_lat, lse and the chosen positions."""
    top = select_top_k(index_scores(q_index, weights, keys, latent), latent.seqlens, k)
    o_lat, lse = sparse_absorbed_core(q_mqa, latent, top, scale, head_dim_v)
    return o_lat, lse, top
