"""Where each replica of a layout runs: which nodes, how many GPUs on each, which local GPUs.

An instance (one copy of the model: tp x dp x pp GPUs) either fills whole nodes (it spans
instance_gpus / gpus_per_node of them) or packs several to a node (each pinned to its own GPUs with
CUDA_VISIBLE_DEVICES). Replicas take nodes in order; node 0 always holds replica 0's head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import Topology


@dataclass(frozen=True)
class InstancePlacement:
    replica: int
    nodes: tuple[int, ...]   # topology node indices, the head first
    gpus_per_node: int       # GPUs the instance uses on each of its nodes
    first_gpu: int           # first local GPU index it uses (instances sharing a node)
    node_gpus: int           # GPUs a node has

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1

    @property
    def head(self) -> int:
        return self.nodes[0]

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * len(self.nodes)

    @property
    def visible_devices(self) -> Optional[str]:
        """CUDA_VISIBLE_DEVICES when the instance uses only part of its node, else None."""
        if self.gpus_per_node == self.node_gpus:
            return None
        return ",".join(str(g) for g in range(self.first_gpu, self.first_gpu + self.gpus_per_node))


def place(layout: Layout, topology: Topology) -> list[InstancePlacement]:
    """One placement per replica, in replica order."""
    per_node, inst = topology.gpus_per_node, layout.instance_gpus
    if layout.total_gpus > topology.total_gpus:
        raise PlanError(f"layout {layout.label} needs {layout.total_gpus} GPUs; {topology.name} has "
                        f"{topology.total_gpus}")
    if inst >= per_node:
        if inst % per_node:
            raise PlanError(f"an instance of {inst} GPUs ({layout.label}) does not fill whole nodes of {per_node}")
        span = inst // per_node
        return [InstancePlacement(r, tuple(range(r * span, (r + 1) * span)), per_node, 0, per_node)
                for r in range(layout.replicas)]
    if per_node % inst:
        raise PlanError(f"instances of {inst} GPUs ({layout.label}) do not pack into nodes of {per_node}")
    per_node_instances = per_node // inst
    return [InstancePlacement(r, (r // per_node_instances,), inst, (r % per_node_instances) * inst, per_node)
            for r in range(layout.replicas)]

