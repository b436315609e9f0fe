"""CUDA graphs: which decode batches each engine captures, and so the largest decode batch that runs from a
graph (past it decode runs eagerly, several times slower: vllm-project/vllm#16886,
MiaAI-Lab/DeepSeek-v4-Flash-One-DGX-Spark#7). The memory model charges each captured size
(memory.terms.graph_bytes); the metrics cap the batch at the range.
"""

from __future__ import annotations

from math import ceil
from typing import Optional

from mla_planner.engines.backends import Backend, backend, usable_backends
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.memory_rules import EngineRules, parse_version
from mla_planner.engines.sglang_defaults import sglang_decode_max_bs
from mla_planner.engines.sparse import is_sparse
from mla_planner.specs.gpu import GPU
from mla_planner.specs.knobs import Knobs, decode_query_len
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec

INDEX_BYTES = 4           # an int32 page index
LOGITS_ENTRY_BYTES = 4    # the fp32 logits a decode graph writes


def vllm_capture_sizes(knobs: Knobs, gpu: GPU) -> list[int]:
    """vLLM 0.33 `_set_cudagraph_sizes`, in tokens: max = min(max_num_seqs x q x 2, 512 (1024 on Blackwell),
    max_num_batched_tokens), or min(--max-cudagraph-capture-size, max_num_batched_tokens) when given;
    sizes 1, 2, 4, then every 8 below 256, then every 16; with MTP (q = 1 + k query tokens per request)
    rounded up to multiples of q (the V1 runner's `adjust_cudagraph_sizes_for_spec_decode`; 0.33's default V2
    runner rounds its FULL decode graphs so and keeps the grid for PIECEWISE, about one size apart)."""
    if not knobs.cuda_graphs:
        return []
    q = decode_query_len(knobs)
    top = min(knobs.cuda_graph_max_bs or min(knobs.max_num_seqs * q * 2, vllm_default_capture_tokens(gpu)),
              knobs.max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= top] + list(range(8, min(top + 1, 256), 8)) + list(range(256, top + 1, 16))
    if q > 1:   # whole requests only; vLLM keeps q itself when every size rounds past the top
        sizes = sorted({r for r in (-(-s // q) * q for s in sizes) if r <= top}) or ([q] if q <= top else [])
    return sizes


def vllm_default_capture_tokens(gpu: GPU) -> int:
    """vLLM 0.33's default ceiling on a captured batch, in tokens: 1024 on data-centre Blackwell, else 512."""
    return 1024 if gpu.arch == "blackwell" else 512


def sglang_capture_sizes(knobs: Knobs, gpu: GPU, layout: Layout) -> list[int]:
    """SGLang decode graph batch sizes: 1, 2, 4, 8, 12, every 8 to 256, every 16 to 512, every 32 up to
    cuda_graph_max_bs, or --cuda-graph-max-bs-decode when given
    (cuda_graph_hook.generate_decode_cuda_graph_batch_sizes)."""
    if not knobs.cuda_graphs:
        return []
    top = sglang_decode_max_bs(gpu, layout, knobs)
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, top + 1, 32))
    return sorted({s for s in sizes if s <= top} | {top})   # SGLang appends max_bs when it is off the grid


def graph_batch_cap(engine: str, gpu: GPU, layout: Layout, knobs: Optional[Knobs] = None) -> int:
    """The largest decode batch, in requests (per DP rank and micro-batch), the engine captures a CUDA graph
    for: the knobs' cuda_graph_max_bs, else the engine's default; a larger one runs eagerly, several times
    slower (vllm-project/vllm#16886). vLLM 0.33 counts tokens: 512, 1024 on Blackwell
    (`_set_cudagraph_sizes`, see vllm_capture_sizes), over the 1 + k tokens a request runs with MTP; SGLang
    0.5.23 counts requests: sglang_decode_max_bs."""
    if engine == "sglang":
        return sglang_decode_max_bs(gpu, layout, knobs)
    q = decode_query_len(knobs) if knobs is not None else 1
    return ((knobs.cuda_graph_max_bs if knobs is not None and knobs.cuda_graph_max_bs
             else vllm_default_capture_tokens(gpu)) // q)


def capture_plan(rules: EngineRules, knobs: Knobs, gpu: GPU, layout: Layout) -> tuple[list[int], int]:
    """(captured sizes in tokens, graphs per size): vLLM >= 0.21 FULL_AND_PIECEWISE captures each size twice
    (FULL decode + PIECEWISE), older vLLM piecewise only; SGLang one decode graph per size. With MTP a SGLang
    size of bs requests runs bs x (1 + k) tokens (decode_cuda_graph_runner.py), and the drafter captures its
    own set at the same sizes (vLLM target_dependent_ar/speculator.py; SGLang's draft-extend runner,
    eagle_worker_v2.py)."""
    sets = 2 if knobs.mtp else 1
    if rules.engine == "sglang":
        q = decode_query_len(knobs)
        return [s * q for s in sglang_capture_sizes(knobs, gpu, layout)], sets
    return vllm_capture_sizes(knobs, gpu), (2 if rules.graphs_in_budget else 1) * sets


def sglang_graph_buffer_bytes(rules: EngineRules, spec: ModelSpec, knobs: Knobs, gpu: GPU, dcp: int, sizes: list[int],
                              last: bool) -> float:
    """Bytes SGLang's decode CUDA graphs keep allocated on one GPU beside the graph pool, for the captured SIZES (in
    tokens, capture_plan's); 0 for vLLM, whose estimate profiles its own capture. The capture log's "mem usage" is
    the free memory the graph runner takes (0.5.23 model_runner_components/cuda_graph_setup.py capture_decode_graph),
    so these count with the pool:
      logits: one fp32 [rows, vocab] buffer every captured size writes into, rows the largest size's tokens, on every
        pipeline stage (sgl-project/sglang PR #8579; 0.5.23 graph_shared_output.py, one per process since PR #29779,
        allocated by each decode graph runner whatever its stage). Before 0.5.0 each captured size kept its own fp32
        [rows, vocab] output in the pool, on the last stage (0.4.x cuda_graph_runner.py `output_buffers[bs] = out`,
        logits_processor.py's `.float()` copy): 4 x vocab x the sum of the sizes' rows. PR #8579 (opened
        2025-07-30) reports GLM-4.5-Air TP4's graphs going from 5.16 to 2.89 GB with it; where in 0.4.10's
        post-releases it landed is not established, so releases before 0.5.0 are priced with per-size outputs;
      index tables (every stage): what the attention backend's init_cuda_graph_state allocates for the largest size,
        data/backends.yaml `graph_tables` (FA3's, FlashMLA's and trtllm_mla's int32 page tables, one entry per page
        of the context and request; FlashInfer MLA's per token; Triton's int64 per query token; AITER's indices and
        uint8 mask); with MTP, FA3 keeps three more page tables (draft decode, target verify, draft extend:
        flashattention_backend.py); before 0.5.0 FA3 also kept a copy per captured size (`decode_cuda_graph_metadata
        [bs]`; PR #8579 reports 0.95 GB "with #8567"); DeepSeek Sparse Attention keeps a page-size-1 int32 table of
        [tokens, context] where its fused top-k cannot drop it, on ROCm and with MTP (dsa_backend.py
        init_cuda_graph_state, dsa_drop_wide_page_table).
    DeepSeek-V4's own graph buffers are not priced (its pools are SGLang's V4 code, not these tables)."""
    if rules.engine != "sglang" or not sizes:
        return 0.0
    per_size = parse_version(rules.version) < (0, 5, 0)
    logits = LOGITS_ENTRY_BYTES * spec.vocab_size * (sum(sizes) if per_size else max(sizes))
    logits = logits if last or not per_size else 0
    if is_compressed(spec):
        return float(logits)
    q, context = decode_query_len(knobs), knobs.max_model_len
    pages = ceil(context / knobs.block_size)
    slots = {"requests": max(sizes) // q, "tokens": max(sizes)}
    if is_sparse(spec):   # DSA's backend: its page table, and the wide one where the fused top-k cannot drop it
        wide = INDEX_BYTES * context * slots["tokens"] if gpu.vendor == "amd" or knobs.mtp else 0
        return float(logits + INDEX_BYTES * pages * slots["requests"] + wide)
    b = _backend(knobs, gpu, dcp)
    index = sum(entry * (pages if per == "page" else context) * slots[rows] for entry, per, rows in b.graph_tables)
    if b.name == "fa3":
        copies = (3 * slots["requests"] if knobs.mtp else 0) + (sum(sizes) // q if per_size else 0)
        index += INDEX_BYTES * pages * copies
    return float(logits + index)


def _backend(knobs: Knobs, gpu: GPU, dcp: int) -> Backend:
    """The backend SGLang runs for these knobs: the pinned one, else the first it would choose that takes the page
    size (data/backends.yaml auto_priority; FA3 was SGLang's MLA default on Hopper in 0.4.x too, FlashInfer on
    Blackwell: model_runner.py model_specific_adjustment, "We will use FA3 backend on hopper")."""
    if knobs.attention_backend:
        return backend("sglang", knobs.attention_backend)
    usable = [b for b in usable_backends("sglang", gpu, knobs.kv_cache_dtype, dcp) if b.accepts_block(knobs.block_size)]
    return usable[0] if usable else backend("sglang", "triton")
