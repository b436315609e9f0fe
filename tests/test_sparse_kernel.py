"""The DeepSeek Sparse Attention decode microkernel (verify/sparse_kernel.py) against a naive fp64 reference
that walks each sequence's contiguous rows: random shapes, top-k below and above the sequence lengths, a
zero-length sequence, permuted block tables, and unused pages and slots poisoned with NaN (FlashMLA test
hygiene). CPU only; the kernel is plain torch."""

import math

import pytest

torch = pytest.importorskip("torch")

from mla_planner.verify.kernel import absorbed_core, page_sequences  # noqa: E402
from mla_planner.verify.sparse_kernel import (PagedIndexCache, index_scores, select_top_k,  # noqa: E402
                                              sparse_decode_core)

LATENT, ROPE, INDEX_DIM, INDEX_HEADS, HEADS = 32, 8, 16, 4, 6


def paged(seqlens, block_size, gen):
    """Latent rows and index keys paged together (one block table, as vLLM's shared KV-cache group pages them),
    then split: [num_blocks, bs, latent + rope] and [num_blocks, bs, index_head_dim]."""
    rows = [torch.randn(n, LATENT + ROPE + INDEX_DIM, generator=gen, dtype=torch.float64) for n in seqlens]
    cache = page_sequences(rows, block_size, gen, spare_blocks=2)
    latent = cache.kv[..., :LATENT + ROPE].contiguous()
    keys = cache.kv[..., LATENT + ROPE:].contiguous()
    cache.kv = latent
    return cache, PagedIndexCache(keys), rows


def reference(q_mqa, q_index, weights, rows, k, scale):
    """Per sequence, over its own contiguous rows: scores, the top k, softmax attention over them (fp64)."""
    outs, lses, chosen = [], [], []
    for b, seq in enumerate(rows):
        T = seq.shape[0]
        if T == 0:
            outs.append(torch.zeros(HEADS, LATENT, dtype=torch.float64))
            lses.append(torch.full((HEADS,), math.inf, dtype=torch.float64))
            chosen.append(set())
            continue
        lat, key = seq[:, :LATENT + ROPE], seq[:, LATENT + ROPE:]
        scores = ((q_index[b] @ key.T).relu() * weights[b][:, None]).sum(0)             # [T]
        top = torch.topk(scores, min(k, T)).indices
        s = q_mqa[b] @ lat[top].T * scale                                               # [H, k']
        outs.append(torch.softmax(s, -1) @ lat[top][:, :LATENT])
        lses.append(torch.logsumexp(s, -1))
        chosen.append(set(top.tolist()))
    return torch.stack(outs), torch.stack(lses), chosen


@pytest.mark.parametrize("seqlens, block_size, k, seed", [
    ((37, 5, 64, 0, 90), 16, 24, 0),     # k below some lengths, above others; an empty sequence
    ((130, 129, 3), 64, 64, 1),
    ((7, 8, 9), 4, 100, 2),              # k above every length: dense
    ((200,), 32, 1, 3)])
def test_sparse_decode_matches_the_naive_reference(seqlens, block_size, k, seed):
    gen = torch.Generator().manual_seed(seed)
    latent, keys, rows = paged(seqlens, block_size, gen)
    B = len(seqlens)
    q_mqa = torch.randn(B, HEADS, LATENT + ROPE, generator=gen, dtype=torch.float64)
    q_index = torch.randn(B, INDEX_HEADS, INDEX_DIM, generator=gen, dtype=torch.float64)
    weights = torch.rand(B, INDEX_HEADS, generator=gen, dtype=torch.float64) + 0.5   # positive: no score ties at
    scale = 0.125                                                                     # 0 at the top-k boundary
    o, lse, top = sparse_decode_core(q_mqa, q_index, weights, latent, keys, k, scale, head_dim_v=LATENT)
    ref_o, ref_lse, ref_chosen = reference(q_mqa, q_index, weights, rows, k, scale)
    assert not torch.isnan(o).any() and not torch.isnan(lse).any()
    assert [set(t for t in row.tolist() if t >= 0) for row in top] == ref_chosen
    torch.testing.assert_close(o, ref_o, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(lse, ref_lse, rtol=1e-10, atol=1e-10)


def test_with_k_at_least_every_length_it_is_the_dense_core():
    """Below top-k tokens DSA attends to every token: the dense absorbed core's output exactly."""
    gen = torch.Generator().manual_seed(5)
    latent, keys, _ = paged((12, 30, 1), 8, gen)
    q_mqa = torch.randn(3, HEADS, LATENT + ROPE, generator=gen, dtype=torch.float64)
    q_index = torch.randn(3, INDEX_HEADS, INDEX_DIM, generator=gen, dtype=torch.float64)
    weights = torch.randn(3, INDEX_HEADS, generator=gen, dtype=torch.float64)
    o, lse, _ = sparse_decode_core(q_mqa, q_index, weights, latent, keys, 64, 0.2, head_dim_v=LATENT)
    dense_o, dense_lse = absorbed_core(q_mqa, latent.kv, latent.block_table, latent.seqlens, 0.2, LATENT)
    torch.testing.assert_close(o, dense_o, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, dense_lse, rtol=1e-12, atol=1e-12)


def test_scores_past_a_sequence_are_never_chosen():
    gen = torch.Generator().manual_seed(7)
    latent, keys, _ = paged((3, 40), 16, gen)
    q_index = torch.randn(2, INDEX_HEADS, INDEX_DIM, generator=gen, dtype=torch.float64)
    weights = torch.rand(2, INDEX_HEADS, generator=gen, dtype=torch.float64)
    scores = index_scores(q_index, weights, keys, latent)
    assert torch.isinf(scores[0, 3:]).all() and torch.isfinite(scores[0, :3]).all()
    top = select_top_k(scores, latent.seqlens, 8)
    assert top[0, 3:].eq(-1).all() and sorted(top[0, :3].tolist()) == [0, 1, 2]
    assert top[1].ge(0).all() and top[1].lt(40).all()
