"""Timing the DeepSeek Sparse Attention decode microkernel (verify/sparse_kernel.py) at a planned shape, with the
bytes and FLOPs the step model prices for that work: the DSA kind's `decode_core` (specs/attention/dsa.py), the
same function `plan` uses, for one decode token per sequence.

The kernel runs one indexer layer (it always scores, where GLM-5.2 averages 21 indexers over 78 layers) on one
rank without DCP, so its work is `sparse_core` plus one `index_scan` (the pieces `decode_core` is made of). It
keeps its latent cache and index keys in the timed dtype (bf16 on a GPU, fp32 on a CPU), so the bytes are counted
at that size: the latent rows with a bf16 cache, the index keys (which `index_scan` counts as fp8 with their
scales) as index_head_dim values of that size.
"""

from __future__ import annotations

import torch

from mla_planner.specs.attention.dsa import index_scan
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.verify.bench import random_decode_inputs, time_fn
from mla_planner.verify.kernel import PagedLatentCache, softmax_scale
from mla_planner.verify.sparse_kernel import PagedIndexCache, sparse_decode_core


def sparse_attention_benchmark(spec: ModelSpec, layout: Layout, batch: int, context: int, block_size: int = 64,
                               dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cuda",
                               warmup: int = 3, repeats: int = 20) -> dict:
    """Time one sparse decode core (indexer scores over every cached token, top-k, attention over the chosen
    latents) for `batch` sequences of `context` tokens on one rank of `layout` (without DCP: attention_check
    skips a DCP layout), and report its rates."""
    device = torch.device(device)
    heads = spec.num_attention_heads // layout.tp
    q, cache, block_table, seqlens = random_decode_inputs(batch, context, heads, block_size, dtype, device)
    gen = torch.Generator(device).manual_seed(1)
    keys = (torch.randn(cache.shape[0], block_size, spec.index_head_dim, generator=gen, device=device) / 10).to(dtype)
    q_index = (torch.randn(batch, spec.index_n_heads, spec.index_head_dim, generator=gen, device=device) / 10).to(dtype)
    weights = torch.rand(batch, spec.index_n_heads, generator=gen, device=device).to(dtype)
    latent = PagedLatentCache(cache, block_table, seqlens)
    scale = softmax_scale(spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.rope_scaling)
    time_s = time_fn(lambda: sparse_decode_core(q, q_index, weights, latent, PagedIndexCache(keys), spec.index_topk,
                                                scale), device, warmup, repeats)
    core, scan = attention_of(spec).sparse_core(spec, layout, "bf16", batch, context, 1), \
        index_scan(spec, batch, context, 1)
    elem = cache.element_size()
    moved = core.bytes * elem / 2 + batch * context * spec.index_head_dim * elem
    flops = core.flops + scan.flops
    return {"impl": "sparse", "path": "torch-sparse", "batch": batch, "context": context, "heads": heads,
            "top_k": spec.index_topk, "block_size": block_size, "dtype": str(dtype).removeprefix("torch."),
            "time_s": time_s, "bytes": moved, "flops": flops,
            "achieved_gb_per_s": moved / time_s / 1e9, "achieved_tflop_per_s": flops / time_s / 1e12}
