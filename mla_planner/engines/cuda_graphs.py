"""CUDA graphs: which decode batches each engine captures, and so the largest decode batch that runs from a
graph (past it decode runs eagerly, several times slower: vllm-project/vllm#16886,
MiaAI-Lab/DeepSeek-v4-Flash-One-DGX-Spark#7). The memory model charges each captured size
(memory.terms.graph_bytes); the metrics cap the batch at the range.
"""

from __future__ import annotations

from typing import Optional

from mla_planner.engines.memory_rules import EngineRules, sglang_cuda_graph_max_bs
from mla_planner.specs.knobs import Knobs, decode_query_len
from mla_planner.specs.layout import Layout
from mla_planner.specs.gpu import GPU


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
    top = knobs.cuda_graph_max_bs or sglang_cuda_graph_max_bs(gpu, layout.stage_gpus)
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, top + 1, 32))
    return sorted({s for s in sizes if s <= top} | {top})   # SGLang appends max_bs when it is off the grid


def graph_batch_cap(engine: str, gpu: GPU, layout: Layout, knobs: Optional[Knobs] = None) -> int:
    """The largest decode batch, in requests (per DP rank and micro-batch), the engine captures a CUDA graph
    for: the knobs' cuda_graph_max_bs, else the engine's default; a larger one runs eagerly, several times
    slower (vllm-project/vllm#16886). vLLM 0.33 counts tokens: 512, 1024 on Blackwell
    (`_set_cudagraph_sizes`, see vllm_capture_sizes), over the 1 + k tokens a request runs with MTP; SGLang
    0.5.23 counts requests: sglang_cuda_graph_max_bs by GPU memory and TP size."""
    if engine == "sglang":
        return (knobs.cuda_graph_max_bs if knobs is not None and knobs.cuda_graph_max_bs
                else sglang_cuda_graph_max_bs(gpu, layout.stage_gpus))
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
