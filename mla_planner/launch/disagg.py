"""A disaggregated deployment's commands: every pool's nodes (the engine's own commands for the pool's layout,
built by build.py as if the pool were a cluster of its own, with each instance one replica) plus the role flags
of engines/disagg.py, and the router that sends each request to a prefill and a decode instance.

Nodes are numbered over the deployment: the prefill pool's first, then the decode pool's (`Node.pool_node` is the
node's number inside its pool, `Node.node` over the deployment).

SGLang   --disaggregation-mode prefill|decode, --disaggregation-transfer-backend mooncake,
         --disaggregation-ib-device (the topology's HCAs), --disaggregation-bootstrap-port on the prefill side;
         with DeepEP, --deepep-mode normal on prefill and low_latency on decode (its default `auto` switches per
         batch, which the disaggregated recipes pin per pool: sgl-project/sglang#6017, docs expert_parallelism.md).
vLLM     --kv-transfer-config with NixlConnector, kv_producer on prefill and kv_consumer on decode; each node's
         VLLM_NIXL_SIDE_CHANNEL_HOST is its own cluster IP (vLLM docs/features/nixl_connector_usage.md), the
         transport NIC list UCX_NET_DEVICES from the topology's HCAs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from mla_planner.engines.disagg import (ROUTER_PORT, SGLANG_BOOTSTRAP_PORT, SGLANG_TRANSFER_BACKEND, VLLM_CONNECTOR,
                                        VLLM_NIXL_SIDE_CHANNEL_PORT)
from mla_planner.launch import a2a
from mla_planner.launch.build import build
from mla_planner.launch.command import LaunchInputs, NodeCommand, ShellRef, flag_words
from mla_planner.search.candidate import DisaggCandidate, Pool
from mla_planner.search.disagg import pool_topology
from mla_planner.search.planfile import Plan


@dataclass(frozen=True)
class Node:
    """One node of a disaggregated deployment and what it runs."""
    role: str                  # prefill or decode
    node: int                  # over the deployment: prefill nodes first
    pool_node: int             # inside its pool
    command: NodeCommand


def pool_inputs(plan: Plan, pool: Pool, model_path: str | None = None) -> LaunchInputs:
    """The pool as a cluster of its own: its nodes, its layout with one replica per instance."""
    topo = pool_topology(plan.topology, pool.instances * pool.nodes_per_instance)
    return LaunchInputs(plan.spec, topo, plan.workload, replace(pool.layout, replicas=pool.instances), pool.knobs,
                        model_path if model_path is not None else plan.model_path)


def transfer_devices(ib_hca: str | None) -> list[str]:
    """The HCAs the KV transfer may use, from the topology's NCCL_IB_HCA string: its device names without NCCL's
    `=` (exact match) and `:port` decorations; none (the transfer engines pick their own) where it excludes devices
    (`^...`), a form neither Mooncake's --disaggregation-ib-device nor UCX_NET_DEVICES has."""
    if not ib_hca or ib_hca.startswith("^"):
        return []
    return [name.lstrip("=").split(":")[0] for name in ib_hca.split(",") if name.strip("=")]


def role_flags(engine: str, role: str, inp: LaunchInputs) -> tuple[list[str], dict]:
    """(flags, env) a pool's engine command gains for its role."""
    inter = inp.topology.inter_node
    devices = transfer_devices(inter.ib_hca if inter else None)
    hcas = ",".join(devices) or None
    if engine == "sglang":
        deepep = a2a.sglang_backend(inp.layout, inp.topology.gpu) == "deepep"   # MoRI: its normal mode, priced
        return flag_words([("--disaggregation-mode", role),
                           ("--disaggregation-transfer-backend", SGLANG_TRANSFER_BACKEND[inp.topology.gpu.vendor]),
                           ("--disaggregation-bootstrap-port", SGLANG_BOOTSTRAP_PORT if role == "prefill" else None),
                           ("--disaggregation-ib-device", hcas),
                           ("--deepep-mode", ("normal" if role == "prefill" else "low_latency") if deepep else None),
                           ]), {}
    config = {"kv_connector": VLLM_CONNECTOR, "kv_role": "kv_producer" if role == "prefill" else "kv_consumer"}
    env = {"VLLM_NIXL_SIDE_CHANNEL_HOST": ShellRef("VLLM_HOST_IP"),
           "VLLM_NIXL_SIDE_CHANNEL_PORT": str(VLLM_NIXL_SIDE_CHANNEL_PORT)}
    if devices:
        env["UCX_NET_DEVICES"] = ",".join(f"{name}:1" for name in devices)
    return flag_words([("--kv-transfer-config", json.dumps(config, separators=(",", ":")))]), env


def _pool_nodes(plan: Plan, pool: Pool, engine: str, offset: int, model_path: str | None) -> list[Node]:
    inp = pool_inputs(plan, pool, model_path)
    flags, env = role_flags(engine, pool.role, inp)
    out = []
    for c in build(inp, engine):
        argv = c.argv + flags if c.runs_engine else c.argv
        needs = tuple(dict.fromkeys(c.needs + (("VLLM_HOST_IP",) if engine == "vllm" else ())))
        cmd = replace(c, argv=argv, env={**c.env, **env}, needs=needs)
        out.append(Node(pool.role, offset + c.node_rank, c.node_rank, cmd))
    return out


def deployment_nodes(plan: Plan, d: DisaggCandidate, model_path: str | None = None) -> list[Node]:
    """Every node's command: the prefill pool's nodes, then the decode pool's (the pools as the search made them, or
    as search/planfile.py checked them on reading a plan file)."""
    prefill = _pool_nodes(plan, d.prefill, d.engine, 0, model_path)
    first_decode = d.prefill.instances * d.prefill.nodes_per_instance
    return prefill + _pool_nodes(plan, d.decode, d.engine, first_decode, model_path)


def servers(nodes: list[Node], role: str) -> list[Node]:
    """The nodes that serve HTTP for `role`: each instance's head."""
    return [n for n in nodes if n.role == role and n.command.port is not None]


def router_argv(engine: str, nodes: list[Node]) -> list[str]:
    """The router in front of both pools, each instance by its head's address (PREFILL_K / DECODE_K, which
    router.sh sets) and port: SGLang's sglang-router in PD mode (each prefill with its bootstrap port), or
    vllm-router with --vllm-pd-disaggregation (github.com/vllm-project/router README)."""
    words: list[str] = []
    if engine == "sglang":
        words = ["python3", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
        for i, n in enumerate(servers(nodes, "prefill")):
            words += ["--prefill", ShellRef(f"PREFILL_{i}", f":{n.command.port}", "http://"), str(SGLANG_BOOTSTRAP_PORT)]
        for i, n in enumerate(servers(nodes, "decode")):
            words += ["--decode", ShellRef(f"DECODE_{i}", f":{n.command.port}", "http://")]
    else:
        words = ["vllm-router", "--vllm-pd-disaggregation"]
        for i, n in enumerate(servers(nodes, "prefill")):
            words += ["--prefill", ShellRef(f"PREFILL_{i}", f":{n.command.port}", "http://")]
        for i, n in enumerate(servers(nodes, "decode")):
            words += ["--decode", ShellRef(f"DECODE_{i}", f":{n.command.port}", "http://")]
    return words + ["--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
