"""The non-weight, non-KV memory of one GPU: activation peak, CUDA graphs, communicator buffers, GPU context.

Engine-neutral physics; `engines.memory_rules` decides which of these each engine charges to its KV budget.
Every constant is named with its source or the reasoning behind it. Sizes are bytes on one GPU.

Activation peak of a forward pass over T tokens (the engines profile it at max-num-batched-tokens /
chunked-prefill-size) = the residual stream that lives across layers + the largest per-layer working
set of {MLA prefill attention, dense FFN, fused MoE, logits + sampler}. The working sets follow the
tensors the engines allocate (shapes below); they run one after another, so their max, not their
sum, is what the allocator peaks at.
"""

from __future__ import annotations

from functools import lru_cache
from math import ceil

from mla_planner.core.resources import data_dir, read_data
from mla_planner.core.units import ACT_BYTES, GiB, MiB
from mla_planner.engines.dispatch import PAYLOAD_BYTES, dispatch_format, scale_bytes_per_token, uses_mori_epv2
from mla_planner.engines.parallel import MORI_DEFAULT_HEAP_BYTES, a2a_library, uses_ep_all_to_all
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.gpu import GPU
from mla_planner.specs.topology import Topology

RESIDUAL_STREAM_COPIES = 3     # hidden_states, residual, and the layer output being formed (vLLM
                               # DeepseekV2DecoderLayer: residual add + RMSNorm keep two, the MLP output a third)
MOE_CHUNK_TOKENS = 32768       # vLLM fused_experts processes at most VLLM_FUSED_MOE_CHUNK_SIZE tokens at a time
                               # (default 32768, vllm/envs.py 0.8.4); the workspace is sized for one chunk
LOGITS_BYTES_PER_VOCAB_ENTRY = 10  # per sampled row: bf16 gathered logits (2) + fp32 copy (4) + fp32 probs for
                                   # top-p/top-k (4); vLLM v1 Sampler (logits.to(float32), softmax)
SORT_SAMPLER_BYTES_PER_VOCAB_ENTRY = 28  # the same where top-k/top-p sorts the full logits (vLLM 0.11.1
    # v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p, run by the profile's dummy sampler with top_k = V - 1,
    # top_p = 0.9): alive when its scatter allocates are the bf16 logits (2), the fp32 copy (4), the sorted values
    # (4) and indices (8, int64), the top-k mask (1), the sorted probabilities (4), the top-p mask (1) and the
    # scattered result (4). A floor: the sort's own temporaries are not counted
GRAPH_BYTES_PER_CAPTURE = 16 * MiB  # executable-graph overhead per captured batch size: vLLM counts >= 1 MiB per
                                    # graph (gpu_model_runner.profile_cudagraph_memory); a piecewise capture of a
                                    # 61-layer model is ~62 graph pieces, so we take 16 MiB per size (estimate)


@lru_cache(maxsize=1)
def _platform() -> dict:
    return read_data(data_dir("platform_memory.yaml"))


def runtime_overhead_bytes(gpu: GPU) -> float:
    """The GPU context of one engine process: CUDA/HIP context with lazy module loading, the kernels loaded at
    start, cuBLAS handles (data/platform_memory.yaml `context`, by vendor and architecture, with sources)."""
    table = _platform()["context"]
    key = "amd" if gpu.vendor == "amd" else gpu.arch
    return table.get(key, table["default"]) * GiB


def comm_groups(layout: Layout, engine: str = "vllm", moe_group: bool = False) -> list[tuple[str, int, int]]:
    """(name, size, GPUs it spans) of the communicating groups with their own NCCL communicator that one GPU belongs to
    (each warmed up with an all-reduce when it is created: vLLM 0.33 and SGLang 0.5.23 pynccl.py).
    vLLM: attention TP (tp > 1), pipeline (pp > 1: the stages' GPUs, tp x pp), DCP (inside TP), the DP group (dp > 1)
    and, for an MoE model (`moe_group`: vLLM >= 0.11), the expert group over tp x dp, which vLLM builds for every MoE
    model (distributed/parallel_state.py: _EP, a communicator for each group larger than one GPU,
    device_communicators/cuda_communicator.py); vLLM numbers its ranks DP-major, then PP, then TP (parallel_state.py
    `all_ranks` reshaped to (dp, pp, pcp, tp)), so a DP group's GPUs lie tp x pp apart. SGLang: one TP group over
    tp x dp (under DP attention the attention-TP subgroups have no communicator of their own), pipeline and DCP."""
    stage = layout.tp * layout.dp
    if engine == "sglang":
        groups = [("tp", stage, stage), ("pp", layout.pp, stage * layout.pp), ("dcp", layout.dcp, layout.tp)]
    else:
        ep_span = (layout.dp - 1) * layout.pp * layout.tp + layout.tp     # one stage's TP blocks of every DP rank
        groups = [("tp", layout.tp, layout.tp), ("pp", layout.pp, layout.tp * layout.pp), ("dcp", layout.dcp, layout.tp),
                  ("dp", layout.dp, stage * layout.pp), ("ep", stage if moe_group else 1, ep_span)]
    return [(name, size, span) for name, size, span in groups if size > 1]


def node_link(topo: Topology) -> str:
    """The link class inside one NVLink domain (data/platform_memory.yaml `group`): NVLink by GPU generation,
    Infinity Fabric or PCIe."""
    kind = topo.intra_node.kind
    if kind in ("pcie", "xgmi"):
        return kind
    return "nvlink_ampere" if topo.gpu.arch == "ampere" else "nvlink"


def group_bytes(topo: Topology, span_gpus: int) -> float:
    """One communicating group of `span_gpus` consecutive GPUs: the node's link figure, and for a group spanning NVLink
    domains the across-nodes figure where it is smaller (the NICs bound its channels: NVIDIA/nccl#986)."""
    table = _platform()["group"]
    inside = table[node_link(topo)]
    return min(inside, table["across_nodes"]) if span_gpus > topo.domain_gpus else inside


def nvls_buffer_bytes(topo: Topology, size: int, span_gpus: int, mib_per_channel_head: float) -> float:
    """NCCL's NVLink SHARP buffers of one communicator of `size` GPUs spread evenly over `span_gpus` consecutive ones,
    on each of its GPUs, where NCCL allocates them as the communicator is created (engines.memory_rules
    `nvls_at_init_mib`, the MiB per channel and head of that NCCL release; src/transport/nvls.cc ncclNvlsSetup at
    v2.21.5-1, called from init.cc initTransportsRank): channels x 2 directions x `mib_per_channel_head` x heads.
    Heads: on one host, one per GPU of the communicator there (the NVLS graph search); across hosts, the GPU:NIC pairs
    the search finds, at most the NICs of a node (search.cc; connect.cc takes the least over nodes). Channels: the
    communicator's own count, by GPU on one host, NIC-bound across hosts (data/platform_memory.yaml `nvls`).
    Zero where NCCL keeps NVLS off: no NVLink SHARP (`Topology.uses_nvls`), or at most 2 of the communicator's GPUs
    on a host (ncclNvlsInit counts the communicator's GPUs there). Not rounded up to the multicast granularity (not
    published for these GPUs), and the NVLS trees' network buffers across hosts are not counted."""
    if mib_per_channel_head <= 0:
        return 0.0
    stride = max(span_gpus // size, 1)
    local = min(size, topo.gpus_per_node // stride) if stride <= topo.gpus_per_node else 1
    if not topo.uses_nvls or local <= 2:
        return 0.0
    table = _platform()["nvls"]["channels"]
    across = span_gpus > topo.gpus_per_node and topo.inter_node is not None
    channels = table["across_nodes"] if across else table.get(topo.gpu.name, table["default"])
    heads = min(local, topo.inter_node.nics_per_node) if across else local
    return float(channels * 2 * mib_per_channel_head * MiB * heads)


def nccl_buffer_bytes(layout: Layout, topo: Topology, engine: str = "vllm", moe_group: bool = False,
                      nvls_mib: float = 0.0) -> float:
    """NCCL / RCCL communicators + custom all-reduce buffers on one GPU: each of its groups (`comm_groups`) priced by
    the link it talks over (`group_bytes`; the per-group figures and their evidence: data/platform_memory.yaml),
    with its NVLink SHARP buffers where NCCL allocates them at creation (`nvls_mib` per channel and head:
    `nvls_buffer_bytes`).
    Outside torch's allocator; vLLM's worker comment: 'NCCL operations ... can use a few GB'."""
    return sum(group_bytes(topo, span) * GiB + nvls_buffer_bytes(topo, size, span, nvls_mib)
               for _, size, span in comm_groups(layout, engine, moe_group))


def profiled_communicator_bytes(layout: Layout, topo: Topology, nvls_mib: float = 0.0) -> float:
    """The NCCL / RCCL communicator a vLLM profile run creates for the TP group, where the logits all-gather goes
    through torch's process group (engines.memory_rules.EngineRules.torch_gather): vLLM builds that group without
    binding it to a device (distributed/parallel_state.py, VLLM_DISTRIBUTED_USE_SPLIT_GROUP off), so torch creates
    its communicator at the group's first collective, `base_device_communicator.all_gather`, inside the profiled
    window, and vLLM charges it as non-torch memory (vllm-project/vllm#25359: "NCCL buffer allocation shows up as
    non-torch memory increase during forward pass"). vLLM 0.26.0's CudaCommunicator.all_gather runs its own pynccl
    communicator instead, except on ROCm. Its size is not logged anywhere found: priced as one group of the TP size
    (`group_bytes`), an estimate, with its NVLink SHARP buffers where NCCL allocates them at creation (`nvls_mib`).
    Zero at TP 1; only the last pipeline stage gathers logits."""
    if layout.tp <= 1:
        return 0.0
    return group_bytes(topo, layout.tp) * GiB + nvls_buffer_bytes(topo, layout.tp, layout.tp, nvls_mib)


def attention_working_bytes(spec: ModelSpec, layout: Layout, tokens: int) -> float:
    """MLA prefill in the naive (MHA) form: q [T, H/tp, d_qk], k [T, H/tp, d_qk] (k_nope from wkv_b
    plus the shared k_pe), v [T, H/tp, d_v], o [T, H/tp, d_v], bf16 (vLLM MLACommonImpl._forward_prefill,
    vllm/v1/attention/backends/mla/common.py). GQA: q, k, v, o of the rank's heads."""
    heads = ceil(spec.num_attention_heads / layout.tp)
    v_dim = attention_of(spec).v_head_dim(spec)
    return float(tokens * heads * (2 * spec.qk_head_dim + 2 * v_dim) * ACT_BYTES)


def dense_ffn_working_bytes(spec: ModelSpec, tp: int, tokens: int) -> float:
    """SwiGLU FFN: gate/up output [T, 2 I/tp] plus the activated [T, I/tp], bf16."""
    inter = ceil(spec.intermediate_size / tp)
    return float(tokens * 3 * inter * ACT_BYTES)


def moe_working_bytes(spec: ModelSpec, layout: Layout, tokens: int) -> float:
    """vLLM fused_experts workspaces for M = min(T, MOE_CHUNK_TOKENS) tokens, top-k, local intermediate
    I = moe_intermediate/moe_tp: cache13 M k max(2I, d) bf16 (shared by w13 output and w2 output),
    cache2 M k I bf16, the fp8-quantized input M d and quantized cache2 M k I (1 byte each), and the
    shared-expert output T d bf16. Under DP attention the MoE sees the all-gathered tokens of all
    dp ranks (vLLM default all2all backend allgather_reducescatter)."""
    if not spec.is_moe:
        return 0.0
    moe_tokens = tokens * layout.dp
    m, k, d = min(moe_tokens, MOE_CHUNK_TOKENS), spec.num_experts_per_tok, spec.hidden_size
    inter = ceil(spec.moe_intermediate_size / layout.moe_tp)
    cache13 = m * k * max(2 * inter, d) * ACT_BYTES
    cache2 = m * k * inter * ACT_BYTES
    quantized = (m * d + m * k * inter) * (1 if spec.expert_dtype in ("fp8", "int8") else 0)
    shared = moe_tokens * d * ACT_BYTES if spec.n_shared_experts else 0
    return float(cache13 + cache2 + quantized + shared)


def logits_working_bytes(spec: ModelSpec, tp: int, rows: int, sampler_sorts: bool = False) -> float:
    """Logits of the sampled rows on the last stage: the local lm_head output rows x V/tp bf16, then
    the gathered rows x V x LOGITS_BYTES_PER_VOCAB_ENTRY (bf16 gathered, fp32 logits, fp32 probs), or
    SORT_SAMPLER_BYTES_PER_VOCAB_ENTRY where the engine's top-k/top-p sorts them (`sampler_sorts`)."""
    vocab = spec.vocab_size
    per_entry = SORT_SAMPLER_BYTES_PER_VOCAB_ENTRY if sampler_sorts else LOGITS_BYTES_PER_VOCAB_ENTRY
    return float(rows * ceil(vocab / tp) * ACT_BYTES + rows * vocab * per_entry)


def activation_peak_bytes(spec: ModelSpec, layout: Layout, tokens: int, logit_rows: int, last: bool,
                          dense_tp: int | None = None, sampler_sorts: bool = False) -> float:
    """Peak transient memory of one forward over `tokens` tokens on one GPU: residual stream
    (RESIDUAL_STREAM_COPIES x T x d bf16) + max(attention, dense FFN, MoE, logits on the last stage)."""
    residual = RESIDUAL_STREAM_COPIES * tokens * spec.hidden_size * ACT_BYTES
    working = [attention_working_bytes(spec, layout, tokens),
               dense_ffn_working_bytes(spec, dense_tp or layout.tp, tokens) if spec.num_dense_layers else 0.0,
               moe_working_bytes(spec, layout, tokens)]
    if last:
        working.append(logits_working_bytes(spec, dense_tp or layout.tp, logit_rows, sampler_sorts))
    return float(residual + max(working))


def cuda_graph_bytes(spec: ModelSpec, layout: Layout, capture_sizes: list[int], modes: int, last: bool,
                     dense_tp: int | None = None) -> float:
    """Graph memory pool + per-graph overhead. The pool holds the intermediates of the largest captured
    batch (graphs are captured largest first and share one pool, vLLM `capture_model`), i.e. a decode
    forward at max(capture_sizes) tokens; each captured size in each mode adds GRAPH_BYTES_PER_CAPTURE."""
    if not capture_sizes or not modes:
        return 0.0
    top = max(capture_sizes)
    pool = activation_peak_bytes(spec, layout, top, top, last, dense_tp)
    return float(pool + modes * len(capture_sizes) * GRAPH_BYTES_PER_CAPTURE)


def mori_heap_bytes(spec: ModelSpec, ep: int, tokens_per_rank: int, fmt: str) -> float:
    """MoRI's symmetric-heap need for one EPv1 dispatch/combine op on one GPU (AMD's MoE all-to-all, the engines' EP
    path on ROCm). ROCm/mori src/ops/dispatch_combine/dispatch_combine.cpp (EpDispatchCombineHandle::InitializeShmemBuf
    and InitializeOrderMapBuf), for M = ep x tokens_per_rank receivable tokens: three staging buffers of M x (hidden x
    2 B + (4 + 4) B x top-k + scales), two token buffers of M x hidden x 2 B, five weight / index buffers of M x top-k x
    4 B, two scale buffers, and a 4-byte map of M x local experts. The token buffers are sized for BF16 whatever the
    dispatch format (both engines pass the BF16 input's size: vLLM all2all_utils.py, SGLang moriep.py
    max_token_type_size); the scales are the format's (engines.dispatch: hidden/32 bytes for FP8's fp32 per 128 and
    FP4's e8m0 per 32 alike, none for BF16). Tokens per rank: vLLM's --max-num-batched-tokens, SGLang's
    SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK."""
    d, k = spec.hidden_size, spec.num_experts_per_tok
    scales = scale_bytes_per_token(fmt, d)
    m = ep * tokens_per_rank
    return float(m * (5 * d * ACT_BYTES + 44 * k + 5 * scales) + 4 * m * (spec.n_routed_experts // ep))


def mori_epv2_arena_bytes(spec: ModelSpec, ep: int, tokens_per_rank: int, fmt: str) -> float:
    """The cco arena of SGLang's MoRI EPv2 op on one GPU (engines.dispatch.uses_mori_epv2), as SGLang 0.5.23 bounds
    it (layers/moe/token_dispatcher/moriep.py _epv2_arena_bytes): for every receivable row (ep x tokens_per_rank,
    SGLANG_MORI_PREALLOC_MAX_RECV_TOKENS unset) the dispatched token in `fmt` (hidden/2 B for FP4), its BF16 combine
    (hidden x 2 B), its scales padded to 128 B, top-k x 8 B of weights and indices and a 4-byte count, plus 12 B per
    rank and 12 regions aligned to 256 B. ROCm/mori's EpDispatchCombineConfig gives the receive cap
    (effective_max_recv = ep x tokens_per_rank by default) and the token sizes. The communicator's window above it
    only reserves address space (moriep.py _epv2_per_rank_vmm_gb)."""
    d, k = spec.hidden_size, spec.num_experts_per_tok
    rows = ep * tokens_per_rank
    scale_row = -(-scale_bytes_per_token(fmt, d) // 128) * 128
    per_row = int(d * PAYLOAD_BYTES[fmt]) + d * ACT_BYTES + scale_row + 8 * k + 4
    return float(rows * per_row + 12 * ep + 12 * 256)


def mori_heap_allocated_bytes(engine: str, spec: ModelSpec, layout: Layout, gpu, tokens_per_rank: int) -> float:
    """The symmetric heap MoRI allocates on one GPU where `engine` runs its EPv1 op under DP attention + EP on AMD (0
    otherwise, SGLang's EPv2 included): MORI_SHMEM_HEAP_SIZE, which the planner's scripts set to one op's need
    (`mori_heap_bytes` in the engine's dispatch format; the engines build one op for every MoE layer's shape) rounded
    up to whole GiB, never below MoRI's 2 GiB default. Outside both engines' budgets: vLLM allocates it at distributed
    init, before its memory snapshot (v1/worker/gpu_worker.py, like the NCCL buffers); SGLang's EPv1 op (DeepSeek-R1/V3,
    and V4 across hosts) builds it at the first dispatch, after the KV pool is sized (moriep.py init_mori_op)."""
    if not (spec.is_moe and uses_ep_all_to_all(layout)) or a2a_library(gpu) != "mori" \
            or uses_mori_epv2(engine, spec, layout, gpu):
        return 0.0
    need = mori_heap_bytes(spec, layout.ep, tokens_per_rank, dispatch_format(engine, spec, gpu))
    return float(max(MORI_DEFAULT_HEAP_BYTES, ceil(need / GiB) * GiB))


A2A_WORDS = {"deepep_buffer": "the DeepEP buffer", "mori_epv2_arena": "MoRI's EPv2 arena"}


def a2a_memory_bytes(engine: str, spec: ModelSpec, layout: Layout, gpu, deepep_tokens: int,
                     mori_tokens: int) -> tuple[str, float, float]:
    """(The memory term charged like the weights and its bytes: DeepEP's buffer, or SGLang's MoRI EPv2 arena; the bytes
    outside the budget: MoRI's EPv1 heap) of the EP all-to-all `gpu`'s engines run (engines.parallel.a2a_library)."""
    if a2a_library(gpu) != "mori":
        return "deepep_buffer", deepep_buffer_bytes(spec, layout, deepep_tokens), 0.0
    if uses_mori_epv2(engine, spec, layout, gpu):
        fmt = dispatch_format(engine, spec, gpu)
        return "mori_epv2_arena", mori_epv2_arena_bytes(spec, layout.ep, mori_tokens, fmt), 0.0
    return "deepep_buffer", 0.0, mori_heap_allocated_bytes(engine, spec, layout, gpu, mori_tokens)


def deepep_buffer_bytes(spec: ModelSpec, layout: Layout, tokens: int) -> float:
    """DeepEP low-latency RDMA buffer (NVSHMEM, outside torch's allocator) on one GPU:
    4 x experts x tokens x (2 x hidden + hidden/32) bytes: send and receive halves, double-buffered, each
    holding every expert's slot of bf16 combine messages (2 x hidden) or fp8 dispatch messages with one
    fp32 scale per 128 values. Source: DeepEP `get_low_latency_rdma_size_hint` (csrc/config.hpp
    LowLatencyLayout); sgl-project/sglang PR #28994 lists it among the hidden buffers. Zero without DeepEP."""
    if not uses_ep_all_to_all(layout) or not spec.is_moe:
        return 0.0
    d = spec.hidden_size
    return float(4 * spec.n_routed_experts * tokens * (2 * d + d // 32))
