"""The MoE all-to-all each engine is told to run, matched to what the step model prices.

perf/layer_comm.py `ffn_comm` prices the MoE dispatch/combine as a DeepEP-style all-to-all (FP8 dispatch where
the GPU has FP8, BF16 combine) exactly when attention is data-parallel (dp > 1) and the experts are
spread over the stage (ep > 1); otherwise it prices the engines' default collectives, which need no flag.

  vLLM 0.33.0    `--all2all-backend deepep_low_latency`, inside a node and across nodes. Not `pplx`: removed
                 in 0.33.0 (vllm/config/parallel.py silently falls back to allgather_reducescatter). Not
                 `deepep_high_throughput`: with DP it switches CUDA graphs off (vllm/config/compilation.py),
                 and the plan's decode step assumes graphs. The low-latency kernels dispatch FP8 for
                 block-FP8 checkpoints (fused_moe/all2all_utils.py) and use NVLink inside a node
                 (all2all.py: allow_nvlink_for_low_latency_mode). Their buffer holds --max-num-batched-tokens
                 tokens per rank (fused_moe/layer.py: max_num_tokens = max_num_batched_tokens).
  SGLang 0.5.23  `--moe-a2a-backend deepep` (deepep-mode auto: normal kernels for prefill, low-latency ones
                 for graph-captured decode) when ep == tp*dp. The low-latency dispatch holds
                 SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK tokens (srt/environ.py: 128; at most 1024,
                 token_dispatcher/deepep.py), raised here to the decode batch of one DP rank when larger.
sgl-project/sglang#7888 and #6017: DeepEP and NVSHMEM must be installed; the README says how to fall back.

On AMD Instinct the same layouts run MoRI (engines.parallel.a2a_library), priced per expert inside a node (its
published EP8 bandwidth, 307-436 GB/s per GPU, is about what xgmi_ring_efficiency gives) and node-limited across nodes
(perf.layer_comm.ep_all_to_all_s):
  vLLM 0.33.0    `--all2all-backend mori_low_latency` (one node: MoRI's IntraNode kernel either way; across
                 nodes its InterNodeV1LL), with AITER's fused MoE (VLLM_ROCM_USE_AITER=1, data/rocm.yaml: vLLM
                 asserts it, fused_moe/config.py); the op holds --max-num-batched-tokens tokens per rank.
  SGLang 0.5.23  `--moe-a2a-backend mori` (deepep-mode auto becomes normal: IntraNode up to 8 GPUs, InterNodeV1LL
                 or V1 above); SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (4096) raised to the per-rank chunked
                 prefill, which SGLang asserts it holds (arg_groups/moe_hook.py), or the decode batch when larger.
  Both           MORI_SHMEM_HEAP_SIZE set to the heap the memory model prices (memory.terms.mori_heap_allocated_bytes):
                 one op's need in whole GiB, at least MoRI's 2 GiB default, so the heap is what was planned
                 whichever MoRI release the image carries (newer ones default to 4 GiB).
"""

from __future__ import annotations

from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.core.units import GiB
from mla_planner.engines.parallel import (
    DEEPEP_SGLANG_DISPATCH_MAX,
    DEEPEP_SGLANG_DISPATCH_TOKENS,
    SGLANG_MORI_TOKENS,
    SGLANG_MORI_TOKENS_ENV,
    a2a_library,
    mori_tokens_per_rank,
    sglang_decode_tokens,
    uses_ep_all_to_all,
)
from mla_planner.memory.terms import mori_heap_allocated_bytes
from mla_planner.specs.knobs import Knobs, decode_query_len
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec

VLLM_BACKEND = {"deepep": "deepep_low_latency", "mori": "mori_low_latency"}
SGLANG_BACKEND = {"deepep": "deepep", "mori": "mori"}
# the expert dispatch each engine runs when no all-to-all is named: every rank's tokens gathered around the MoE
# (vLLM 0.33 config/parallel.py all2all_backend; SGLang 0.5.23 arg_groups/fields/exec_.py moe_a2a_backend)
DEFAULT_DISPATCH = {"vllm": ("--all2all-backend", "allgather_reducescatter", "vllm/config/parallel.py"),
                    "sglang": ("--moe-a2a-backend", "none", "srt/arg_groups/fields/exec_.py")}
SGLANG_DISPATCH_ENV = "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"
SGLANG_DISPATCH_DEFAULT = DEEPEP_SGLANG_DISPATCH_TOKENS
SGLANG_DISPATCH_MAX = DEEPEP_SGLANG_DISPATCH_MAX


def priced_as_all_to_all(layout: Layout) -> bool:
    """Whether the step model prices this layout's MoE as an all-to-all over the stage."""
    return uses_ep_all_to_all(layout)


def vllm_backend(layout: Layout, gpu) -> Optional[str]:
    return VLLM_BACKEND[a2a_library(gpu)] if priced_as_all_to_all(layout) else None


def sglang_backend(layout: Layout, gpu) -> Optional[str]:
    return SGLANG_BACKEND[a2a_library(gpu)] if priced_as_all_to_all(layout) else None


def sglang_dispatch_tokens(knobs: Knobs) -> int:
    """Tokens one DP rank sends through the low-latency dispatch in its largest decode step."""
    return sglang_decode_tokens(knobs.max_num_seqs, decode_query_len(knobs))


def sglang_dispatch_env(layout: Layout, knobs: Knobs, gpu) -> dict[str, str]:
    """DeepEP: {SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK: n} when the default 128 is too small; MoRI:
    {SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK: n} when its 4096 is; else {}."""
    if sglang_backend(layout, gpu) is None:
        return {}
    if a2a_library(gpu) == "mori":
        tokens = mori_tokens_per_rank("sglang", knobs.max_num_seqs, knobs.max_num_batched_tokens,
                                      decode_query_len(knobs))
        return {SGLANG_MORI_TOKENS_ENV: str(tokens)} if tokens > SGLANG_MORI_TOKENS else {}
    tokens = sglang_dispatch_tokens(knobs)
    if tokens > SGLANG_DISPATCH_MAX:
        raise PlanError(f"{layout.label}: a DP rank decodes up to {tokens} tokens per step, but SGLang's DeepEP "
                        f"low-latency dispatch takes at most {SGLANG_DISPATCH_MAX}; lower max_num_seqs")
    return {SGLANG_DISPATCH_ENV: str(tokens)} if tokens > SGLANG_DISPATCH_DEFAULT else {}


def mori_heap_env(engine: str, spec: ModelSpec, layout: Layout, knobs: Knobs, gpu) -> dict[str, str]:
    """{MORI_SHMEM_HEAP_SIZE: "<n>G"}, the heap the memory model prices, where the engine runs MoRI; else {}."""
    if engine not in ("vllm", "sglang") or a2a_library(gpu) != "mori" or not priced_as_all_to_all(layout):
        return {}
    tokens = mori_tokens_per_rank(engine, knobs.max_num_seqs, knobs.max_num_batched_tokens, decode_query_len(knobs))
    heap = mori_heap_allocated_bytes(engine, spec, layout, gpu, tokens)
    return {"MORI_SHMEM_HEAP_SIZE": f"{int(heap // GiB)}G"} if heap else {}


def low_latency_buffer_bytes(spec: ModelSpec, tokens_per_rank: int) -> int:
    """DeepEP's low-latency buffer per GPU (csrc/config.hpp LowLatencyLayout): two send and two receive
    buffers of experts x tokens messages, a message being hidden BF16 values plus hidden/128 scale pairs."""
    message_bytes = 2 * spec.hidden_size + 4 * (spec.hidden_size // 128)
    return 4 * spec.n_routed_experts * tokens_per_rank * message_bytes
