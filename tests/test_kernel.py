"""CPU checks of the MLA decode microkernel (always run when torch is installed).

FlashMLA-style hygiene: seeded inputs, randomly permuted block tables, NaN in every unused
cache slot, a sentinel in every unused block_table entry, a zero-length sequence, and a
per-sequence looped reference. Tolerances sit next to each call (FlashMLA tests/kernelkit/compare.py;
the fp64/fp32 ones are this project's choice).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from mla_planner.specs.attention.cost import absorbed_core_bytes
from mla_planner.verify import bench, fast
from mla_planner.verify.compare import assert_close as assert_close_flashmla, compare
from mla_planner.verify.kernel import (MLADims, PagedLatentCache, absorbed_core, apply_rope, decode_absorbed,
                                       decode_naive, gather, make_weights, page_sequences, project_latent,
                                       rope_frequencies, softmax_scale)

SMALL = MLADims(heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                hidden=64, q_lora_rank=24)
V3_YARN = {"factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
           "mscale": 1.0, "mscale_all_dim": 1.0}


@dataclass(frozen=True)
class Case:
    dims: MLADims
    seqlens: tuple[int, ...]
    block_size: int
    dtype: torch.dtype
    rope_scaling: dict | None = None
    seed: int = 0


def make_seqs(case: Case, gen: torch.Generator, std: float = 1.0) -> list[torch.Tensor]:
    """Contiguous cached rows [T_b, d_c + d_r] ~ N(0, std^2), one tensor per sequence."""
    return [torch.randn(n, case.dims.latent_dim, generator=gen, dtype=torch.float64).mul(std).to(case.dtype)
            for n in case.seqlens]


def make_cache(case: Case, gen: torch.Generator, std: float = 1.0) -> PagedLatentCache:
    """Paged cache; NaN in unused slots, sentinel in unused table entries, permuted block ids."""
    return page_sequences(make_seqs(case, gen, std), case.block_size, gen, spare_blocks=2)


def run_both(case: Case):
    """Naive and absorbed decode of one token per sequence, each on its own permuted paged cache."""
    gen = torch.Generator().manual_seed(case.seed)
    w = make_weights(case.dims, case.dtype, "cpu", gen)
    x = torch.randn(len(case.seqlens), case.dims.hidden, generator=gen, dtype=torch.float64).to(case.dtype)
    seqs = make_seqs(case, gen)  # same contents, paged twice with different block permutations
    cache_naive, cache_absorbed = (page_sequences(seqs, case.block_size, gen, spare_blocks=2) for _ in range(2))
    freqs = rope_frequencies(case.dims.qk_rope_head_dim, 10000.0, case.rope_scaling)
    scale = softmax_scale(case.dims.qk_nope_head_dim, case.dims.qk_rope_head_dim, case.rope_scaling)
    return (decode_naive(x, w, case.dims, cache_naive, freqs, scale),
            decode_absorbed(x, w, case.dims, cache_absorbed, freqs, scale), cache_naive, cache_absorbed)


def looped_reference(q: torch.Tensor, cache: PagedLatentCache, scale: float, d_v: int):
    """fp64 reference, one sequence at a time over its own ceil(T_b / bs) blocks (FlashMLA test style)."""
    bs, outs, lses = cache.block_size, [], []
    for b in range(q.shape[0]):
        T = int(cache.seqlens[b])
        if T == 0:
            outs.append(torch.zeros(q.shape[1], d_v, dtype=torch.float64))
            lses.append(torch.full((q.shape[1],), math.inf, dtype=torch.float64))
            continue
        nb = -(-T // bs)
        kv = cache.kv[cache.block_table[b, :nb].long()].reshape(nb * bs, -1)[:T].double()   # [T, k]
        s = q[b].double() @ kv.T * scale                                                    # [H, T]
        outs.append(torch.softmax(s, -1) @ kv[:, :d_v])
        lses.append(torch.logsumexp(s, -1))
    return torch.stack(outs), torch.stack(lses)


# --- softmax scale and RoPE --------------------------------------------------------------

@pytest.mark.parametrize("rope_scaling, expected", [
    (V3_YARN, 0.1352338),                                                   # DeepSeek-V3 / R1
    ({"factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707}, 0.1147214),  # DeepSeek-V2
    ({"factor": 32, "mscale": 1.0, "mscale_all_dim": 1.0}, 0.1308608),      # Kimi-K2
    (None, 1 / math.sqrt(192)),                                             # no YaRN
])
def test_softmax_scale_matches_published_values(rope_scaling, expected):
    # DeepSeek-V3 inference/model.py formula on each config.json, 7 significant digits
    assert softmax_scale(128, 64, rope_scaling) == pytest.approx(expected, abs=5e-8)


def test_yarn_frequencies_keep_high_and_interpolate_low():
    # V3: corr(32) = 10.47 -> low = 10, corr(1) = 22.5 -> high = 23 (DeepSeek-V3 inference/model.py find_correction_dim)
    plain = rope_frequencies(64, 10000.0, None)
    yarn = rope_frequencies(64, 10000.0, V3_YARN)
    torch.testing.assert_close(plain, 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64))
    torch.testing.assert_close(yarn[:11], plain[:11], rtol=0, atol=0)
    torch.testing.assert_close(yarn[23:], plain[23:] / 40, rtol=1e-15, atol=0)
    assert bool(((yarn[11:23] < plain[11:23]) & (yarn[11:23] > plain[11:23] / 40)).all())


def test_rope_scores_depend_only_on_relative_position():
    gen = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 1, 64, generator=gen, dtype=torch.float64).unbind(0)   # [1, 64] each
    freqs = rope_frequencies(64, 10000.0, V3_YARN)

    def score(m: int, n: int) -> float:
        return float(apply_rope(q, torch.tensor([m]), freqs) @ apply_rope(k, torch.tensor([n]), freqs).T)

    assert score(7, 3) == pytest.approx(score(1007, 1003), rel=1e-10)
    assert float(apply_rope(q, torch.tensor([5]), freqs).norm()) == pytest.approx(float(q.norm()), rel=1e-12)


# --- paged cache ---------------------------------------------------------------------------

def test_paged_gather_equals_contiguous_bitwise():
    gen = torch.Generator().manual_seed(2)
    lens = (1, 5, 0, 9, 16, 4)
    seqs = [torch.randn(n, 40, generator=gen) for n in lens]
    cache = page_sequences(seqs, 4, gen, spare_blocks=3)
    assert int((cache.block_table == 2_147_480_000).sum()) > 0        # sentinels present
    assert bool(cache.kv.isnan().any())                                # poison present
    kv, valid = gather(cache)
    for b, seq in enumerate(seqs):
        assert torch.equal(kv[b, :len(seq)], seq)
        assert int(valid[b].sum()) == len(seq) and not bool(kv[b].isnan().any())


def test_nan_poison_does_not_change_core_outputs():
    case = Case(SMALL, (1, 5, 0, 9), 4, torch.float32)
    gen = torch.Generator().manual_seed(3)
    cache = make_cache(case, gen)
    q = torch.randn(4, SMALL.heads, SMALL.latent_dim, generator=gen)
    poisoned = absorbed_core(q, cache.kv, cache.block_table, cache.seqlens, 0.2, SMALL.kv_lora_rank)
    clean = absorbed_core(q, cache.kv.nan_to_num(0.0), cache.block_table, cache.seqlens, 0.2, SMALL.kv_lora_rank)
    assert all(torch.equal(a, b) for a, b in zip(poisoned, clean))


def test_decode_writes_new_latent_at_last_position():
    case = Case(SMALL, (1, 5, 0, 9), 4, torch.float64, V3_YARN)
    _, _, cache, _ = run_both(case)
    gen = torch.Generator().manual_seed(case.seed)
    w = make_weights(SMALL, torch.float64, "cpu", gen)
    x = torch.randn(4, SMALL.hidden, generator=gen, dtype=torch.float64)
    pos = (cache.seqlens.long() - 1).clamp(min=0)
    expected = project_latent(x, w, SMALL, pos, rope_frequencies(8, 10000.0, V3_YARN))
    kv, _ = gather(cache)
    for b, n in enumerate(case.seqlens):
        if n:
            assert torch.equal(kv[b, n - 1], expected[b])


# --- naive == absorbed ---------------------------------------------------------------------

@pytest.mark.parametrize("q_lora_rank", [24, None])
def test_naive_equals_absorbed_float64_small_dims(q_lora_rank):
    dims = MLADims(heads=4, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                   hidden=64, q_lora_rank=q_lora_rank)
    naive, absorbed, _, _ = run_both(Case(dims, (1, 5, 9, 0), 4, torch.float64, V3_YARN))
    for name in ("y", "o_lat", "lse"):  # this project's choice: fp64 rtol 1e-10, atol 1e-12
        torch.testing.assert_close(getattr(absorbed, name), getattr(naive, name), rtol=1e-10, atol=1e-12)
    assert bool(torch.isposinf(absorbed.lse[3]).all()) and not bool(absorbed.o_lat[3].any())
    assert not bool(absorbed.y[3].any())


def test_naive_equals_absorbed_float32_deepseek_dims():
    naive, absorbed, _, _ = run_both(Case(MLADims(heads=16), (1, 63, 64, 65, 256), 64, torch.float32, V3_YARN))
    assert naive.y.shape == (5, 7168) and absorbed.o_lat.shape == (5, 16, 512)
    for name in ("y", "o_lat", "lse"):  # this project's choice: fp32 rtol 1e-4, atol 1e-5
        torch.testing.assert_close(getattr(absorbed, name), getattr(naive, name), rtol=1e-4, atol=1e-5)


# --- attention core ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_absorbed_core_matches_looped_reference(dtype):
    case = Case(MLADims(heads=20), (1, 0, 37, 64, 130), 16, dtype)
    gen = torch.Generator().manual_seed(4)
    cache = make_cache(case, gen, std=0.1)
    q = torch.randn(5, 20, 576, generator=gen, dtype=torch.float64).div(10).clamp(-1, 1).to(dtype)
    o_ref, lse_ref = looped_reference(q, cache, 0.1352338, 512)
    o_lat, lse = absorbed_core(q, cache.kv, cache.block_table, cache.seqlens, 0.1352338, 512)
    tol = (1e-12, 1e-10, 1e-20) if dtype == torch.float64 else (1e-6, 1e-5, 1e-12)  # abs, rel, cos_diff
    assert_close_flashmla("o_lat", o_lat, o_ref, *tol)
    assert_close_flashmla("lse", lse, lse_ref, *tol)
    assert torch.equal(lse[1], torch.full((20,), math.inf, dtype=lse.dtype)) and not bool(o_lat[1].any())


def test_compare_helper_rules():
    ref = torch.tensor([1.0, 0.0, math.inf, 100.0])
    assert compare("same", ref.clone(), ref, 1e-9, 1e-9).ok
    assert compare("rel ok", ref * (1 + 1e-3), ref, 1e-9, 2e-3, cos_diff_tol=1e-6).ok  # passes on rel
    assert not compare("inf moved", torch.tensor([1.0, math.inf, 0.0, 100.0]), ref, 1, 1).ok
    assert not compare("both off", ref + 1.0, ref, 0.5, 1e-3).ok


# --- fast path on CPU ------------------------------------------------------------------------

def test_fast_path_on_cpu_is_the_reference():
    case = Case(SMALL, (1, 5, 0, 9), 4, torch.float32)
    gen = torch.Generator().manual_seed(5)
    cache = make_cache(case, gen)
    q = torch.randn(4, SMALL.heads, SMALL.latent_dim, generator=gen)
    args = (q, cache.kv, cache.block_table, cache.seqlens, 0.3, SMALL.kv_lora_rank)
    assert fast.fast_path_name("cpu") == "torch-reference"
    assert all(torch.equal(a, b) for a, b in zip(fast.absorbed_core_fast(*args), absorbed_core(*args)))


def test_decode_absorbed_accepts_fast_core():
    case = Case(SMALL, (3, 8), 4, torch.float64, V3_YARN)
    gen = torch.Generator().manual_seed(6)
    w = make_weights(SMALL, torch.float64, "cpu", gen)
    x = torch.randn(2, SMALL.hidden, generator=gen, dtype=torch.float64)
    freqs, scale = rope_frequencies(8, 10000.0, V3_YARN), softmax_scale(16, 8, V3_YARN)
    cache = make_cache(case, gen)
    fast_out = decode_absorbed(x, w, SMALL, cache, freqs, scale, core=fast.absorbed_core_fast)
    ref_out = decode_absorbed(x, w, SMALL, cache, freqs, scale)
    assert torch.equal(fast_out.y, ref_out.y)


@pytest.mark.parametrize("batch, head_blocks, expected", [(64, 1, 4), (128, 1, 2), (1, 1, 64), (512, 1, 1), (64, 8, 1)])
def test_num_splits_fill_the_sms(batch, head_blocks, expected):
    # 132 SMs (H100/H200 SXM), 64 tiles of 64 tokens (context 4096), ~2 programs per SM
    assert fast.choose_num_splits(batch, head_blocks, max_tiles=64, sm_count=132) == expected


@pytest.mark.skipif(fast.triton is None, reason="triton not installed (CPU torch wheels ship without it)")
def test_triton_kernel_under_interpreter():
    """Runs the real Triton kernel on CPU with TRITON_INTERPRET=1 (fp32 and fp16; the
    interpreter's bf16 tl.dot is broken, so bf16 is left to the GPU tests)."""
    cases = [  # seqlens, heads, d_c, d_r, block_size, dtype, num_splits, block_n
        [[1, 5, 0, 9, 37], 4, 32, 8, 4, "float32", None, 16],
        [[1, 5, 0, 9, 37], 20, 32, 8, 4, "float32", 3, 16],
        [[100, 64, 0, 3], 16, 512, 64, 64, "float32", 1, 64],
        [[100, 64, 0, 3], 16, 512, 64, 64, "float16", 2, 64],
        [[70, 0, 33], 128, 512, 64, 64, "float16", None, 32],  # 8 head blocks, default tile
    ]
    script = """
    import json, sys, torch
    from mla_planner.verify.compare import assert_close
    from mla_planner.verify.fast import TritonConfig, absorbed_core_triton
    from mla_planner.verify.kernel import absorbed_core, page_sequences
    gen = torch.Generator().manual_seed(0)
    for lens, heads, d_c, d_r, bs, dtype, splits, block_n in json.loads(sys.argv[1]):
        dtype = getattr(torch, dtype)
        seqs = [(torch.randn(n, d_c + d_r, generator=gen) / 10).clamp(-1, 1).to(dtype) for n in lens]
        cache = page_sequences(seqs, bs, gen, spare_blocks=2)
        q = (torch.randn(len(lens), heads, d_c + d_r, generator=gen) / 10).clamp(-1, 1).to(dtype)
        args = (cache.block_table, cache.seqlens, 0.1352338, d_c)
        o_ref, lse_ref = absorbed_core(q.double(), cache.kv.double(), *args)
        o_lat, lse = absorbed_core_triton(q, cache.kv, *args, num_splits=splits,
                                          config=TritonConfig(block_n=block_n))
        # fp32: near-exact; fp16: p is rounded to fp16 before P.V, as in the real kernel
        o_tol = (1e-6, 1e-5, 1e-10) if dtype == torch.float32 else (1e-4, 2.01 / 1024, 1e-6)
        print(assert_close("o_lat", o_lat, o_ref.to(dtype), *o_tol))
        print(assert_close("lse", lse, lse_ref, 1e-6, 1e-5))
    """
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), json.dumps(cases)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("o_lat: ok") == len(cases) and proc.stdout.count("lse: ok") == len(cases)


# --- bench helpers on CPU --------------------------------------------------------------------

def test_bench_smoke_on_cpu():
    result = bench.attention_benchmark(2, 128, 16, 64, torch.float32, "cpu", "fast", warmup=0, repeats=1)
    assert result["path"] == "torch-reference" and result["time_s"] > 0
    assert result["bytes"] == absorbed_core_bytes(2, 16, 256, 576 * 4, act_bytes=4)
    assert result["achieved_gb_per_s"] == pytest.approx(result["bytes"] / result["time_s"] / 1e9)
    assert bench.measure_copy_bandwidth("cpu", size_bytes=2**22, repeats=2) > 0
