"""Decode step time per layer, per pipeline stage and per step (prefill: prefill.py).

Per layer on one GPU (named terms that sum to the layer's time):
  each op of perf.layer_work (attn.proj, attn.core, ffn.dense | moe.gate, moe.shared, moe.experts):
      roofline max(bytes / (HBM x hbm_efficiency), FLOPs / (peak x tensor_core_efficiency)); the attention
      kernel uses attention_hbm_efficiency / attention_tensor_core_efficiency, the routed experts'
      grouped GEMMs moe_hbm_efficiency (int4_moe_hbm_efficiency for int4 weight-only experts); fp8 / int8 peak
      for fp8 / int8 weights on GPUs with such tensor cores (GPU.tensor_flops_per_s; Williams et al., "Roofline")
  each collective of perf.layer_comm (TP all-reduce, EP all-to-all, DP gather/scatter, DCP, Route B), not
      overlapped with compute (vLLM and SGLang run them on the compute stream in decode)
  launch: kernels_per_layer x graph_kernel_overhead_s (CUDA-graph replay)
Per stage: its layers + embedding (first) + lm_head and logits gather (last) + the pipeline hand-off; with MTP (or
DSpark) the last stage also runs the drafter (mtp_draft), every decoding sequence carrying 1 + k query tokens.
Without CUDA graphs (--enforce-eager) the host spends eager_layer_host_s on each layer dispatching it; the GPU
cannot run ahead of the host, so the stage takes max(GPU time, host time).

Pipeline (vLLM V1 and SGLang keep up to pp micro-batches in flight): the B sequences of a DP rank are split
into m = min(B, pp) micro-batches. Each sequence runs one step per round; a round takes
round = max(sum of stage times, m x slowest stage) (a micro-batch must cross every stage, and the slowest
stage serves m micro-batches per round). The engine completes a micro-batch every step = round / m.
The scheduler's host work (perf/host.py) lengthens a round by what the GPU does not hide, counted with the launch;
a sequence gains one token per round, or with MTP 1 + a + ... + a^k (knobs.tokens_per_step): tpot = round / that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from math import ceil

from mla_planner.core.errors import PlanError
from mla_planner.memory.pp_split import stage_layers
from mla_planner.perf.host import with_host_s
from mla_planner.perf.layer_comm import attention_comm, embed_comm, ffn_comm, logits_comm, pp_handoff_s
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import MTP_ACCEPTANCE, Knobs, decode_query_len, tokens_per_step
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.perf.layer_work import (Batch, LayerWeights, Op, attention_ops, ffn_ops, head_ops, layer_weights,
                                         mtp_proj_ops)
from mla_planner.specs.gpu import GPU
from mla_planner.specs.topology import Topology


@dataclass(frozen=True)
class LayerTime:
    kind: str                      # "dense" or "moe"
    terms_s: dict                  # op and collective names -> seconds; sums to total_s
    bytes: dict                    # op -> HBM bytes
    flops: dict                    # op -> FLOPs
    compute_s: float               # kernels (roofline per op)
    network_s: float               # collectives
    memory_s: float                # all bytes at the achievable HBM rate (for the roofline picture)
    math_s: float                  # all FLOPs at the achievable tensor-core rate
    launch_s: float
    total_s: float


@dataclass(frozen=True)
class StageTime:
    index: int
    layers: int
    dense_layers: int
    moe_layers: int
    terms_s: dict                  # "layers.dense", "layers.moe", "embed", "lm_head", "pp_handoff", "eager_overhead"
    compute_s: float
    network_s: float
    memory_s: float
    overhead_s: float              # kernel launch (graph) + eager CPU-bound excess
    total_s: float
    attention_s: float = 0.0       # of compute_s: the attention kernel (attn.core) of its layers

    @property
    def split_s(self) -> dict[str, float]:
        """The stage's time in four parts that sum to total_s (see `round_split_s`)."""
        return {"attention_core_s": self.attention_s, "other_kernels_s": self.compute_s - self.attention_s,
                "collectives_s": self.network_s, "launch_s": self.overhead_s}


@dataclass(frozen=True)
class DecodeStep:
    batch_per_dp_rank: int
    micro_batch: int
    micro_batches: int
    context_len: int
    layers: dict                   # "dense" / "moe" -> LayerTime (the same in every stage)
    stages: list = field(default_factory=list)
    step_s: float = 0.0            # one engine iteration: a micro-batch finishes every step_s
    tpot_s: float = 0.0            # mean time between two tokens of one sequence: round_s / tokens_per_step
    network_s: float = 0.0         # of the slowest stage
    compute_s: float = 0.0
    memory_s: float = 0.0
    overhead_s: float = 0.0
    bottleneck_stage: int = 0
    split_s: dict = field(default_factory=dict)   # one step on the round's critical path (round_split_s / m)
    round_s: float = 0.0           # every sequence runs one step: m x step_s
    tokens_per_step: float = 1.0   # output tokens a sequence gains per step (> 1 with MTP): tpot = round / this
    idle_s: float = 0.0            # of round_s, the GPUs idle for overlapped host work: prefill chunks hide there

    @property
    def network_share(self) -> float:
        """Share of the deployment's GPU time in collectives: a GPU of a stage spends m x its collectives per round
        (every stage runs each of the m micro-batches once), averaged over the stages. With pp = 1: collectives / step."""
        if not self.round_s:
            return 0.0
        return self.micro_batches * mean_network_s(self.stages) / self.round_s


def mean_network_s(stages: list) -> float:
    """Collective seconds of one micro-batch, averaged over the stages."""
    return sum(s.network_s for s in stages) / len(stages)


def step_breakdown_s(d: DecodeStep) -> dict[str, float]:
    """Where one decode step goes, in seconds (sums to step_s) on the round's critical path: the attention kernel,
    the other kernels (GEMMs, router, lm_head), collectives, launch (graph replay, eager excess, unhidden host work)."""
    return dict(d.split_s)


def op_time_s(op: Op, gpu: GPU, calib: Calibration) -> tuple[float, float]:
    """(memory-side seconds, math-side seconds) of one op at achievable rates; its time is the max."""
    attn = op.kind == "attention"
    bw = gpu.hbm_bytes_per_s * getattr(calib, op.hbm_factor)
    peak = gpu.tensor_flops_per_s(op.precision)
    eff = calib.attention_tensor_core_efficiency if attn else calib.tensor_core_efficiency
    return op.bytes / bw, op.flops / (peak * eff)


def attention_part(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, batch: Batch,
                   calib: Calibration, w: LayerWeights) -> tuple[list, dict]:
    """(ops, collectives) of a layer's attention: the same in its dense and MoE layers."""
    return attention_ops(spec, layout, knobs, batch, w), attention_comm(spec, layout, batch, topo, calib)


def layer_time(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, batch: Batch,
               calib: Calibration, moe: bool, weights: LayerWeights | None = None,
               attention: tuple | None = None) -> LayerTime:
    """One decoder layer on one GPU: roofline per op + collectives + graph launch overhead (`attention`:
    the layer's attention_part, when the caller has it)."""
    w = weights or layer_weights(spec, layout, knobs.engine, knobs.dense_per_rank)
    a_ops, a_net = attention or attention_part(spec, topo, layout, knobs, batch, calib, w)
    ops = a_ops + ffn_ops(spec, layout, batch, w, moe, knobs.engine, knobs.dense_per_rank)
    terms, mem_s, math_s = {}, 0.0, 0.0
    for op in ops:
        m, f = op_time_s(op, topo.gpu, calib)
        terms[op.name] = max(m, f)
        mem_s, math_s = mem_s + m, math_s + f
    compute_s = sum(terms.values())
    net = {**a_net, **ffn_comm(spec, layout, batch, topo, calib, moe, knobs.engine, knobs.dense_per_rank)}
    net = {k: v for k, v in net.items() if v}
    launch_s, network_s = calib.kernels_per_layer * calib.graph_kernel_overhead_s, sum(net.values())
    terms.update(net, launch=launch_s)
    return LayerTime("moe" if moe else "dense", terms, {o.name: o.bytes for o in ops},
                     {o.name: o.flops for o in ops}, compute_s, network_s, mem_s, math_s, launch_s,
                     compute_s + network_s + launch_s)


def stage_time(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, batch: Batch, calib: Calibration,
               layers_per_stage: list[int], stage: int, lt: dict) -> StageTime:
    """One stage: its dense and MoE layers, embedding / lm_head at the ends, the hand-off, eager CPU bound."""
    n = layers_per_stage[stage]
    start = sum(layers_per_stage[:stage])
    dense = spec.dense_layers_in(range(start, start + n))
    kinds = {"dense": dense, "moe": n - dense}
    terms = {f"layers.{k}": c * lt[k].total_s for k, c in kinds.items() if c}
    attention = sum(c * lt[k].terms_s.get("attn.core", 0.0) for k, c in kinds.items() if c)
    net = sum(c * lt[k].network_s for k, c in kinds.items() if c)
    comp = sum(c * lt[k].compute_s for k, c in kinds.items() if c)
    mem = sum(c * lt[k].memory_s for k, c in kinds.items() if c)
    launch = n * calib.kernels_per_layer * calib.graph_kernel_overhead_s
    last = stage == layout.pp - 1
    if stage == 0:
        terms["embed"] = embed_comm(spec, layout, batch, topo, calib)
        net += terms["embed"]
    if last:
        rows = batch.decode_tokens + (1 if batch.prefill else 0)
        head = sum(max(op_time_s(o, topo.gpu, calib))
                   for o in head_ops(spec, layout, rows, knobs.engine, knobs.dense_per_rank))
        gather = logits_comm(spec, layout, rows, topo, calib, knobs.engine, knobs.dense_per_rank)
        terms["lm_head"] = head + gather
        comp, net = comp + head, net + gather
        if knobs.mtp:
            d = mtp_draft(spec, topo, layout, knobs, batch, calib, lt)
            terms["mtp_draft"] = d.total_s
            comp, net, mem, launch = comp + d.compute_s, net + d.network_s, mem + d.memory_s, launch + d.launch_s
            attention += d.terms_s.get("attn.core", 0.0)
    else:
        terms["pp_handoff"] = pp_handoff_s(spec, layout, batch, stage, topo, calib, knobs.engine)
        net += terms["pp_handoff"]
    gpu_s = sum(terms.values())
    overhead = launch
    if not knobs.cuda_graphs:
        cpu_s = (n + (draft_runs(spec, knobs) if last and knobs.mtp else 0)) \
            * calib.eager_layer_host_s          # mtp_draft: one drafter layer per drafted token
        terms["eager_overhead"] = max(0.0, cpu_s - gpu_s)
        overhead += terms["eager_overhead"]
    return StageTime(stage, n, dense, n - dense, terms, comp, net, mem, overhead, sum(terms.values()), attention)


def mtp_draft(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, batch: Batch, calib: Calibration,
              lt: dict) -> LayerTime:
    """The drafter on the last stage for k = knobs.mtp_draft_tokens tokens: an MTP layer once per token, one after
    another (the work of `lt`, one more MoE block: arXiv:2412.19437 section 2.2, eh_proj, lm_head and gather for one
    row per sequence; runs after the first see one token per sequence, not 1 + k, so this errs slow); a DSpark draft
    once, its draft_layers at `lt`'s cost (window-only layers: errs slow), its projections, k rows of logits each."""
    if spec.drafter is None or (spec.drafter == "mtp" and not spec.has_mtp_head):
        raise PlanError(f"MTP: {spec.name} has no MTP layer to draft with{spec.no_mtp_head_why}")
    dspark, layer = spec.drafter == "dspark", lt["moe"] if "moe" in lt else lt["dense"]
    runs, depth = (1, spec.draft_layers) if dspark else (knobs.mtp_draft_tokens, 1)
    rows = (batch.decode + (1 if batch.prefill else 0)) * (knobs.mtp_draft_tokens if dspark else 1)
    ops = mtp_proj_ops(spec, batch) + head_ops(spec, layout, rows, knobs.engine, knobs.dense_per_rank)
    times = [op_time_s(o, topo.gpu, calib) for o in ops]
    extra = sum(max(t) for t in times)
    gather = logits_comm(spec, layout, rows, topo, calib, knobs.engine, knobs.dense_per_rank)
    n, terms = runs * depth, {x: runs * depth * t for x, t in layer.terms_s.items()}
    terms.update({"mtp.proj_head": runs * extra, "mtp.logits_gather": runs * gather})
    return LayerTime("mtp", terms, {x: n * b for x, b in layer.bytes.items()}, {x: n * f for x, f in layer.flops.items()},
                     n * layer.compute_s + runs * extra, n * layer.network_s + runs * gather,
                     n * layer.memory_s + runs * sum(t[0] for t in times), n * layer.math_s + runs * sum(t[1] for t in times),
                     n * layer.launch_s, n * layer.total_s + runs * extra + runs * gather)


def draft_runs(spec: ModelSpec, knobs: Knobs) -> int:   # drafter layers a step runs: DSpark's once, MTP's k times
    return spec.draft_layers if spec.drafter == "dspark" else knobs.mtp_draft_tokens


def stage_split(spec: ModelSpec, layout: Layout, engine: str = "vllm") -> list[int]:
    """Layers per pipeline stage, as the engine splits them (memory.stage_layers)."""
    return list(stage_layers(spec.num_hidden_layers, layout.pp, engine))


FORWARD_KNOBS = ("engine", "kv_cache_dtype", "cuda_graphs", "mtp", "mtp_draft_tokens", "dense_per_rank",
                 "attention_backend", "indexer_kv_dtype")     # the knobs a forward pass reads: its memo's key


def forward_stages(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, batch: Batch,
                   calib: Calibration, layers_per_stage: list[int] | None = None) -> tuple[dict, list]:
    """Layer times by kind and the stage times of one forward pass of `batch` (one micro-batch), over
    `layers_per_stage`, else the knobs' partition, else the engine's own split."""
    split = layers_per_stage or knobs.pp_layer_partition
    read = tuple(getattr(knobs, name) for name in FORWARD_KNOBS)     # a tuple: cheaper to hash than Knobs
    lt, stages = _forward_memo(spec, topo, layout, read, batch, calib, tuple(split) if split else None)
    return lt, list(stages)


@lru_cache(maxsize=32768)
def _forward_memo(spec: ModelSpec, topo: Topology, layout: Layout, read: tuple, batch: Batch, calib: Calibration,
                  split: tuple | None) -> tuple[dict, tuple]:
    """forward_stages keyed on the knobs a forward pass reads (a search prices one pass under many chunk sizes)."""
    knobs = Knobs(**dict(zip(FORWARD_KNOBS, read)))
    engine, dense_per_rank = knobs.engine, knobs.dense_per_rank
    split = list(split) if split else stage_split(spec, layout, engine)
    w = layer_weights(spec, layout, engine, dense_per_rank)
    att = attention_part(spec, topo, layout, knobs, batch, calib, w)
    lt = {"dense": layer_time(spec, topo, layout, knobs, batch, calib, False, w, att)}
    if spec.is_moe:
        lt["moe"] = layer_time(spec, topo, layout, knobs, batch, calib, True, w, att)
    return lt, tuple(stage_time(spec, topo, layout, knobs, batch, calib, split, s, lt) for s in range(layout.pp))


def round_s(stages: list, micro_batches: int, others: list | None = None) -> float:
    """Time between two tokens of one sequence: max(sum of stage times, the slowest stage serving its
    m micro-batches), where `others` are the stage times of the other m - 1 micro-batches (default: same)."""
    others = others or stages
    cycle = max((micro_batches - 1) * o.total_s + s.total_s for s, o in zip(stages, others))
    return max(sum(s.total_s for s in stages), cycle)


def round_split_s(stages: list, micro_batches: int) -> dict[str, float]:
    """`round_s` of a decode round in four parts (attention kernel, other kernels, collectives, launch),
    taken on the path that sets it: every stage once when the sum of the stages is the longer (a
    micro-batch crossing the pipeline, e.g. fewer requests than stages), else the slowest stage serving
    its m micro-batches."""
    if sum(s.total_s for s in stages) >= micro_batches * max(s.total_s for s in stages):
        path = [(s, 1) for s in stages]
    else:
        path = [(max(stages, key=lambda s: s.total_s), micro_batches)]
    out = dict.fromkeys(stages[0].split_s, 0.0)
    for stage, times in path:
        for k, v in stage.split_s.items():
            out[k] += times * v
    return out


def decode_step(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, batch_per_dp_rank: int,
                context_len: int, calib: Calibration, layers_per_stage: list[int] | None = None,
                mtp_acceptance: float = MTP_ACCEPTANCE) -> DecodeStep:
    """Decode step for `batch_per_dp_rank` running sequences per DP rank, each at `context_len` tokens.
    With MTP every step verifies 1 + k tokens per sequence and drafts k more (the last stage's `mtp_draft`),
    and a sequence gains `tokens_per_step` tokens on average, so tpot = round / tokens_per_step."""
    B = max(1, int(batch_per_dp_rank))
    m, micro = min(B, layout.pp), ceil(B / min(B, layout.pp))
    batch = Batch(micro, context_len, q_len=decode_query_len(knobs))
    lt, stages = forward_stages(spec, topo, layout, knobs, batch, calib, layers_per_stage)
    rnd = with_host_s(gpu_round := round_s(stages, m), B, calib, knobs.host_overlap)
    gained, host = tokens_per_step(knobs, mtp_acceptance), rnd - gpu_round
    s = stages[slow := max(range(len(stages)), key=lambda i: stages[i].total_s)]
    split = {k: (v + (host if k == "launch_s" else 0.0)) / m for k, v in round_split_s(stages, m).items()}
    return DecodeStep(B, micro, m, context_len, lt, stages, rnd / m, rnd / gained, s.network_s, s.compute_s,
                      s.memory_s, s.overhead_s, slow, split, rnd, gained, host if knobs.host_overlap else 0.0)
