"""GPU-count sanity: the GPUs each emitted command would claim, read back from its own argv by the
engine's rules, must equal what the plan placed there, per node and in total. A bug guard: a
mismatch means the flag mapping and the placement disagree.

  vLLM    a command claims tp*pp*dp_local GPUs on its node: dp_local = --data-parallel-size-local,
          else dp on one node; with --nnodes the world tp*pp*dp is split evenly over the nodes
          (arg_utils.py: local_world_size = world_size // nnodes); a Ray head claims tp*pp*dp over the
          whole Ray cluster, which the placement spreads evenly over the instance's nodes
  SGLang  tp_size*pp_size over --nnodes nodes (--tp-size spans every GPU of a DP-attention group)
"""

from __future__ import annotations

from collections import Counter

from mla_planner.core.errors import PlanError
from mla_planner.launch.command import NodeCommand
from mla_planner.launch.placement import InstancePlacement
from mla_planner.specs.layout import Layout


def _int_flags(args: list[str], names: dict[str, str]) -> dict[str, int]:
    """{key: int value} for the flags in `names` (flag -> key) that appear in `args`."""
    found = {}
    for word, value in zip(args, args[1:]):
        if word in names:
            found[names[word]] = int(value)
    return found


def vllm_claim(cmd: NodeCommand) -> tuple[int, int]:
    """(GPUs on this node, GPUs over the whole instance) that a `vllm serve` command claims."""
    f = _int_flags(cmd.engine_args, {"--tensor-parallel-size": "tp", "--pipeline-parallel-size": "pp",
                                      "--data-parallel-size": "dp", "--data-parallel-size-local": "dpl",
                                      "--nnodes": "nnodes"})
    tp, pp, dp = f.get("tp", 1), f.get("pp", 1), f.get("dp", 1)
    world = tp * pp * dp
    if "--distributed-executor-backend" in cmd.engine_args or "--data-parallel-backend" in cmd.engine_args:
        return 0, world  # Ray: the head's own node is counted with the cluster below
    if "nnodes" in f:
        return world // f["nnodes"], world
    local = tp * pp * f.get("dpl", dp)
    return local, world


def sglang_claim(cmd: NodeCommand) -> tuple[int, int]:
    f = _int_flags(cmd.engine_args, {"--tp-size": "tp", "--pp-size": "pp", "--nnodes": "nnodes"})
    world = f.get("tp", 1) * f.get("pp", 1)
    return world // f.get("nnodes", 1), world


def check_gpu_counts(engine: str, commands: list[NodeCommand], placements: list[InstancePlacement],
                     layout: Layout) -> None:
    """Raise PlanError unless every node's claimed GPUs equal the placement's, and the total the layout's."""
    claim = vllm_claim if engine == "vllm" else sglang_claim
    claimed: Counter = Counter()
    for p in placements:
        mine = [c for c in commands if c.replica == p.replica and c.runs_engine]
        for c in mine:
            local, world = claim(c)
            if world != p.total_gpus:
                raise PlanError(f"bug: replica {p.replica}'s command on node {c.node_rank} claims {world} GPUs in "
                                f"all; the plan placed {p.total_gpus}")
            if c.role == "ray-head":
                for node in p.nodes:
                    claimed[(p.replica, node)] += world // len(p.nodes)
            else:
                if local != c.gpus:
                    raise PlanError(f"bug: node {c.node_rank}'s command claims {local} GPUs by its flags but is "
                                    f"listed with {c.gpus}")
                claimed[(p.replica, c.node_rank)] += local
            visible = c.env.get("CUDA_VISIBLE_DEVICES")
            if visible is not None and len(visible.split(",")) != c.gpus:
                raise PlanError(f"bug: node {c.node_rank} exposes {visible} to a command claiming {c.gpus} GPUs")
        for node in p.nodes:
            if claimed[(p.replica, node)] != p.gpus_per_node:
                raise PlanError(f"bug: replica {p.replica} claims {claimed[(p.replica, node)]} GPUs on node {node}; "
                                f"the plan placed {p.gpus_per_node} there")
    if sum(claimed.values()) != layout.total_gpus:
        raise PlanError(f"bug: the commands claim {sum(claimed.values())} GPUs; the plan uses {layout.total_gpus}")
