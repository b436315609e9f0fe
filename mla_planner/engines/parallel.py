"""How each engine runs a layout's parts in parallel: whether its MoE all-to-all goes through an EP all-to-all
library (DeepEP on NVIDIA, MoRI on AMD) and where that cannot run, and over how many GPUs each dense part is split
under DP attention."""

from __future__ import annotations

from mla_planner.core.units import GiB
from mla_planner.specs.layout import Layout, rdma_between_nodes

MORI_DEFAULT_HEAP_BYTES = 2 * GiB     # MoRI's default symmetric heap (vLLM 0.33 all2all.py; 4 GiB in newer MoRI)
SGLANG_MORI_TOKENS_ENV = "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK"
SGLANG_MORI_TOKENS = 4096             # its default (srt/environ.py 0.5.23)
DEEPEP_SGLANG_DISPATCH_TOKENS = 128   # SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK default (srt/environ.py 0.5.23)
DEEPEP_SGLANG_DISPATCH_MAX = 1024     # its hard limit (token_dispatcher/deepep.py)


def uses_ep_all_to_all(layout: Layout) -> bool:
    """DP attention with the experts spread over the whole stage: the engines run an EP all-to-all (`a2a_library`:
    vLLM --all2all-backend deepep_low_latency / mori_low_latency, SGLang --moe-a2a-backend deepep / mori;
    launch/a2a.py), and the step model prices exactly that (perf.layer_comm.ffn_comm)."""
    return layout.dp > 1 and layout.ep > 1 and layout.ep == layout.stage_gpus


def a2a_library(gpu) -> str:
    """The EP all-to-all library the engines run on `gpu`: DeepEP on NVIDIA; MoRI (ROCm/mori) on AMD Instinct,
    the only one vLLM 0.33 takes on ROCm (distributed/device_communicators/all2all.py: gfx942 / gfx950) and the one
    SGLang 0.5.23 ships for it (--moe-a2a-backend mori)."""
    return "mori" if gpu.vendor == "amd" else "deepep"


def uses_deepep(layout: Layout, gpu) -> bool:
    """The EP all-to-all runs DeepEP (NVIDIA), whose buffer and limits the engines size by their token budgets."""
    return uses_ep_all_to_all(layout) and a2a_library(gpu) == "deepep"


def deepep_experts_problem(engine: str, spec, layout: Layout) -> str:
    """Why `engine` cannot run this checkpoint's experts behind DeepEP ('' when it can). SGLang 0.5.23 runs
    int4 group-quantized experts (AWQ: layers/quantization/awq/schemes/awq_moe.py; compressed-tensors W4A16:
    compressed_tensors_wNa16_moe.py) on its Marlin MoE runner, registered for the standard dispatch only
    (layers/moe/moe_runner/marlin.py: `register_fused_func("none", "marlin")`, no DeepEP permute), so DP
    attention + EP over DeepEP has no kernel for them."""
    if engine == "sglang" and spec.is_moe and spec.expert_dtype == "int4" and uses_ep_all_to_all(layout):
        return ("SGLang 0.5.23 runs int4 experts (AWQ, compressed-tensors W4A16) on its Marlin MoE runner, which "
                "has no DeepEP path (layers/moe/moe_runner/marlin.py)" + NO_FALLBACK)
    if engine == "sglang" and spec.is_moe and spec.expert_dtype == "int8" and uses_ep_all_to_all(layout):
        return ("SGLang 0.5.23 runs INT8 experts (w8a8_int8, blockwise_int8) on its Triton MoE runner with the "
                "standard dispatch only (layers/moe/moe_runner/triton.py: no DeepEP permute)" + NO_FALLBACK)
    return ""


NO_FALLBACK = ("; DP attention with ep=1 (the MoE tensor-parallel over the stage, tokens all-gathered and "
               "reduce-scattered) runs without it")


def redundant_experts_problem(spec, layout: Layout, redundant: int) -> str:
    """Why EPLB's `redundant` extra experts per MoE layer cannot run on `layout` ('' when they can): they need
    expert parallelism (SGLang asserts ep_size > 1 with EPLB, vLLM needs --enable-expert-parallel: config/parallel.py),
    and the physical experts (the checkpoint's and the copies) are placed evenly over the EP ranks."""
    if not redundant:
        return ""
    if layout.ep <= 1:
        return f"{redundant} redundant experts need expert parallelism; {layout.label} has none"
    if (spec.n_routed_experts + redundant) % layout.ep:
        return (f"{spec.n_routed_experts} experts + {redundant} redundant do not spread evenly over EP {layout.ep} "
                "(the engines place the same number of physical experts on every EP rank)")
    return ""


def a2a_problem(engine: str, layout: Layout, topo) -> str:
    """Why the EP all-to-all cannot run this layout on this hardware ('' when it can). DeepEP's normal
    kernels need NVLink inside a node (deepseek-ai/DeepEP#216: PCIe L20 cannot use it),
    its low-latency kernels reach other GPUs over NVLink or, through NVSHMEM, over RDMA (InfiniBand or
    RoCE). SGLang's deepep mode `auto` prefills with the normal kernels; vLLM's deepep_low_latency uses
    the low-latency ones only. MoRI (AMD) runs inside a node over Infinity Fabric and between nodes over its own
    RDMA transport (Pensando, Thor2, ConnectX-7 NICs: ROCm/mori README)."""
    if not uses_ep_all_to_all(layout):
        return ""
    if a2a_library(topo.gpu) == "mori":
        return ("MoRI (the all-to-all of DP attention + EP on AMD) between nodes needs an RDMA fabric (InfiniBand or "
                "RoCE); this cluster's nodes talk over " + (topo.inter_node.fabric if topo.inter_node else "nothing")
                + NO_FALLBACK) if layout.stage_gpus > topo.domain_gpus and not rdma_between_nodes(topo) else ""
    rdma, intra_kind = rdma_between_nodes(topo), topo.intra_node.kind
    fabric = topo.inter_node.fabric if topo.inter_node else None
    if intra_kind == "pcie" and engine == "sglang":
        return ("SGLang's DeepEP all-to-all (DP attention + EP) prefills with DeepEP's normal kernels, which need "
                "NVLink between the GPUs; this node has PCIe only")
    if layout.stage_gpus > topo.domain_gpus and not rdma:
        return ("DeepEP (the all-to-all of DP attention + EP) between nodes needs an RDMA fabric (InfiniBand or "
                "RoCE); this cluster's nodes talk over " + (fabric or "nothing")
                + NO_FALLBACK)
    if intra_kind == "pcie" and not rdma:
        return ("DeepEP (the all-to-all of DP attention + EP) needs NVLink or an RDMA NIC (InfiniBand/RoCE, "
                "through NVSHMEM) between the GPUs; this cluster has PCIe only" + (" and Ethernet" if fabric else "")
                + NO_FALLBACK)
    return ""


def deepep_dispatch_tokens(engine: str, max_num_seqs: int, max_num_batched_tokens: int, query_len: int = 1) -> int:
    """Tokens per rank the low-latency buffer is sized for. vLLM 0.33: max_num_batched_tokens
    (fused_moe/layer.py: max_num_tokens). SGLang: the decode batch of one DP rank (x 1 + k with MTP verify),
    at least its default 128 and at most 1024 (launch/a2a.py raises the env var to that)."""
    if engine == "vllm":
        return max_num_batched_tokens
    return min(max(sglang_decode_tokens(max_num_seqs, query_len), DEEPEP_SGLANG_DISPATCH_TOKENS),
               DEEPEP_SGLANG_DISPATCH_MAX)


def mori_tokens_per_rank(engine: str, max_num_seqs: int, max_num_batched_tokens: int, query_len: int = 1) -> int:
    """Tokens per rank a MoRI op is built for. vLLM 0.33: --max-num-batched-tokens (all2all_utils.py: the op's
    max_num_inp_token_per_rank is the fused MoE's max_num_tokens). SGLang 0.5.23: SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_
    PER_RANK, 4096 unless raised, which it asserts holds the per-rank chunked prefill (arg_groups/moe_hook.py) and
    which a decode step's batch must fit (launch/a2a.py raises it to the larger of the two)."""
    if engine == "vllm":
        return max_num_batched_tokens
    return max(SGLANG_MORI_TOKENS, max_num_batched_tokens, sglang_decode_tokens(max_num_seqs, query_len))


def sglang_decode_tokens(max_num_seqs: int, query_len: int = 1) -> int:
    """Tokens one DP rank sends through the low-latency dispatch in its largest decode step: every running
    request's `query_len` tokens (1, or 1 + k with MTP: --speculative-num-draft-tokens)."""
    return max_num_seqs * query_len


def dense_per_rank_applies(layout: Layout, engine: str) -> bool:
    """Where the `dense_per_rank` knob means something and is planned: SGLang under DP attention at tp = 1
    (vLLM always runs the dense parts per DP rank; at tp > 1 SGLang's per-rank MLP would also scatter the
    tokens over the attention-TP group, which is not priced)."""
    return engine == "sglang" and layout.dp > 1 and layout.tp == 1


def dense_tp(layout: Layout, engine: str, group: str, dense_per_rank: bool = False) -> int:
    """TP degree of column/row/vocab-split tensors of `group`. Attention always splits over the attention-TP
    group (`tp`). Under DP attention vLLM keeps each DP rank a full TP replica for everything but
    the routed experts (vLLM DP+EP docs). SGLang 0.5.23 splits the input embedding over the
    attention-TP group too (`layers/vocab_parallel_embedding.get_embedding_tp_kwargs`:
    use_attn_tp_group = is_dp_attention_enabled()), so at tp1 x dp16 every rank holds all of it. By default
    its dense MLP, shared experts and lm_head split over its whole `--tp-size` = tp x dp (`moe_dense_tp_size`
    unset; `ParallelLMHead(use_attn_tp_group=enable_dp_lm_head)`, `--enable-dp-lm-head` off), except:
      shared experts under DeepEP run replicated (`models/deepseek_v2.py`: parallel_group "replicated" when
        the MoE all-to-all backend is deepep), each rank on its own tokens;
      `dense_per_rank` (`--moe-dense-tp-size 1 --enable-dp-lm-head`, the large-scale EP recipe; planned at
        tp = 1 only): the dense MLP replicated (`is_dense_ffn_fully_dp`), the lm_head over the attention-TP
        group."""
    if engine != "sglang" or layout.dp == 1 or group in ("attention", "embedding"):
        return layout.tp
    if group == "shared_experts" and uses_ep_all_to_all(layout):
        return 1
    if dense_per_rank and group in ("dense_ffn", "lm_head"):
        return 1 if group == "dense_ffn" else layout.tp
    return layout.stage_gpus
