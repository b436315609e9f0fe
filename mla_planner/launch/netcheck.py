"""The README's "is the cross-node all-reduce as fast as planned?" section, for an instance whose TP group spans
nodes: the decode all-reduce the plan prices (its size, its time at the default efficiencies, NCCL's algorithm),
how much each extra microsecond costs a decode step, and the two ways to measure it on the nodes: nccl-tests'
all_reduce_perf at exactly that size (NCCL's hot loop, the published tables the model is checked against:
tests/test_comm.py) and `mla-plan verify` under torchrun, whose in-step timing (collective.all_reduce.in_step)
is the one that calibrates `internode_latency_s` (docs/step-model.md section 9: the one published in-engine TP16
run across two nodes was 2.2x slower per token than nccl-tests' speed prices).
"""

from __future__ import annotations

import shlex
from math import ceil
from typing import Optional

from mla_planner.core.units import ACT_BYTES
from mla_planner.launch.command import LaunchInputs
from mla_planner.launch.env import network_env
from mla_planner.perf.comm import collective
from mla_planner.perf.step import decode_step
from mla_planner.search.candidate import Performance
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.knobs import decode_query_len


def cross_node_all_reduce(inp: LaunchInputs, performance: Optional[Performance]) -> Optional[dict]:
    """The section's figures, or None where the TP group stays inside a node or the plan holds no batch."""
    L, topo, spec = inp.layout, inp.topology, inp.spec
    batch = performance.concurrency_per_dp_rank if performance else None
    if L.tp <= topo.gpus_per_node or not batch:
        return None
    calib = load_calibration(None, topo)
    step = decode_step(spec, topo, L, inp.knobs, batch, inp.workload.mean_decode_context, calib,
                       mtp_acceptance=inp.workload.mtp_acceptance)
    nbytes = step.micro_batch * decode_query_len(inp.knobs) * spec.hidden_size * ACT_BYTES
    cost = collective("all_reduce", nbytes, L.tp, topo, calib)
    per_step = 2 * ceil(spec.num_hidden_layers / L.pp) + 1     # two per layer of the stage, and the embedding's
    nodes = L.tp // topo.gpus_per_node
    hosts = ",".join(f"NODE{i}:{topo.gpus_per_node}" for i in range(nodes))
    env = " ".join(f"-x {shlex.quote(f'{k}={v}')}" for k, v in network_env(topo).env.items())
    return dict(nbytes=int(nbytes), bytes=f"{nbytes:,.0f}", mb=f"{nbytes / 1e6:.2f}", gpus=L.tp, nodes=nodes,
                algorithm=cost.algorithm,
                us=f"{cost.time_s * 1e6:.0f}", per_step=per_step, step_ms=f"{step.step_s * 1e3:.1f}",
                per_10us=f"{per_step * 10e-6 / step.step_s:.1%}",
                nccl_tests=f"mpirun -np {L.tp} -H {hosts} {env} ./build/all_reduce_perf "
                           f"-b {nbytes:.0f} -e {nbytes:.0f} -g 1 -n 200 -w 20")
