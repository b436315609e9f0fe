"""The environment a node needs: the network variables from the topology (sgl-project/sglang#3226, #7888),
the ROCm switches on an AMD GPU (data/rocm.yaml) and the pipeline layer split.

Network (multi-node instances only; inside a node NCCL uses NVLink/PCIe):
  NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME  the routable interface (else NCCL gets the exclusion list
                  `^lo,docker,veth`; Gloo takes one name, so it is left to the user). Gloo otherwise
                  falls back to loopback or the wrong NIC: "Gloo connectFullMesh failed".
  NCCL_IB_HCA     the HCAs, when the topology names them
  NCCL_IB_DISABLE 0 on InfiniBand/RoCE, 1 on plain Ethernet (TCP sockets, with a warning)
  NCCL_IB_GID_INDEX  the topology's value; 3 on RoCE v2 when unset (startup hangs otherwise)
  NVSHMEM_IB_GID_INDEX  the same, for DeepEP's NVSHMEM on RoCE
Pipeline split: vLLM `VLLM_PP_LAYER_PARTITION` and SGLang `SGLANG_PP_LAYER_PARTITION` (both read in
their `distributed/utils.py:get_pp_indices`, checked in the vLLM 0.33.0 / SGLang 0.5.23 wheels), set
whenever the layers do not split evenly, so the split the plan sized (memory.stage_layers: each engine's
own default split, unless the candidate's memory carries `pp_layer_partition`) is the split the engine runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.core.resources import data_dir, read_data
from mla_planner.memory.pp_split import partition_env_name, stage_layers
from mla_planner.specs.topology import Topology

ROCE_V2_GID_INDEX = 3
NCCL_IFNAME_EXCLUDE = "^lo,docker,veth"


@dataclass(frozen=True)
class NetworkEnv:
    env: dict[str, str]
    notes: list[str] = field(default_factory=list)   # fixed text for the script's comments


# Hosts that share an NVLink domain (GB200 / GB300 NVL72): NCCL reaches the other trays' GPUs over multi-node NVLink
# (NCCL >= 2.25.2 for GB200, NVIDIA's multi-node NVLink tuning guide, "NVIDIA NCCL"); 1 rather than its automatic
# default, so a missing IMEX channel fails loudly instead of quietly running the planned NVLink traffic over the NICs.
MNNVL_ENV = {"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1"}
MNNVL_NOTE = ("The hosts share an NVLink domain: the NVIDIA IMEX service must be running on every tray of it, with an "
              "IMEX channel (/dev/nvidia-caps-imex-channels) visible to the engine, before the engines start (NVIDIA IMEX "
              "Service for NVLink Networks guide); NCCL needs 2.25.2 or later for multi-node NVLink (the version "
              "NVIDIA's tuning guide gives for GB200).")


def network_env(topology: Topology, a2a: Optional[str] = None) -> NetworkEnv:
    """Variables for a node of a multi-node instance; `a2a`: the EP all-to-all library it runs across nodes (DeepEP's
    NVSHMEM, MoRI's own RDMA transport: their variables mirror NCCL's, as AMD's multi-node recipes derive them)."""
    inter = topology.inter_node
    if inter is None:
        return NetworkEnv({})
    env, notes = {"NCCL_SOCKET_IFNAME": inter.socket_ifname or NCCL_IFNAME_EXCLUDE}, []
    if inter.socket_ifname:
        env["GLOO_SOCKET_IFNAME"] = inter.socket_ifname
    else:
        notes.append("The topology names no socket interface: export GLOO_SOCKET_IFNAME=<cluster interface> "
                     "before running (Gloo otherwise picks loopback or the wrong NIC).")
    if inter.fabric == "ethernet":
        env["NCCL_IB_DISABLE"] = "1"
        notes.append("WARNING: Ethernet fabric - NCCL runs over TCP sockets (NET/Socket), 4-20x slower "
                     "cross-node collectives than InfiniBand or RoCE.")
        return NetworkEnv(env, notes)
    env["NCCL_IB_DISABLE"] = "0"
    if inter.ib_hca:
        env["NCCL_IB_HCA"] = inter.ib_hca
    else:
        notes.append("The topology names no HCAs: NCCL picks the IB/RoCE devices itself; on hosts with a "
                     "storage or management NIC too, export NCCL_IB_HCA=<the GPU-facing RDMA devices> (ibv_devinfo).")
    gid = network_gid(inter)
    if gid is not None:
        env["NCCL_IB_GID_INDEX"] = str(gid)
        if a2a == "deepep":
            env["NVSHMEM_IB_GID_INDEX"] = str(gid)
    if a2a == "mori":    # MoRI reads these itself (ROCm/mori RdmaContext: MORI_RDMA_DEVICES, ...)
        mori = {"MORI_IB_GID_INDEX": str(gid) if gid is not None else None, "MORI_RDMA_DEVICES": inter.ib_hca,
                "MORI_SOCKET_IFNAME": inter.socket_ifname}
        env.update({name: value for name, value in mori.items() if value})
    return NetworkEnv(env, notes)


@lru_cache(maxsize=1)
def _rocm() -> dict:
    return read_data(data_dir("rocm.yaml"))


def rocm_env(engine: str, topology: Topology) -> NetworkEnv:
    """On an AMD GPU, what the engine's command exports so the kernels the plan priced run (AITER's MLA and MoE),
    the fraction it sizes is kept, and RCCL runs as AMD recommends (data/rocm.yaml, each with its source); empty on
    NVIDIA."""
    gpu = topology.gpu
    if gpu.vendor != "amd":
        return NetworkEnv({})
    table = _rocm()
    entries = {**table[engine], **table["common"]}
    env = {name: e["value"] for name, e in entries.items() if gpu.gfx_arch in e.get("archs", [gpu.gfx_arch])}
    return NetworkEnv(env, list(table["notes"]))


def partition_env(engine: str, layers: int, pp: int, partition: Optional[tuple[int, ...]]) -> dict[str, str]:
    """`{ENGINE_PP_LAYER_PARTITION: "31,30"}` when the split is uneven (or the plan gives one), else {}."""
    if pp == 1:
        return {}
    parts = list(partition) if partition else stage_layers(layers, pp, engine)
    if len(parts) != pp or sum(parts) != layers or min(parts) < 1:
        raise PlanError(f"pipeline partition {parts} does not split {layers} layers into {pp} non-empty stages")
    if not partition and layers % pp == 0:
        return {}
    return {partition_env_name(engine): ",".join(str(p) for p in parts)}


def instance_env(engine: str, topology: Topology, multi_node: bool, visible_devices: Optional[str],
                 layers: int, pp: int, partition: Optional[tuple[int, ...]], a2a: Optional[str] = None) -> NetworkEnv:
    """Everything one command of an instance exports: GPUs, network (multi-node), layer split."""
    env: dict[str, str] = {}
    notes: list[str] = []
    if visible_devices is not None:     # ROCm builds of both engines read this one too (data/rocm.yaml notes)
        env["CUDA_VISIBLE_DEVICES"] = visible_devices
    rocm = rocm_env(engine, topology)
    env.update(rocm.env)
    notes += rocm.notes
    if multi_node:
        net = network_env(topology, a2a)
        env.update(net.env)
        notes += net.notes
        if topology.nvlink_domain_nodes > 1:
            env.update(MNNVL_ENV)
            notes.append(MNNVL_NOTE)
    env.update(partition_env(engine, layers, pp, partition))
    return NetworkEnv(env, notes)


def network_gid(inter) -> Optional[int]:
    """The GID index the scripts export as NCCL_IB_GID_INDEX: the topology's, else RoCE v2's usual 3 on RoCE;
    None on Ethernet, on InfiniBand unless the topology names one, and without an inter-node fabric."""
    if inter is None or inter.fabric == "ethernet":
        return None
    return inter.ib_gid_index if inter.ib_gid_index is not None else (
        ROCE_V2_GID_INDEX if inter.fabric == "roce" else None)
