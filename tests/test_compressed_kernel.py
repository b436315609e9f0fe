"""The DeepSeek-V4 hybrid compressed attention decode microkernel (verify/compressed_kernel.py) against a naive
fp64 reference that walks each sequence's contiguous raw rows, compressed rows and index keys: random shapes,
all three compress ratios, lengths below and above the window and top-k x ratio, permuted block tables, window
pages freed (sentinel block-table entries) and every unused page and slot poisoned with NaN or 1e30
(FlashMLA test hygiene). Also the attention sink's two limits and the per-sequence row counts. CPU only."""

import math
import random

import pytest

torch = pytest.importorskip("torch")

from mla_planner.specs.attention.compressed import rows_read   # the counts the step model prices
from mla_planner.verify.compressed_kernel import CompressedLayerCache, compressed_decode, rows_gathered
from mla_planner.verify.kernel import absorbed_core, page_sequences

DIM, HEADS, INDEX_DIM, INDEX_HEADS = 48, 4, 16, 4
SENTINEL = 2_147_480_000


def make_layer(seqlens, ratio, window, gen, bs_swa=8, bs_comp=4, poison=math.nan, dim=DIM, index_dim=INDEX_DIM):
    """Paged caches of one layer plus the dense per-sequence rows they hold: (cache, raw, compressed, keys).

    Raw rows are paged with their own block table; blocks wholly before a window are freed (poisoned, and
    their block-table entry set to a sentinel for even b, left pointing at the poisoned page for odd b).
    Compressed rows and index keys are paged together (one block table), then split. Index keys are
    positive and index head 0 of q_index is too (see `queries`), so every score is > 0 and top-k has no ties.
    """
    raw = [torch.randn(T, dim, generator=gen, dtype=torch.float64) for T in seqlens]
    swa = page_sequences(raw, bs_swa, gen, spare_blocks=2)
    for b, T in enumerate(seqlens):
        for j in range(max(0, T - window) // bs_swa):
            swa.kv[int(swa.block_table[b, j])] = math.nan
            if b % 2 == 0:
                swa.block_table[b, j] = SENTINEL
    swa.kv = torch.nan_to_num(swa.kv, nan=poison)
    cache = CompressedLayerCache(swa)
    comp = [torch.randn(T // max(ratio, 1) if ratio > 1 else 0, dim, generator=gen, dtype=torch.float64)
            for T in seqlens]
    keys = [torch.rand(c.shape[0], index_dim, generator=gen, dtype=torch.float64) for c in comp]
    if ratio > 1:
        paged = page_sequences([torch.cat([c, k], -1) for c, k in zip(comp, keys)], bs_comp, gen, spare_blocks=2)
        rows = torch.nan_to_num(paged.kv, nan=poison)
        cache.compressed, cache.index_keys = rows[..., :dim].contiguous(), rows[..., dim:].contiguous()
        cache.compressed_table = paged.block_table
    return cache, raw, comp, keys


def queries(B, gen, heads=HEADS, dim=DIM, index_heads=INDEX_HEADS, index_dim=INDEX_DIM):
    """q [B, H, D], q_index [B, I, e] (head 0 non-negative), index weights [B, I] (positive), sink [H]."""
    q = torch.randn(B, heads, dim, generator=gen, dtype=torch.float64)
    q_index = torch.randn(B, index_heads, index_dim, generator=gen, dtype=torch.float64)
    q_index[:, 0] = q_index[:, 0].abs()
    weights = torch.rand(B, index_heads, generator=gen, dtype=torch.float64) + 0.5
    return q, q_index, weights, torch.randn(heads, generator=gen, dtype=torch.float64)


def reference(q, sink, raw, comp, keys, q_index, weights, ratio, window, topk, scale):
    """Per sequence, dense and in fp64: the window, the chosen compressed rows, one softmax with the sink
    added to the denominator. Returns out [B, H, D], lse [B, H] and the chosen compressed entries."""
    outs, lses, chosen = [], [], []
    for b, seq in enumerate(raw):
        T = seq.shape[0]
        picked = []
        if ratio == 4:
            scores = ((q_index[b] @ keys[b].T).relu() * weights[b][:, None]).sum(0)        # [T // 4]
            picked = torch.topk(scores, min(topk, T // 4)).indices.tolist()
        elif ratio > 1:
            picked = list(range(T // ratio))
        kv = torch.cat([comp[b][picked], seq[max(0, T - window):T]])                       # [n, D]
        s = q[b] @ kv.T * scale                                                             # [H, n]
        m = torch.maximum(s.max(-1).values, sink)
        e = torch.exp(s - m[:, None])
        den = e.sum(-1) + torch.exp(sink - m)
        outs.append(e @ kv / den[:, None])
        lses.append(m + den.log())
        chosen.append(set(picked))
    return torch.stack(outs), torch.stack(lses), chosen


def check(seqlens, ratio, window, topk, seed, bs_swa=8, bs_comp=4, poison=math.nan, scale=0.1, **dims):
    """Run the kernel and the reference on one random batch and compare outputs, choices and row counts."""
    gen = torch.Generator().manual_seed(seed)
    cache, raw, comp, keys = make_layer(seqlens, ratio, window, gen, bs_swa, bs_comp, poison,
                                        dims.get("dim", DIM), dims.get("index_dim", INDEX_DIM))
    q, q_index, weights, sink = queries(len(seqlens), gen, **dims)
    res = compressed_decode(q, cache, ratio, sink, scale, window, topk, q_index, weights)
    ref_o, ref_lse, ref_chosen = reference(q, sink, raw, comp, keys, q_index, weights, ratio, window, topk, scale)
    assert not torch.isnan(res.out).any() and not torch.isnan(res.lse).any()
    assert [{t for t in row.tolist() if t >= 0} for row in res.compressed_pos] == ref_chosen
    torch.testing.assert_close(res.out, ref_o, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(res.lse, ref_lse, rtol=1e-10, atol=1e-10)
    assert rows_gathered(res) == [rows_read(T, ratio, window, topk) for T in seqlens]
    return res


@pytest.mark.parametrize("ratio", [0, 4, 128])
@pytest.mark.parametrize("seed", range(4))
def test_paged_kernel_matches_the_naive_reference_over_random_shapes(ratio, seed):
    rng = random.Random(seed * 10 + ratio)
    window, topk = rng.choice([8, 16, 32]), rng.choice([4, 8, 16])
    span = topk * max(ratio, 4)
    seqlens = [rng.randint(1, window), rng.randint(window + 1, 3 * window),             # below / above window
               rng.randint(1, span), rng.randint(span + 1, 2 * span + window)]          # below / above top-k x r
    seqlens += [rng.randint(1, 2 * span) for _ in range(rng.randint(0, 3))]
    rng.shuffle(seqlens)
    check(seqlens, ratio, window, topk, seed, bs_swa=rng.choice([4, 8, 16]), bs_comp=rng.choice([2, 4, 16]),
          poison=rng.choice([math.nan, 1e30]))


@pytest.mark.parametrize("ratio, seqlens", [(4, (1, 2, 3, 5, 7)), (128, (1, 5, 127, 128, 130)), (0, (1, 2, 9))])
def test_short_sequences_below_the_ratio_and_the_window(ratio, seqlens):
    res = check(seqlens, ratio, window=16, topk=8, seed=11, poison=1e30)
    assert res.window_pos.ge(0).sum(-1).tolist() == [min(T, 16) for T in seqlens]


@pytest.mark.parametrize("ratio, seqlens", [(4, (3, 200, 2100)), (128, (1, 300, 1000)), (0, (5, 129, 700))])
def test_deepseek_v4_sizes(ratio, seqlens):
    """head_dim 512, window 128, index_topk 512, index_head_dim 128; 2100 tokens give 525 entries > top-k."""
    check(seqlens, ratio, window=128, topk=512, seed=3, bs_swa=64, bs_comp=256, scale=512 ** -0.5,
          dim=512, index_dim=128, heads=8, index_heads=8)


@pytest.mark.parametrize("ratio", [0, 4, 128])
def test_sink_at_minus_infinity_is_plain_softmax_and_a_huge_sink_zeroes_the_output(ratio):
    gen = torch.Generator().manual_seed(21)
    seqlens, window, topk, scale = (3, 17, 40, 90), 16, 4, 0.2
    cache, raw, comp, _ = make_layer(seqlens, ratio, window, gen)
    q, q_index, weights, _ = queries(len(seqlens), gen)
    off = torch.full((HEADS,), -math.inf, dtype=torch.float64)
    res = compressed_decode(q, cache, ratio, off, scale, window, topk, q_index, weights)
    for b, (o, lse) in enumerate(zip(res.out, res.lse)):
        picked = [t for t in res.compressed_pos[b].tolist() if t >= 0]
        T = seqlens[b]
        kv = torch.cat([comp[b][picked], raw[b][max(0, T - window):]]) if ratio > 1 else raw[b][max(0, T - window):]
        s = q[b] @ kv.T * scale
        torch.testing.assert_close(o, torch.softmax(s, -1) @ kv, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-12, atol=1e-12)
    huge = torch.full((HEADS,), 1e4, dtype=torch.float64)
    res = compressed_decode(q, cache, ratio, huge, scale, window, topk, q_index, weights)
    assert res.out.abs().max() < 1e-300
    torch.testing.assert_close(res.lse, huge.expand(len(seqlens), -1))


def test_window_only_within_the_window_is_the_dense_core():
    """r = 0 and T <= window: plain dense MQA attention over every raw row (kernel.absorbed_core)."""
    gen = torch.Generator().manual_seed(4)
    cache, _, _, _ = make_layer((1, 9, 16), 0, 16, gen)
    q, _, _, _ = queries(3, gen)
    res = compressed_decode(q, cache, 0, torch.full((HEADS,), -math.inf, dtype=torch.float64), 0.3, 16)
    o, lse = absorbed_core(q, cache.swa.kv, cache.swa.block_table, cache.swa.seqlens, 0.3, DIM)
    torch.testing.assert_close(res.out, o, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(res.lse, lse, rtol=1e-12, atol=1e-12)


def test_rows_read_at_deepseek_v4_sizes():
    assert rows_read(1, 4, 128, 512) == (0, 1, 0)
    assert rows_read(1000, 4, 128, 512) == (250, 128, 250)
    assert rows_read(5000, 4, 128, 1024) == (1024, 128, 1250)
    assert rows_read(1000, 128, 128, 512) == (7, 128, 0)
    assert rows_read(127, 128, 128, 512) == (0, 127, 0)
    assert rows_read(1000, 0, 128, 512) == (0, 128, 0)


def test_a_csa_layer_without_indexer_inputs_is_refused():
    gen = torch.Generator().manual_seed(0)
    cache, _, _, _ = make_layer((9,), 4, 8, gen)
    q, _, _, sink = queries(1, gen)
    with pytest.raises(ValueError, match="CSA"):
        compressed_decode(q, cache, 4, sink, 0.1, 8, 4)
