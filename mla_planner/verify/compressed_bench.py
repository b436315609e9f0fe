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
entries before it point at block 0 and are never dereferenced. Cached values randn / 10 clipped to [-1, 1]; the
query drawn so that its scores spread by bench.SCORE_STD (a kernel that gets the scores wrong moves the output);
the attention sink (the model keeps an fp32 sink per head) randn plus the scores' typical log-sum-exp over the
window, so that it takes a real share of the softmax; softmax scale head_dim^-1/2 (DeepSeek-V4
`inference/model.py`).

Bytes at the timed dtype: the kernel keeps its 512-wide rows, queries and outputs, and index_head_dim-wide index
keys, in the timed dtype (bf16 on a GPU, fp32 on a CPU), where the engine reads 584-byte fp8 rows and 132-byte
fp8 index keys. So `layer_core`'s bytes are recounted (`timed_layer_cost`): each row it counts (those attended
and the new token's written) at head_dim x element size in place of 584 B, each index key scored at
index_head_dim x element size in place of 132 B, and its bf16 queries and outputs x element size / 2 (as
sparse_bench scales its bf16 latent and activations). FLOPs are `layer_core`'s unchanged.
"""

from __future__ import annotations

import math
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
from mla_planner.verify.bench import SCORE_STD, query_std, time_fn
from mla_planner.verify.compressed_kernel import CompressedLayerCache, compressed_decode, rows_gathered, uses_indexer
from mla_planner.verify.kernel import PagedLatentCache
from mla_planner.verify.kv_storage import StoredKV
from mla_planner.verify import reference

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


def _check(q, cache: CompressedLayerCache, ratio: int, sink, scale: float, window: int, topk: int, q_index,
           weights, result) -> reference.OutputCheck:
    """One layer kind's output on the first sequences against the naive fp64 reference (module docstring)."""
    n = min(reference.SLICE_SEQUENCES, q.shape[0])
    precision = reference.precision_of(result.out)
    rounding = {"fp32": 1e-5, "bf16": 2.0 ** -7}[precision]
    problems, outs, lses = [], [], []
    for b in range(n):
        T = int(cache.swa.seqlens[b])
        win = torch.arange(max(T - window, 0), T)
        got_win = result.window_pos[b][result.window_pos[b] >= 0].cpu()
        if not torch.equal(got_win.sort().values, win):
            problems.append(f"sequence {b}: read window positions {got_win.tolist()[:4]}..., not {T - window}..{T - 1}")
        entries = T // ratio if ratio > 1 else 0
        comp = result.compressed_pos[b][result.compressed_pos[b] >= 0].cpu()
        if uses_indexer(ratio):
            keys = reference.rows_of(StoredKV("bf16", cache.index_keys), cache.compressed_table[b],
                                     torch.arange(entries))
            scores = reference.index_scores(q_index[b], weights[b], keys)
            limit = rounding * float(scores.abs().max()) if entries else 0.0
            if why := reference.choice_problem(result.compressed_pos[b], scores, topk, limit):
                problems.append(f"sequence {b}: the CSA indexer {why}")
        elif not torch.equal(comp.sort().values, torch.arange(entries)):
            problems.append(f"sequence {b}: read {comp.numel()} compressed rows, not the {entries} complete ones")
        rows = [reference.rows_of(StoredKV("bf16", cache.swa.kv), cache.swa.block_table[b], win)]
        if comp.numel():
            rows.insert(0, reference.rows_of(StoredKV("bf16", cache.compressed), cache.compressed_table[b], comp))
        o, lse = reference.attend(q[b], torch.cat(rows), scale, q.shape[-1], sink)
        outs.append(o)
        lses.append(lse)
    return reference.check_output(f"{RATIOS[ratio]} attention", result.out[:n], result.lse[:n], torch.stack(outs),
                                  torch.stack(lses), precision, tuple(problems))


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
    flops, the achieved rates), the figure the step model's per-layer attention core stands for. Each kind's output
    is checked first (`output_check`: the first failing kind's, else the last); a kind that fails is not timed and
    the average's `time_s` is None."""
    device = torch.device(device)
    heads = spec.num_attention_heads // layout.tp
    gen = torch.Generator(device).manual_seed(1)
    scale = spec.head_dim ** -0.5
    q = (torch.randn(batch, heads, spec.head_dim, generator=gen, device=device)
         * query_std(scale, spec.head_dim)).to(dtype)                        # scores spread (bench.SCORE_STD)
    # the sink near the scores' log-sum-exp over the window, so that it takes a real share of the softmax
    sink = torch.randn(heads, generator=gen, device=device) + math.log(spec.sliding_window) + SCORE_STD ** 2 / 2
    index = None
    if 4 in layer_ratios(spec):
        index = (_rand(gen, (batch, spec.index_n_heads, spec.index_head_dim), dtype, device),
                 torch.rand(batch, spec.index_n_heads, generator=gen, device=device).to(dtype))
    elem = q.element_size()
    layers = Counter(layer_ratios(spec))
    kinds, checked = {}, None
    for ratio in sorted(layers):
        cache = random_layer_cache(spec, ratio, batch, context, dtype, device)
        q_index, weights = index if uses_indexer(ratio) else (None, None)
        step = partial(compressed_decode, q, cache, ratio, sink, scale, spec.sliding_window, spec.index_topk or 0,
                       q_index, weights)
        result = step()
        gathered = rows_gathered(result)[0]
        kind_check = _check(q, cache, ratio, sink, scale, spec.sliding_window, spec.index_topk or 0, q_index,
                            weights, result)
        checked = kind_check if checked is None or checked.ok else checked
        cost = timed_layer_cost(spec, layout, ratio, batch, context, elem)
        kinds[RATIOS[ratio]] = {"ratio": ratio, "layers": layers[ratio], "rows": list(gathered),
                                "time_s": time_fn(step, device, warmup, repeats) if kind_check.ok else None,
                                "bytes": cost.bytes, "flops": cost.flops, "output_check": kind_check.text}
    n = sum(layers.values())
    moved, flops = (sum(k[key] * k["layers"] for k in kinds.values()) / n for key in ("bytes", "flops"))
    time_s = sum(k["time_s"] * k["layers"] for k in kinds.values()) / n if checked.ok else None
    rates = ({"achieved_gb_per_s": moved / time_s / 1e9, "achieved_tflop_per_s": flops / time_s / 1e12}
             if time_s else {"achieved_gb_per_s": None, "achieved_tflop_per_s": None})
    return {"impl": "compressed", "path": "torch-compressed", "batch": batch, "context": context, "heads": heads,
            "top_k": spec.index_topk, "window": spec.sliding_window, "block_size": VLLM_BLOCK_TOKENS,
            "dtype": str(dtype).removeprefix("torch."), "kv": f"{str(dtype).removeprefix('torch.')} rows",
            "time_s": time_s, "bytes": moved, "flops": flops, "output_check": checked, **rates, "kinds": kinds}


def kinds_text(r: dict, predict) -> str:
    """'swa 2 x 12.3 us (pred 4.5), csa 21 x ..., averaged over 43 layers': each layer kind's measured seconds and
    `predict(bytes, flops)`'s, for the attention check's detail."""
    parts = [f"{name} {k['layers']} x {k['time_s'] * 1e6:,.1f} us (pred {predict(k['bytes'], k['flops']) * 1e6:,.1f})"
             if k["time_s"] is not None else f"{name} {k['layers']} x not timed (output mismatch)"
             for name, k in r["kinds"].items()]
    return f"{', '.join(parts)}, averaged over {sum(k['layers'] for k in r['kinds'].values())} layers"
