"""Decode step time per layer, per pipeline stage and per step; prefill (TTFT) with chunked prefill.

Per layer on one GPU (named terms that sum to the layer's time):
  each op of step_work (attn.proj, attn.core, ffn.dense | moe.gate, moe.shared, moe.experts):
      roofline max(bytes / (HBM x hbm_efficiency), FLOPs / (peak x tensor_core_efficiency)); the attention
      kernel uses attention_hbm_efficiency / attention_tensor_core_efficiency; fp8 peak for fp8 weights on a
      GPU with fp8 (Williams et al., "Roofline", CACM 2009; MLA_MATH.md section 8)
  each collective of step_comm (TP all-reduces, EP all-to-all, DP gather/scatter, DCP, Route B), not
      overlapped with compute (vLLM and SGLang run them on the compute stream in decode)
  launch: kernels_per_layer x graph_kernel_overhead_s (CUDA-graph replay)
Per stage: its layers + embedding (first) + lm_head and logits gather (last) + the pipeline hand-off.
Without CUDA graphs (--enforce-eager) the CPU launches kernels_per_layer x eager_kernel_launch_s per layer;
the GPU cannot run ahead of it, so the stage takes max(GPU time, CPU launch time).

Pipeline (vLLM V1 and SGLang keep up to pp micro-batches in flight): the B sequences of a DP rank are split
into m = min(B, pp) micro-batches. Each sequence gets one token per round; a round takes
tpot = max(sum of stage times, m x slowest stage) (a micro-batch must cross every stage, and the slowest
stage serves m micro-batches per round). The engine completes a micro-batch every step = tpot / m.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from math import ceil

from .calibration import Calibration
from .knobs import Knobs
from .layout import Layout
from .pp_split import stage_layers
from .spec import ModelSpec
from .step_comm import attention_comm, embed_comm, ffn_comm, logits_comm, pp_handoff_s
from .step_work import Batch, LayerWeights, Op, attention_ops, ffn_ops, head_ops, layer_weights
from .topology import GPU, Topology


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
    tpot_s: float = 0.0            # between two tokens of one sequence: m x step_s
    network_s: float = 0.0         # of the slowest stage
    compute_s: float = 0.0
    memory_s: float = 0.0
    overhead_s: float = 0.0
    bottleneck_stage: int = 0
    split_s: dict = field(default_factory=dict)   # one step on the round's critical path (round_split_s / m)

    @property
    def network_share(self) -> float:
        """Share of the deployment's GPU time spent in collectives: every stage runs each of the m
        micro-batches once per round, so a GPU of stage s spends m x its collectives per tpot; averaged over
        the stages (they have equal GPU counts). With pp = 1: collectives / step."""
        if not self.tpot_s:
            return 0.0
        return self.micro_batches * mean_network_s(self.stages) / self.tpot_s


def mean_network_s(stages: list) -> float:
    """Collective seconds of one micro-batch, averaged over the stages."""
    return sum(s.network_s for s in stages) / len(stages)


def step_breakdown_s(d: DecodeStep) -> dict[str, float]:
    """Where one decode step goes, in seconds (sums to step_s): the attention kernel (reading the latent
    cache), the other kernels (GEMMs reading weights, router, lm_head), collectives, and launch overhead
    (graph replay, or the CPU-bound excess when eager), on the round's critical path."""
    return dict(d.split_s)


def op_time_s(op: Op, gpu: GPU, calib: Calibration) -> tuple[float, float]:
    """(memory-side seconds, math-side seconds) of one op at achievable rates; its time is the max."""
    attn = op.kind == "attention"
    bw = gpu.hbm_bytes_per_s * (calib.attention_hbm_efficiency if attn else calib.hbm_efficiency)
    peak = gpu.fp8_flops_per_s if (op.fp8 and gpu.has_fp8) else gpu.bf16_flops_per_s
    eff = calib.attention_tensor_core_efficiency if attn else calib.tensor_core_efficiency
    return op.bytes / bw, op.flops / (peak * eff)


def layer_time(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, batch: Batch,
               calib: Calibration, moe: bool, weights: LayerWeights | None = None) -> LayerTime:
    """One decoder layer on one GPU: roofline per op + collectives + graph launch overhead."""
    w = weights or layer_weights(spec, layout, knobs.engine)
    ops = attention_ops(spec, layout, knobs, batch, w) + ffn_ops(spec, layout, batch, w, moe, knobs.engine)
    terms, mem_s, math_s = {}, 0.0, 0.0
    for op in ops:
        m, f = op_time_s(op, topo.gpu, calib)
        terms[op.name] = max(m, f)
        mem_s, math_s = mem_s + m, math_s + f
    compute_s = sum(terms.values())
    net = attention_comm(spec, layout, batch, topo, calib)
    net.update(ffn_comm(spec, layout, batch, topo, calib, moe, topo.gpu.has_fp8, knobs.engine))
    net = {k: v for k, v in net.items() if v}
    launch_s = calib.kernels_per_layer * calib.graph_kernel_overhead_s
    terms.update(net)
    terms["launch"] = launch_s
    network_s = sum(net.values())
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
        rows = batch.decode + (1 if batch.prefill else 0)
        head = sum(max(op_time_s(o, topo.gpu, calib)) for o in head_ops(spec, layout, rows, knobs.engine))
        gather = logits_comm(spec, layout, rows, topo, calib, knobs.engine)
        terms["lm_head"] = head + gather
        comp, net = comp + head, net + gather
    else:
        terms["pp_handoff"] = pp_handoff_s(spec, layout, batch, stage, topo, calib, knobs.engine)
        net += terms["pp_handoff"]
    gpu_s = sum(terms.values())
    overhead = launch
    if not knobs.cuda_graphs:
        cpu_s = n * calib.kernels_per_layer * calib.eager_kernel_launch_s
        terms["eager_overhead"] = max(0.0, cpu_s - gpu_s)
        overhead += terms["eager_overhead"]
    return StageTime(stage, n, dense, n - dense, terms, comp, net, mem, overhead, sum(terms.values()), attention)


def stage_split(spec: ModelSpec, layout: Layout, engine: str = "vllm") -> list[int]:
    """Layers per pipeline stage, as the engine splits them (memory.stage_layers)."""
    return list(stage_layers(spec.num_hidden_layers, layout.pp, engine))


def forward_stages(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, batch: Batch,
                   calib: Calibration, layers_per_stage: list[int] | None = None) -> tuple[dict, list]:
    """Layer times by kind and the stage times of one forward pass of `batch` (one micro-batch), over
    `layers_per_stage`, else the knobs' partition, else the engine's own split."""
    split = layers_per_stage or knobs.pp_layer_partition
    lt, stages = _forward_memo(spec, topo, layout, knobs.engine, knobs.kv_cache_dtype, knobs.cuda_graphs, batch,
                               calib, tuple(split) if split else None)
    return lt, list(stages)


@lru_cache(maxsize=32768)
def _forward_memo(spec: ModelSpec, topo: Topology, layout: Layout, engine: str, kv_cache_dtype: str,
                  cuda_graphs: bool, batch: Batch, calib: Calibration, split: tuple | None) -> tuple[dict, tuple]:
    """forward_stages keyed on the only knobs a forward pass reads (engine, KV dtype, CUDA graphs): a plan
    search prices the same pass under many chunk sizes, sequence caps and memory fractions."""
    knobs = Knobs(engine=engine, kv_cache_dtype=kv_cache_dtype, cuda_graphs=cuda_graphs)
    split = list(split) if split else stage_split(spec, layout, engine)
    w = layer_weights(spec, layout, engine)
    lt = {"dense": layer_time(spec, topo, layout, knobs, batch, calib, False, w)}
    if spec.is_moe:
        lt["moe"] = layer_time(spec, topo, layout, knobs, batch, calib, True, w)
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
                context_len: int, calib: Calibration, layers_per_stage: list[int] | None = None) -> DecodeStep:
    """Decode step for `batch_per_dp_rank` running sequences per DP rank, each at `context_len` tokens."""
    B = max(1, int(batch_per_dp_rank))
    m = min(B, layout.pp)
    micro = ceil(B / m)
    lt, stages = forward_stages(spec, topo, layout, knobs, Batch(micro, context_len), calib, layers_per_stage)
    tpot = round_s(stages, m)
    slow = max(range(len(stages)), key=lambda i: stages[i].total_s)
    s = stages[slow]
    split = {k: v / m for k, v in round_split_s(stages, m).items()}
    return DecodeStep(B, micro, m, context_len, lt, stages, tpot / m, tpot, s.network_s, s.compute_s,
                      s.memory_s, s.overhead_s, slow, split)


@dataclass(frozen=True)
class Prefill:
    input_len: int
    chunk_tokens: int
    chunks: int
    ttft_s: float                  # all chunks, each riding one pipeline round
    stall_s: float                 # how much longer the decode rounds got while the chunks ran
    stall_network_s: float = 0.0   # the extra collective seconds the chunks add to a GPU's rounds, averaged
                                   # over the stages (eager: may hide under CPU launches and exceed stall_s)


def prefill(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, input_len: int, calib: Calibration,
            decode_batch: int = 0, context_len: int = 0, layers_per_stage: list[int] | None = None) -> Prefill:
    """Chunked prefill of one request while `decode_batch` sequences per DP rank keep decoding.

    The step's token budget (max_num_batched_tokens) goes to the micro-batch's decodes first, the rest to the
    chunk (vLLM's scheduler order); chunks of one request run one after another, each riding one round.
    Full chunks differ only in the prefix their attention reads, which grows linearly, so their rounds are
    summed with the trapezoid rule over the first and last full chunk (exact where a round is linear in
    the prefix; every round is priced when there are at most two full chunks)."""
    m = min(max(decode_batch, 1), layout.pp)
    micro = ceil(decode_batch / m) if decode_batch else 0
    chunk = max(knobs.max_num_batched_tokens - micro, 1)
    base = None
    if decode_batch:
        _, base = forward_stages(spec, topo, layout, knobs, Batch(micro, context_len), calib, layers_per_stage)
    base_round = round_s(base, m) if base else 0.0
    base_net = mean_network_s(base) if base else 0.0

    def round_at(prefix: int, tokens: int) -> tuple[float, float]:
        """(round seconds, extra collective seconds per GPU, stage mean) of a round carrying this chunk:
        each stage runs the chunk's micro-batch once instead of a decode-only one."""
        _, st = forward_stages(spec, topo, layout, knobs, Batch(micro, context_len, tokens, prefix), calib,
                               layers_per_stage)
        if not base:
            return sum(s.total_s for s in st), mean_network_s(st)
        return round_s(st, m, base), mean_network_s(st) - base_net

    full, rest = divmod(input_len, chunk)
    if full <= 2:
        rounds = [round_at(i * chunk, chunk) for i in range(full)]
        full_s, full_net = sum(r[0] for r in rounds), sum(r[1] for r in rounds)
    else:
        first, last = round_at(0, chunk), round_at((full - 1) * chunk, chunk)
        full_s, full_net = full * (first[0] + last[0]) / 2, full * (first[1] + last[1]) / 2
    tail = round_at(full * chunk, rest) if rest else (0.0, 0.0)
    ttft = full_s + tail[0]
    n = full + (1 if rest else 0)
    return Prefill(input_len, chunk, ceil(input_len / chunk), ttft, ttft - n * base_round, full_net + tail[1])


def prefill_time_s(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, input_len: int,
                   calib: Calibration, decode_batch: int = 0, context_len: int = 0) -> float:
    """Time to first token of an `input_len`-token prompt (see `prefill`)."""
    return prefill(spec, topo, layout, knobs, input_len, calib, decode_batch, context_len).ttft_s
