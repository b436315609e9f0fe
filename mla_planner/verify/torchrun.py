"""`verify --print-launch`: the per-node torchrun commands that run `verify` over one instance of the plan.

One instance (tp x dp x pp GPUs) is what the collectives need; replicas are identical copies. An
instance that fills whole nodes spans instance_gpus / gpus_per_node of them with a process per GPU;
a smaller one runs on the first instance_gpus GPUs of one node. torchrun's static rendezvous takes
`--rdzv-endpoint HEAD:PORT` and `--node-rank K` (torch.distributed.run). The commands run torchrun
through verify's launcher (`python3 -m mla_planner.verify.launcher`, verify/launcher.py: torchrun's
own options and launch, a failing rank reported in one line instead of a ChildFailedError traceback);
`torchrun` with the same options works too. Every word is shell-quoted; without `--head`, the
endpoint is `"${HEAD_IP}":PORT` for each node's shell to fill in. Torch-free.
"""

from __future__ import annotations

from math import ceil
from typing import Optional

from mla_planner.launch.command import ShellRef
from mla_planner.launch.env import network_env
from mla_planner.launch.shell import one_line
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import Topology

LAUNCHER = ("python3", "-m", "mla_planner.verify.launcher")    # torchrun, failures in one line per rank


def node_shape(layout: Layout, topo: Topology) -> tuple[int, int]:
    """(nodes, processes per node) of one instance."""
    inst = layout.instance_gpus
    return ceil(inst / topo.gpus_per_node), min(inst, topo.gpus_per_node)


def launch_lines(layout: Layout, topo: Topology, verify_args: list[str], head: Optional[str] = None,
                 port: int = 29500) -> list[str]:
    """Comment lines and one command per node, in node order (node 0 is the rendezvous head). One node:
    `torchrun --standalone` (no head address needed). Several: each command carries the network variables
    the serving scripts export (launch/env.py), so the collectives take the path the engine will."""
    nnodes, per_node = node_shape(layout, topo)
    lines = [f"# verify {layout.label} on {topo.name}: {nnodes} node(s) x {per_node} GPU(s), one process per GPU"]
    if layout.replicas > 1:
        lines.append(f"# the plan runs {layout.replicas} identical replicas; this checks one of them")
    tail = ["-m", "mla_planner.cli", "verify", *verify_args]
    lines.append("# torchrun through verify's launcher (a failing rank in one line); plain torchrun takes the same "
                 "options")
    if nnodes == 1:
        return lines + [one_line([*LAUNCHER, "--standalone", "--nproc-per-node", str(per_node), *tail])]
    endpoint = f"{head}:{port}" if head else ShellRef("HEAD_IP", f":{port}")
    if not head:
        lines.append("# set HEAD_IP to node 0's address on every node first (or pass --head)")
    net = network_env(topo)
    lines += [f"# {note}" for note in net.notes]
    env = "".join(f"{name}={one_line([value])} " for name, value in net.env.items())
    for k in range(nnodes):
        argv = [*LAUNCHER, "--nnodes", str(nnodes), "--nproc-per-node", str(per_node), "--node-rank", str(k),
                "--rdzv-endpoint", endpoint, *tail]
        lines += [f"# node {k}" + (" (head)" if k == 0 else ""), env + one_line(argv)]
    return lines
