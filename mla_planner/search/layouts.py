"""Every sensible layout of a model on a cluster: the plan search's space.

- TP degrees are the powers of two dividing the attention heads, up to two nodes' worth (TP across
  two nodes is the seed article's baseline and is priced honestly by the comm model; wider TP only
  multiplies cross-node all-reduces).
- Data-parallel attention comes with expert parallelism over the whole stage (the SGLang and vLLM
  DP-attention recipes: SGLang 0.5.23 --attn-dp-size N --ep-size N, sglang/srt/server_args.py; vLLM 0.33.0
  -dp N --enable-expert-parallel, vllm/engine/arg_utils.py), at any power-of-two width the experts
  divide. EP across a plain TP
  group is not searched: it is priced exactly as the tensor-parallel MoE (see _stage_shapes).
- PP stages: from the fewest whose GPUs can hold the weights at all (a lower bound: the checkpoint
  spread evenly) up to twice that; more stages only add pipeline rounds a token must cross.
- DCP divides TP (2 and the whole TP group); the latent-sharded KV layout (the seed's Route B) is
  offered wherever it is legal so the search can say what it would cost.
- Replicas fill the cluster with independent copies of the instance.
Layouts that cannot exist are returned with their reasons.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from mla_planner.engines.parallel import deepep_experts_problem
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.layout import Layout, deepep_runs, layout_problems
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.sizing import weight_bytes_breakdown
from mla_planner.specs.topology import Topology

MAX_PP = 16


def _powers_of_two(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def _stage_shapes(spec: ModelSpec, topo: Topology) -> list[tuple[int, int, int]]:
    """(tp, dp, ep) per stage: plain TP, or DP-attention+EP (or + a tensor-parallel MoE where DeepEP cannot
    run). EP across a plain TP group (vLLM --enable-expert-parallel without DP attention) is not searched:
    the models price it exactly as the tensor-parallel MoE (the same bytes per GPU, the same all-reduce), so
    it only doubled the candidates with ties; `compare -l tp=8,ep=8` and `plan -l` still take it."""
    shapes = []
    for size in _powers_of_two(topo.total_gpus):
        if spec.num_attention_heads % size == 0 and size <= max(2 * topo.gpus_per_node, topo.domain_gpus):
            shapes.append((size, 1, 1))
        if spec.is_moe and size > 1 and spec.n_routed_experts % size == 0:
            shapes.append((1, size, size))
        if spec.is_moe and size > 1 and spec.moe_intermediate_size % size == 0 and \
                (not deepep_runs(topo, size) or _experts_without_deepep(spec)):
            shapes.append((1, size, 1))   # DP attention, MoE tensor-parallel over the stage (no DeepEP)
    return shapes


def _experts_without_deepep(spec: ModelSpec) -> bool:
    """Whether an engine has no DeepEP path for this checkpoint's experts (SGLang's int4 and INT8 MoE runners:
    engines.parallel.deepep_experts_problem), so DP attention is searched with ep=1 too."""
    return bool(deepep_experts_problem("sglang", spec, Layout(tp=1, dp=2, ep=2)))


def min_instance_gpus(spec: ModelSpec, topo: Topology) -> int:
    """A lower bound on the GPUs one instance needs: the checkpoint spread evenly, nothing else."""
    return ceil(weight_bytes_breakdown(spec)["total"] / topo.gpu.memory_bytes)


def _pp_range(stage_gpus: int, min_gpus: int, topo: Topology, spec: ModelSpec) -> range:
    lowest = max(1, ceil(min_gpus / stage_gpus))
    highest = min(2 * lowest, MAX_PP, spec.num_hidden_layers, topo.total_gpus // stage_gpus)
    return range(lowest, highest + 1)


def _variants(spec: ModelSpec, base: Layout) -> list[Layout]:
    out = [base]
    if attention_of(spec).latent and base.tp > 1:
        out += [replace(base, dcp=d) for d in sorted({2, base.tp})]
        out.append(replace(base, kv_layout="latent-sharded"))
    return out


def candidate_layouts(spec: ModelSpec, topo: Topology) -> tuple[list[Layout], list[tuple[Layout, str]]]:
    """(legal layouts, [(illegal layout, reason)]), deterministic order, replicas filling the cluster."""
    legal, rejected = [], []
    min_gpus = min_instance_gpus(spec, topo)
    for tp, dp, ep in _stage_shapes(spec, topo):
        stage = tp * dp
        if stage * _pp_range(stage, min_gpus, topo, spec).start > topo.total_gpus:
            rejected.append((Layout(tp=tp, dp=dp, ep=ep), f"weights need at least {min_gpus} "
                             f"{topo.gpu.name} GPUs; the cluster has {topo.total_gpus}"))
            continue
        for pp in _pp_range(stage, min_gpus, topo, spec):
            for layout in _variants(spec, Layout(tp=tp, pp=pp, dp=dp, ep=ep)):
                layout = replace(layout, replicas=max(1, topo.total_gpus // layout.instance_gpus))
                problems = layout_problems(layout, spec, topo.gpus_per_node, topo.total_gpus)
                (rejected.append((layout, "; ".join(problems))) if problems else legal.append(layout))
    return legal, rejected
