"""The communication one decoder layer (and one pipeline hand-off) needs, as named collective costs.

Per layer, on one GPU, for a forward pass of `tokens` rows per DP rank (activations bf16, d = hidden; b = the
decoding query rows, sequences x q_len, q_len = 2 with MTP):
  attn.tp_all_reduce      all-reduce of tokens x d x 2 B over the TP group after wo (Megatron row-parallel)
  attn.dcp_gather_q       all-gather of the queries over the DCP group: dcp x b x H/tp x 576 x 2 B
  attn.dcp_combine        reduce-scatter of the partial latent outputs (dcp x b x H/tp x 512 x 2 B) plus an
                          all-gather of the softmax statistics (LSE, fp32) (vLLM DCP, ag_rs backend)
  attn.latent_exchange    Route B: q_nope all-gathered (b x H x 192 x 2), fp32 partial scores reduce-scattered
                          to the head owners (b x H x T x 4), bf16 probabilities all-gathered (b x H x T x 2),
                          latent outputs exchanged (all-to-all, b x H x 512/tp x 2)
  ffn.all_reduce / moe.all_reduce   after the FFN/MoE when the stage runs it tensor-parallel on the same tokens
  ffn.dp_gather / ffn.dp_scatter    SGLang under DP attention: its dense MLP splits over tp x dp, so the dp
                          ranks' tokens are all-gathered before it and reduce-scattered after (none with
                          dense_per_rank, --moe-dense-tp-size 1: each rank runs the whole MLP on its tokens)
  moe.dispatch / moe.combine        DP attention + EP: all-to-all of tokens/tp x k x d in the engine's dispatch
                          format (engines.dispatch: fp8 1 B + 4 B per 128, fp4 0.5 B + 1 B per 32, or bf16), bf16
                          to combine (MoRI's fp8 on SGLang's EPv1 for fp4 tokens); a prefill
                          forward on an engine running DeepEP's normal kernels for it, across nodes: each token
                          once per other node over RDMA, then over NVLink (node_limited.node_limited_all_to_all_s)
  moe.dp_gather / moe.dp_scatter    DP attention without EP: all-gather of dp x b x d x 2 B before the MoE,
                          reduce-scatter after (vLLM allgather_reducescatter backend)
Pipeline hand-off: vLLM sends hidden state + residual (2 x b x d x 2 B) with each TP rank sending 1/tp of it
to its peer and the receiving stage all-gathering it (`send_tensor_dict(all_gather_group=tp)`).
"""

from __future__ import annotations

from mla_planner.core.units import ACT_BYTES
from mla_planner.engines.dispatch import (combine_format, combine_wire_bytes_per_value, dispatch_format,
                                         wire_bytes_per_value)
from mla_planner.engines.parallel import a2a_library, dense_tp, uses_ep_all_to_all
from mla_planner.engines.profile import profile
from mla_planner.perf.comm import collective_time_s
from mla_planner.perf.custom_all_reduce import engine_all_reduce
from mla_planner.perf.node_limited import node_limited_all_to_all_s
from mla_planner.perf.layer_work import Batch, ffn_rows
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


def _spans(group: int, topo: Topology) -> bool:
    """Whether a group of GPUs leaves its NVLink domain (a node, or an NVL72 rack of hosts)."""
    return group > topo.domain_gpus


def _ct(kind: str, nbytes: float, group: int, topo: Topology, calib: Calibration,
        spans: bool | None = None) -> float:
    """Seconds of one collective over `group` GPUs; an all-reduce inside a domain as the engines run it (their own
    kernels below a size cap: perf.custom_all_reduce), everything else as NCCL (perf.comm)."""
    spans = _spans(group, topo) if spans is None else spans
    if group < 2:
        return 0.0
    if kind == "all_reduce" and not spans:
        return engine_all_reduce(nbytes, group, topo, calib)[1]
    return collective_time_s(kind, nbytes, group, topo, calib, spans)


def dp_rank_blocks(layout: Layout, engine: str) -> bool:
    """vLLM places each DP rank's tp x pp GPUs together (world rank = dp x pp x tp + pp x tp + tp), so with
    PP a stage's DP-attention/EP group is strided over the whole instance; SGLang (and vLLM without DP or
    without PP) packs each stage's tp x dp GPUs together."""
    return not profile(engine).dp_rank_packs_stage and layout.dp > 1 and layout.pp > 1


def stage_group_spans(layout: Layout, topo: Topology, engine: str) -> bool:
    """Whether the stage-wide group (DP-attention gather/scatter, EP all-to-all) crosses nodes."""
    gpus = layout.instance_gpus if dp_rank_blocks(layout, engine) else layout.stage_gpus
    return gpus > topo.domain_gpus


def attention_comm(spec: ModelSpec, layout: Layout, batch: Batch, topo: Topology,
                   calib: Calibration) -> dict[str, float]:
    d, tp, b = spec.hidden_size, layout.tp, batch.decode_tokens     # query rows (q_len per sequence with MTP)
    out = {"attn.tp_all_reduce": _ct("all_reduce", batch.tokens * d * ACT_BYTES, tp, topo, calib)}
    if not attention_of(spec).latent or not b:
        return out
    H_t, dc, dr = spec.num_attention_heads // tp, spec.kv_lora_rank, spec.qk_rope_head_dim
    if layout.dcp > 1:
        g = layout.dcp
        out["attn.dcp_gather_q"] = _ct("all_gather", g * b * H_t * (dc + dr) * ACT_BYTES, g, topo, calib)
        out["attn.dcp_combine"] = (_ct("reduce_scatter", g * b * H_t * dc * ACT_BYTES, g, topo, calib)
                                   + _ct("all_gather", g * b * H_t * g * 4, g, topo, calib))
    if layout.kv_layout == "latent-sharded":
        H, T = spec.num_attention_heads, batch.context
        out["attn.latent_exchange"] = (
            _ct("all_gather", b * H * spec.qk_head_dim * ACT_BYTES, tp, topo, calib)
            + _ct("reduce_scatter", b * H * T * 4, tp, topo, calib)
            + _ct("all_gather", b * H * T * ACT_BYTES, tp, topo, calib)
            + _ct("all_to_all", b * H * dc / tp * ACT_BYTES, tp, topo, calib))
    return out


def ffn_comm(spec: ModelSpec, layout: Layout, batch: Batch, topo: Topology, calib: Calibration,
             moe: bool, engine: str = "vllm", dense_per_rank: bool = False) -> dict[str, float]:
    d, n = spec.hidden_size, batch.tokens
    stage, spans = layout.stage_gpus, stage_group_spans(layout, topo, engine)
    if not moe and ffn_rows(layout, engine, "dense_ffn", n, dense_per_rank) > n:
        total = layout.dp * n * d * ACT_BYTES
        return {"ffn.dp_gather": _ct("all_gather", total, stage, topo, calib, spans),
                "ffn.dp_scatter": _ct("reduce_scatter", total, stage, topo, calib, spans)}
    if not moe:
        return {"ffn.all_reduce": _ct("all_reduce", n * d * ACT_BYTES, layout.tp, topo, calib)}
    if layout.dp == 1:
        return {"moe.all_reduce": _ct("all_reduce", n * d * ACT_BYTES, stage, topo, calib)}
    if uses_ep_all_to_all(layout):   # the rule the launch follows (launch/a2a.py) and the memory model prices
        forwards = a2a_library(topo.gpu) == "mori" or (batch.prefill and not batch.decode
                                                        and profile(engine).deepep_normal_for_prefill)
        fmt, back = dispatch_format(engine, spec, topo.gpu), combine_format(engine, spec, layout, topo.gpu)
        dispatch_s, combine_s = ep_all_to_all_s(spec, n / layout.tp, stage, topo, calib, fmt, spans, forwards, back)
        return {"moe.dispatch": dispatch_s, "moe.combine": combine_s}
    total = layout.dp * n * d * ACT_BYTES
    return {"moe.dp_gather": _ct("all_gather", total, stage, topo, calib, spans),
            "moe.dp_scatter": _ct("reduce_scatter", total, stage, topo, calib, spans)}


def ep_all_to_all_s(spec: ModelSpec, tokens: float, gpus: int, topo: Topology, calib: Calibration,
                    dispatch_fmt: str, spans: bool, forwards: bool, combine_fmt: str = "bf16") -> tuple[float, float]:
    """(dispatch, combine) seconds of the EP all-to-all for `tokens` on each of `gpus` ranks, each token going to its
    k experts: dispatched in `dispatch_fmt` with its scales (engines.dispatch.wire_bytes_per_value), combined in
    `combine_fmt` (BF16, or MoRI's FP8 blockwise on SGLang's EPv1 for FP4 tokens). Per expert copy (DeepEP's
    low-latency kernels, MoRI's IntraNode kernel; comm.py's all-to-all), or where `spans` nodes and the kernels
    forward (`forwards`: DeepEP's normal kernels, SGLang's prefill; MoRI's InterNodeV1 / V1LL, every batch, whose
    published EP16 times the node-limited model meets within -36..-3 %, `mla-plan validate`) once per other node
    over RDMA, then inside the node (perf.node_limited)."""
    d, k = spec.hidden_size, spec.num_experts_per_tok
    dispatch_b, combine_b = wire_bytes_per_value(dispatch_fmt), combine_wire_bytes_per_value(combine_fmt, d)
    if spans and forwards:
        return tuple(node_limited_all_to_all_s(tokens, d * b, k, spec.n_routed_experts, gpus, topo, calib)
                     for b in (dispatch_b, combine_b))
    return tuple(_ct("all_to_all", tokens * k * d * b, gpus, topo, calib, spans) for b in (dispatch_b, combine_b))


def stages_share_node(layout: Layout, stage: int, topo: Topology, engine: str = "sglang") -> bool:
    """Whether stage `stage` and the next one sit on the same node (stages packed in GPU order; under
    vLLM DP each DP rank's stages sit together, see `dp_rank_blocks`)."""
    gpn = topo.domain_gpus       # "the same node" for the hand-off's link: the same NVLink domain
    if dp_rank_blocks(layout, engine):
        return layout.tp * layout.pp <= gpn
    first, nxt = stage * layout.stage_gpus, (stage + 1) * layout.stage_gpus
    return first // gpn == nxt // gpn and layout.stage_gpus < gpn


def pp_handoff_s(spec: ModelSpec, layout: Layout, batch: Batch, stage: int, topo: Topology,
                 calib: Calibration, engine: str = "sglang") -> float:
    """Send hidden state + residual to the next stage (DeepSeek-V4: its hc_mult residual streams, vLLM
    models/deepseek_v4/nvidia/model.py intermediate tensors [tokens, hc_mult, hidden]): p2p of 1/tp of it per TP
    rank, then an all-gather over the receiving TP group (vLLM `send_tensor_dict` / `recv_tensor_dict`)."""
    nbytes = (spec.hc_mult or 2) * batch.tokens * spec.hidden_size * ACT_BYTES
    same = stages_share_node(layout, stage, topo, engine)
    p2p = collective_time_s("p2p", nbytes / layout.tp, 2, topo, calib, spans_nodes=not same)
    return p2p + _ct("all_gather", nbytes, layout.tp, topo, calib)


def embed_comm(spec: ModelSpec, layout: Layout, batch: Batch, topo: Topology, calib: Calibration) -> float:
    """Vocab-parallel embedding: an all-reduce of tokens x d over TP (first stage)."""
    return _ct("all_reduce", batch.tokens * spec.hidden_size * ACT_BYTES, layout.tp, topo, calib)


def logits_comm(spec: ModelSpec, layout: Layout, rows: int, topo: Topology, calib: Calibration,
                engine: str = "vllm", dense_per_rank: bool = False) -> float:
    """Vocab-parallel lm_head: gather the rows' logits (bf16) over the group the head is split over
    (engines.parallel.dense_tp; SGLang's DP attention: all dp ranks' rows over tp x dp, or with `dense_per_rank`
    the rank's own rows over its attention-TP group), last stage."""
    tp = dense_tp(layout, engine, "lm_head", dense_per_rank)
    wide = ffn_rows(layout, engine, "lm_head", rows, dense_per_rank)
    return _ct("all_gather", wide * spec.vocab_size * ACT_BYTES, tp, topo, calib,
               stage_group_spans(layout, topo, engine) if tp > layout.tp else None)
