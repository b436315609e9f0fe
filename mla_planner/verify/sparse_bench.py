"""Timing the DeepSeek Sparse Attention decode microkernel (verify/sparse_kernel.py) at a planned shape, with the
bytes and FLOPs the step model prices for that work: the DSA kind's `decode_core` (specs/attention/dsa.py), the
same function `plan` uses, for one decode token per sequence.

The kernel runs one indexer layer (it always scores, where GLM-5.2 averages 21 indexers over 78 layers) on one
rank without DCP, so its work is `sparse_core` plus one `index_scan` (the pieces `decode_core` is made of). Its
latent cache is stored as the plan stores it (`kv_kind`, verify/kv_storage.py): unquantised in the timed dtype
(bf16 on a GPU, fp32 on a CPU), plain fp8 rows (576 B, one per-tensor scale) or FlashMLA's fp8_ds_mla rows (656
B), dequantised inside the timed call (the torch kernel has no fp8 path; the engines' fp8 kernels dequantise
per tile). The bytes count the latent rows at their stored size and the queries, outputs and index keys (which
`index_scan` counts as fp8 with their scales) at the timed dtype.

Before it is timed, the kernel's output on the first sequences is checked against reference.py: the indexer's
choice (a top-k of the fp64 scores, up to their rounding) and the attention over the chosen rows (fp64).
"""

from __future__ import annotations

from typing import Optional

import torch

from mla_planner.specs.attention.cost import absorbed_core_bytes
from mla_planner.specs.attention.dsa import index_scan
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.verify import reference
from mla_planner.verify.bench import query_std, random_decode_inputs, time_fn
from mla_planner.verify.kernel import PagedLatentCache, softmax_scale
from mla_planner.verify.kv_storage import StoredKV, on_fp8_grid, store
from mla_planner.verify.sparse_kernel import PagedIndexCache, sparse_decode_core

SCORE_ROUNDING = {"fp32": 1e-5, "bf16": 2.0 ** -7}   # a chosen token may score this much (x the largest) below
                                                     # the k-th best: the timed dtype's rounding of the scores


def sparse_bytes(spec: ModelSpec, layout: Layout, batch: int, context: int, kv: StoredKV, elem: int) -> float:
    """The latent rows the core reads (min(context, top-k) per sequence) and writes (the new token's) at their
    stored size, q and o at `elem` bytes a value, and every index key scored at index_head_dim x `elem`."""
    heads = spec.num_attention_heads // layout.tp
    attended = batch * min(context, spec.index_topk)
    core = absorbed_core_bytes(batch, heads, attended, kv.row_bytes, spec.kv_lora_rank, spec.qk_rope_head_dim,
                               act_bytes=elem)
    return core + batch * context * spec.index_head_dim * elem


def _check(q, q_index, weights, kv: StoredKV, keys, table, seqlens, k: int, scale: float, out) -> reference.OutputCheck:
    """The kernel's (o_lat, lse, top) on the first sequences against the naive fp64 reference."""
    o_lat, lse, top = out
    n = min(reference.SLICE_SEQUENCES, q.shape[0])
    precision = reference.precision_of(o_lat)
    problems, outs, lses = [], [], []
    for b in range(n):
        t = torch.arange(int(seqlens[b]))
        ref_keys = reference.rows_of(StoredKV("bf16", keys), table[b], t)
        scores = reference.index_scores(q_index[b], weights[b], ref_keys)
        rounding = SCORE_ROUNDING[precision] * float(scores.abs().max()) if scores.numel() else 0.0
        if why := reference.choice_problem(top[b], scores, k, rounding):
            problems.append(f"sequence {b}: the indexer {why}")
        chosen = top[b][top[b] >= 0].cpu()
        o, l_ = reference.attend(q[b], reference.rows_of(kv, table[b], chosen), scale, o_lat.shape[-1])
        outs.append(o)
        lses.append(l_)
    return reference.check_output("sparse attention", o_lat[:n], lse[:n], torch.stack(outs), torch.stack(lses),
                                  precision, tuple(problems))


def sparse_attention_benchmark(spec: ModelSpec, layout: Layout, batch: int, context: int, block_size: int = 64,
                               dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cuda",
                               warmup: int = 3, repeats: int = 20, kv_kind: str = "bf16") -> dict:
    """Check, then time one sparse decode core (indexer scores over every cached token, top-k, attention over the
    chosen latents) for `batch` sequences of `context` tokens on one rank of `layout` (without DCP: attention_check
    skips a DCP layout), and report its rates; `time_s` None (nothing timed) when `output_check` failed."""
    device = torch.device(device)
    heads = spec.num_attention_heads // layout.tp
    scale = softmax_scale(spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.rope_scaling)
    q, rows, block_table, seqlens = random_decode_inputs(batch, context, heads, block_size, dtype, device,
                                                         q_std=query_std(scale, 576))   # scores spread (bench)
    if kv_kind != "bf16":
        q, _ = on_fp8_grid(q)
    kv = store(rows, kv_kind)
    gen = torch.Generator(device).manual_seed(1)
    keys = (torch.randn(rows.shape[0], block_size, spec.index_head_dim, generator=gen, device=device) / 10).to(dtype)
    q_index = (torch.randn(batch, spec.index_n_heads, spec.index_head_dim, generator=gen, device=device) / 10).to(dtype)
    weights = torch.rand(batch, spec.index_n_heads, generator=gen, device=device).to(dtype)

    def step() -> tuple:
        latent = PagedLatentCache(kv.cache if kv.kind == "bf16" else kv.dequantized(dtype), block_table, seqlens)
        return sparse_decode_core(q, q_index, weights, latent, PagedIndexCache(keys), spec.index_topk, scale)

    n = min(reference.SLICE_SEQUENCES, batch)
    checked = _check(q, q_index, weights, kv, keys, block_table, seqlens, spec.index_topk, scale,
                     [x[:n] for x in step()])
    time_s: Optional[float] = time_fn(step, device, warmup, repeats) if checked.ok else None
    elem = q.element_size()
    core, scan = attention_of(spec).sparse_core(spec, layout, "bf16", batch, context, 1), \
        index_scan(spec, batch, context, 1)
    moved = sparse_bytes(spec, layout, batch, context, kv, elem)
    flops = core.flops + scan.flops
    rates = ({"achieved_gb_per_s": moved / time_s / 1e9, "achieved_tflop_per_s": flops / time_s / 1e12}
             if time_s else {"achieved_gb_per_s": None, "achieved_tflop_per_s": None})
    return {"impl": "sparse", "path": "torch-sparse", "batch": batch, "context": context, "heads": heads,
            "top_k": spec.index_topk, "block_size": block_size, "dtype": str(dtype).removeprefix("torch."),
            "kv": kv.text(), "time_s": time_s, "bytes": moved, "flops": flops, "output_check": checked, **rates}
