"""Every sensible layout of a model on a cluster: the plan search's space.

TP degrees are the divisors of the attention heads (powers of two in practice), up to the cluster;
TP across nodes is included (the comm model prices it honestly). PP stages go up to the node count;
data-parallel attention comes with expert parallelism over the whole stage (the SGLang and vLLM
DP-attention recipes, ENGINES.md); DCP divides TP; the latent-sharded KV layout (the seed's Route B)
is offered wherever it is legal so the search can show what it costs. Replicas fill the cluster with
independent copies of a smaller layout. Layouts that cannot exist are returned with their reasons.
"""

from __future__ import annotations

from .layout import Layout, layout_problems
from .spec import ModelSpec
from .topology import Topology


def _powers_of_two(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def _stage_shapes(spec: ModelSpec, topo: Topology) -> list[tuple[int, int, int]]:
    """(tp, dp, ep) per stage: plain TP (EP off, or EP across the TP group for MoE), or DP-attention+EP."""
    shapes = []
    for size in _powers_of_two(topo.total_gpus):
        if spec.num_attention_heads % size == 0:
            shapes.append((size, 1, 1))
            if spec.is_moe and size > 1:
                shapes.append((size, 1, size))
        if spec.is_moe and size > 1:
            shapes.append((1, size, size))
    return shapes


def candidate_layouts(spec: ModelSpec, topo: Topology) -> tuple[list[Layout], list[tuple[Layout, str]]]:
    """(legal layouts, [(illegal layout, reason)]), deterministic order, replicas filling the cluster."""
    legal, rejected = [], []
    for tp, dp, ep in _stage_shapes(spec, topo):
        for pp in range(1, topo.nodes * max(1, topo.gpus_per_node // (tp * dp)) + 1):
            if tp * dp * pp > topo.total_gpus:
                break
            variants = [Layout(tp=tp, pp=pp, dp=dp, ep=ep)]
            if spec.attention == "mla" and tp > 1:
                variants += [Layout(tp=tp, pp=pp, dp=dp, ep=ep, dcp=d) for d in _powers_of_two(tp)[1:]]
                variants.append(Layout(tp=tp, pp=pp, dp=dp, ep=ep, kv_layout="latent-sharded"))
            for layout in variants:
                layout = _fill(layout, topo)
                problems = layout_problems(layout, spec, topo.gpus_per_node, topo.total_gpus)
                (rejected.append((layout, "; ".join(problems))) if problems else legal.append(layout))
    return legal, rejected


def _fill(layout: Layout, topo: Topology) -> Layout:
    """As many independent replicas as the cluster holds."""
    from dataclasses import replace
    return replace(layout, replicas=max(1, topo.total_gpus // layout.instance_gpus))
