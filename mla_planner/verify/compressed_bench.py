"""Timing the DeepSeek-V4 hybrid compressed attention decode microkernel (verify/compressed_kernel.py) at a planned
shape, with the bytes and FLOPs the step model prices for that work: the csa-hca kind's `layer_core`
(specs/attention/compressed.py), the function whose average over the decoder layers (`decode_core`) `plan` uses,
for one decode token per sequence.

A V4 model mixes layers of three compression ratios (0: the sliding window only; 4: CSA, the lightning indexer's
top-k of the compressed rows; 128: HCA, every compressed row), whose decode work differs by orders of magnitude.
The benchmark times one layer of each ratio the model has and reports each, then a combined figure: time, bytes
and FLOPs averaged over the decoder layers, each ratio weighted by its layer count (`layer_ratios`), which is
what `decode_core` prices for one layer. Its heads are num_attention_heads / tp, the real ones: the engine's
FlashMLA kernel pads them to 64 or 128 (the step model's `padded_heads`), the torch kernel does not.

Caches as vLLM 0.33.0 pages them (engines/compressed_kv.py): window rows on 64-token pages, compressed rows and
index keys on 256-token pages (256 / ratio rows each), block ids shuffled (as bench.random_decode_inputs); only
the window's pages are allocated (the engines free the pages a sliding window has left behind), the block-table
entries before it point at block 0 and are never dereferenced. Values randn / 10 clipped to [-1, 1]; the
attention sink randn (the model keeps an fp32 sink per head); softmax scale head_dim^-1/2 (DeepSeek-V4
`inference/model.py`).

Bytes at the timed dtype: the kernel keeps its 512-wide rows, queries and outputs, and index_head_dim-wide index
keys, in the timed dtype (bf16 on a GPU, fp32 on a CPU), where the engine reads 584-byte fp8 rows and 132-byte
fp8 index keys. So `layer_core`'s bytes are recounted (`timed_layer_cost`): each row it counts (those attended
and the new token's written) at head_dim x element size in place of 584 B, each index key scored at
index_head_dim x element size in place of 132 B, and its bf16 queries and outputs x element size / 2 (as
sparse_bench scales its bf16 latent and activations). FLOPs are `layer_core`'s unchanged.
"""

from __future__ import annotations

from collections import Counter
from functools import partial

import torch

from mla_planner.core.units import ACT_BYTES
from mla_planner.engines.compressed_kv import VLLM_BLOCK_TOKENS, VLLM_SLIDING_BLOCK
from mla_planner.specs.attention.base import CoreCost
from mla_planner.specs.attention.compressed import INDEX_KEY_BYTES, RATIOS, ROW_BYTES, layer_ratios, rows_read
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.verify.bench import time_fn
from mla_planner.verify.compressed_kernel import CompressedLayerCache, compressed_decode, rows_gathered, uses_indexer
from mla_planner.verify.kernel import PagedLatentCache

WINDOW_BLOCK = VLLM_SLIDING_BLOCK["swa_kv"]      # tokens per window page (64)


def timed_layer_cost(spec: ModelSpec, layout: Layout, ratio: int, batch: int, context: int, elem: int) -> CoreCost:
    """`layer_core` of one layer of `ratio` for `batch` sequences of `context` tokens, one query token each, with
    its bytes recounted for a cache of `elem`-byte values (module docstring): rows at head_dim x elem, index keys
    at index_head_dim x elem, queries and outputs at elem; FLOPs unchanged."""
    core = attention_of(spec).layer_core(spec, layout, ratio, batch, context, 1)
    rows, window, keys = rows_read(context, ratio, spec.sliding_window, spec.index_topk)
    slots = batch * (rows + window + 1)                      # attended rows plus the new token's row written
    scanned = batch * keys
    activations = core.bytes - slots * ROW_BYTES - scanned * INDEX_KEY_BYTES["fp8"]
    moved = activations * elem / ACT_BYTES + slots * spec.head_dim * elem + scanned * spec.index_head_dim * elem
    return CoreCost(moved, core.flops)


def _rand(gen: torch.Generator, shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """randn / 10 clipped to [-1, 1] (FlashMLA tests, as bench.random_decode_inputs)."""
    return (torch.randn(*shape, generator=gen, device=device) / 10).clamp_(-1, 1).to(dtype)


def _block_ids(batch: int, per_seq: int, seed: int, device: torch.device) -> torch.Tensor:
    """int32 [batch, per_seq] of randomly permuted block ids 0 .. batch * per_seq - 1."""
    perm = torch.randperm(batch * per_seq, generator=torch.Generator().manual_seed(seed))
    return perm.view(batch, per_seq).to(device=device, dtype=torch.int32)


def random_layer_cache(spec: ModelSpec, ratio: int, batch: int, context: int, dtype: torch.dtype,
                       device: torch.device, seed: int = 0) -> CompressedLayerCache:
    """One layer's paged caches for `batch` sequences of `context` tokens: the window's raw rows on 64-token pages
    (the pages before the window not allocated), and for ratio > 1 the context // ratio compressed rows (and on a
    CSA layer their index keys) on pages of 256 // ratio rows."""
    gen = torch.Generator(device).manual_seed(seed)
    first, last = max(context - spec.sliding_window, 0) // WINDOW_BLOCK, (context - 1) // WINDOW_BLOCK
    table = torch.zeros(batch, last + 1, dtype=torch.int32, device=device)
    table[:, first:] = _block_ids(batch, last + 1 - first, seed, device)
    kv = _rand(gen, (batch * (last + 1 - first), WINDOW_BLOCK, spec.head_dim), dtype, device)
    seqlens = torch.full((batch,), context, dtype=torch.int32, device=device)
    cache = CompressedLayerCache(PagedLatentCache(kv, table, seqlens))
    if ratio > 1:
        rows_per_block = max(VLLM_BLOCK_TOKENS // ratio, 1)
        blocks = max(-(-(context // ratio) // rows_per_block), 1)
        cache.compressed = _rand(gen, (batch * blocks, rows_per_block, spec.head_dim), dtype, device)
        cache.compressed_table = _block_ids(batch, blocks, seed + 1, device)
        if uses_indexer(ratio):
            cache.index_keys = _rand(gen, (batch * blocks, rows_per_block, spec.index_head_dim), dtype, device)
    return cache


def compressed_attention_benchmark(spec: ModelSpec, layout: Layout, batch: int, context: int,
                                   dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cuda",
                                   warmup: int = 3, repeats: int = 20) -> dict:
    """Time one decode step of one layer of each compression ratio the model has, for `batch` sequences of
    `context` tokens on one rank of `layout` (V4 has no DCP), and report each (`kinds`: its layers, seconds,
    bytes, FLOPs and the rows one sequence gathered) and their average over the decoder layers (time_s, bytes,
    flops, the achieved rates), the figure the step model's per-layer attention core stands for."""
    device = torch.device(device)
    heads = spec.num_attention_heads // layout.tp
    gen = torch.Generator(device).manual_seed(1)
    q = _rand(gen, (batch, heads, spec.head_dim), dtype, device)
    sink = torch.randn(heads, generator=gen, device=device)
    index = None
    if 4 in layer_ratios(spec):
        index = (_rand(gen, (batch, spec.index_n_heads, spec.index_head_dim), dtype, device),
                 torch.rand(batch, spec.index_n_heads, generator=gen, device=device).to(dtype))
    elem, scale = q.element_size(), spec.head_dim ** -0.5
    layers = Counter(layer_ratios(spec))
    kinds = {}
    for ratio in sorted(layers):
        cache = random_layer_cache(spec, ratio, batch, context, dtype, device)
        q_index, weights = index if uses_indexer(ratio) else (None, None)
        step = partial(compressed_decode, q, cache, ratio, sink, scale, spec.sliding_window, spec.index_topk or 0,
                       q_index, weights)
        gathered = rows_gathered(step())[0]
        cost = timed_layer_cost(spec, layout, ratio, batch, context, elem)
        kinds[RATIOS[ratio]] = {"ratio": ratio, "layers": layers[ratio], "rows": list(gathered),
                                "time_s": time_fn(step, device, warmup, repeats), "bytes": cost.bytes,
                                "flops": cost.flops}
    n = sum(layers.values())
    time_s, moved, flops = (sum(k[key] * k["layers"] for k in kinds.values()) / n
                            for key in ("time_s", "bytes", "flops"))
    return {"impl": "compressed", "path": "torch-compressed", "batch": batch, "context": context, "heads": heads,
            "top_k": spec.index_topk, "window": spec.sliding_window, "block_size": VLLM_BLOCK_TOKENS,
            "dtype": str(dtype).removeprefix("torch."), "time_s": time_s, "bytes": moved, "flops": flops,
            "achieved_gb_per_s": moved / time_s / 1e9, "achieved_tflop_per_s": flops / time_s / 1e12,
            "kinds": kinds}


def kinds_text(r: dict, predict) -> str:
    """'swa 2 x 12.3 us (pred 4.5), csa 21 x ..., averaged over 43 layers': each layer kind's measured seconds and
    `predict(bytes, flops)`'s, for the attention check's detail."""
    parts = [f"{name} {k['layers']} x {k['time_s'] * 1e6:,.1f} us (pred {predict(k['bytes'], k['flops']) * 1e6:,.1f})"
             for name, k in r["kinds"].items()]
    return f"{', '.join(parts)}, averaged over {sum(k['layers'] for k in r['kinds'].values())} layers"
