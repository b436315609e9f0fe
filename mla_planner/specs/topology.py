"""Cluster topology: nodes of GPUs, the link inside a node and the fabric between nodes.

Every number carries its unit in its name. The GPU is named from the built-in table (specs/gpu.py,
`mla_planner/data/gpus.yaml`) or given inline.

Frozen dataclasses: a built-in topology is built directly from its file (no pydantic import on the way to a
plan); a user's file is validated by pydantic on the fields' `Checked` constraints (core/validation.py), and
tests/test_topology_schema.py holds every built-in equal to its validated self. `__post_init__` checks that the
fields agree, either way.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal, Optional

from mla_planner.core.errors import FieldError, InputError, PlanError, did_you_mean
from mla_planner.core.files import (Checked, Flag, NonNegInt, path_kind, read_mapping, user_path,
                                    with_floats)
from mla_planner.core.validation import validate
from mla_planner.core.resources import data_dir, read_data
from mla_planner.specs.efficiency import check_overrides
from mla_planner.specs.gpu import GPU, LatencyUs, LinkGBps, gpu_table

STRICT = {"extra": "forbid"}     # read by pydantic when it validates a user's file: unknown keys are refused


@dataclass(frozen=True, kw_only=True)
class IntraNode:
    __pydantic_config__ = STRICT
    kind: Literal["nvswitch", "nvlink", "xgmi", "pcie"] = "nvswitch"   # xgmi: AMD Infinity Fabric, a full mesh
    gbytes_per_s: Optional[LinkGBps] = None   # per GPU, per direction; default: the GPU's NVLink or PCIe
    latency_us: LatencyUs = 3.0
    nvls: Optional[Flag] = None                    # NVLink SHARP all-reduce; default on for NVSwitch, SM90+

    def __post_init__(self) -> None:
        with_floats(self)


MAX_NIC_GBIT_PER_S = 3200   # above any NIC sold (ConnectX-8: 800 Gb/s); catches a figure in bits/s


@dataclass(frozen=True, kw_only=True)
class InterNode:
    __pydantic_config__ = STRICT
    fabric: Literal["infiniband", "roce", "ethernet"]
    nics_per_node: Annotated[int, Checked(strict=True, gt=0, le=64)]
    nic_gbit_per_s: Annotated[float, Checked(allow_inf_nan=False, gt=0)]   # the ceiling below names a unit mistake
    latency_us: LatencyUs = 5.0
    socket_ifname: Optional[str] = None   # NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
    ib_hca: Optional[str] = None          # NCCL_IB_HCA, e.g. "mlx5_0,mlx5_1"
    ib_gid_index: Optional[NonNegInt] = None  # NCCL_IB_GID_INDEX (RoCE v2: usually 3)

    def __post_init__(self) -> None:
        with_floats(self)
        if self.nic_gbit_per_s > MAX_NIC_GBIT_PER_S:
            raise FieldError("nic_gbit_per_s", f"is in Gb/s per NIC (400 for NDR InfiniBand), at most "
                             f"{MAX_NIC_GBIT_PER_S:,}; got {self.nic_gbit_per_s:g} (bits/s?)")
        self._hcas_match_nics()

    def _hcas_match_nics(self) -> None:
        """NCCL_IB_HCA restricts NCCL to the devices it names: exact names (mlx5_0, =mlx5_0, mlx5_0:1) fewer
        than nics_per_node would leave NICs the model prices unused, and more would have NCCL spread over NICs
        the model does not price (a storage or front-end NIC, or a nics_per_node set too low). Ports of one
        device (mlx5_0:1,mlx5_0:2) count once. A prefix (mlx5) or an exclusion (^...) names no count, and is
        left alone."""
        if not self.ib_hca or self.ib_hca.startswith("^"):
            return
        names = [n.strip() for n in self.ib_hca.lstrip("=").split(",") if n.strip()]
        exact = self.ib_hca.startswith("=") or all(re.fullmatch(r"[\w.-]*_\d+(:\d+)?", n) for n in names)
        devices = len({n.split(":")[0] for n in names})
        if exact and self.fabric != "ethernet" and devices != self.nics_per_node:
            raise ValueError(f"ib_hca names {devices} HCA(s) ({self.ib_hca}) but nics_per_node is "
                             f"{self.nics_per_node}: NCCL would use " + ("only those" if devices < self.nics_per_node
                                                                         else "all of them") + "; make them agree")


@dataclass(frozen=True, kw_only=True)
class Topology:
    __pydantic_config__ = STRICT
    name: str
    description: str = ""
    nodes: Annotated[int, Checked(strict=True, gt=0, le=65_536)]   # hosts (a GB200 NVL72 compute tray is one)
    gpus_per_node: Annotated[int, Checked(strict=True, gt=0, le=1_024)]
    nvlink_domain_nodes: Annotated[int, Checked(strict=True, gt=0, le=1_024)] = 1     # hosts that share one NVLink domain: 18 for a GB200/GB300 NVL72 rack (18
                                        # trays of 4 GPUs on its NVLink switch trays); 1 for an ordinary node
    gpu: GPU                            # built in code, a built-in GPU's name is taken too (its table entry)
    intra_node: IntraNode = IntraNode()
    inter_node: Optional[InterNode] = None
    efficiency: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """A GPU named from the table (or nested fields given as mappings, as a built-in file has them) is
        built, then the fields are checked to agree."""
        with_floats(self)
        gpu = self.gpu
        if isinstance(gpu, str):
            table = gpu_table()
            if gpu not in table:
                raise ValueError(f"unknown GPU '{gpu}'{did_you_mean(gpu, table)}; built-in: {', '.join(table)}")
            gpu = table[gpu]
        object.__setattr__(self, "gpu", GPU(**gpu) if isinstance(gpu, dict) else gpu)
        if isinstance(self.intra_node, dict):
            object.__setattr__(self, "intra_node", IntraNode(**self.intra_node))
        if isinstance(self.inter_node, dict):
            object.__setattr__(self, "inter_node", InterNode(**self.inter_node))
        object.__setattr__(self, "efficiency", {key: float(frac) for key, frac in self.efficiency.items()})
        for key, frac in self.efficiency.items():
            if not 0 < frac <= 1:
                raise FieldError("efficiency", f"efficiency.{key} must be in (0, 1], got {frac}")
        self._fabric_when_multinode()

    def _fabric_when_multinode(self) -> None:
        if self.nodes > 1 and self.inter_node is None:
            raise ValueError("inter_node is required when nodes > 1")
        link = "xgmi_bytes_per_s" if self.intra_node.kind == "xgmi" else "nvlink_bytes_per_s"
        if self.intra_node.kind != "pcie" and not self.intra_node.gbytes_per_s and not getattr(self.gpu, link):
            raise ValueError(f"intra_node.kind is {self.intra_node.kind} but GPU {self.gpu.name} has no {link}: give "
                             "the GPU's link bandwidth per direction, or intra_node.gbytes_per_s")
        if self.nvlink_domain_nodes > 1:
            if self.intra_node.kind not in ("nvswitch", "nvlink"):
                raise ValueError(f"nvlink_domain_nodes {self.nvlink_domain_nodes}: hosts share an NVLink domain only "
                                 f"over NVLink switches; intra_node.kind is {self.intra_node.kind}")
            if self.nodes % self.nvlink_domain_nodes:
                raise ValueError(f"nodes {self.nodes} is not a whole number of NVLink domains of "
                                 f"{self.nvlink_domain_nodes} hosts")
        if (self.intra_node.kind == "xgmi") != (self.gpu.vendor == "amd"):
            raise ValueError(f"intra_node.kind {self.intra_node.kind} does not go with an {self.gpu.vendor.upper()} GPU "
                             "(xgmi is AMD's Infinity Fabric; NVIDIA GPUs link by nvswitch, nvlink or pcie)")

    @cached_property
    def _content_hash(self) -> int:
        return hash(json.dumps(asdict(self), sort_keys=True))

    def __hash__(self) -> int:
        """Equal content, equal hash, computed once: the model functions memoise on the topology
        (efficiency is a dict)."""
        return self._content_hash

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def domain_gpus(self) -> int:
        """GPUs one NVLink domain holds: a node's, or a rack's where hosts share one (NVL72: 72). Collectives inside
        it run over NVLink; launch scripts are still one per host (gpus_per_node)."""
        return self.gpus_per_node * self.nvlink_domain_nodes

    @property
    def domains(self) -> int:
        """NVLink domains in the cluster: what the fabric between nodes (inter_node) connects."""
        return self.nodes // self.nvlink_domain_nodes

    @property
    def intra_bytes_per_s(self) -> float:
        """Per-GPU, per-direction bandwidth inside a node. PCIe default: Gen4 x16 ~25 GB/s achievable
        per direction (32 GB/s line); NVLink and AMD Infinity Fabric (xgmi) default: the GPU table's figure."""
        if self.intra_node.gbytes_per_s:
            return self.intra_node.gbytes_per_s * 1e9
        if self.intra_node.kind == "xgmi" and self.gpu.xgmi_bytes_per_s:
            return self.gpu.xgmi_bytes_per_s
        if self.intra_node.kind == "pcie" or not self.gpu.nvlink_bytes_per_s:
            return 25e9
        return self.gpu.nvlink_bytes_per_s

    @property
    def nic_bytes_per_s_per_node(self) -> float:
        """Aggregate line rate of a node's NICs, bytes/s (Gb/s / 8)."""
        if not self.inter_node:
            return 0.0
        return self.inter_node.nics_per_node * self.inter_node.nic_gbit_per_s * 1e9 / 8

    @property
    def nic_gbit_per_s_per_gpu(self) -> float:
        """A GPU's share of its node's NICs' line rate, Gb/s: what a TP or EP group across nodes gets per GPU
        (below one NIC's rate where GPUs share NICs)."""
        return self.nic_bytes_per_s_per_node * 8 / 1e9 / self.gpus_per_node

    @property
    def uses_nvls(self) -> bool:
        if self.intra_node.nvls is not None:
            return self.intra_node.nvls
        return self.intra_node.kind == "nvswitch" and self.gpu.sm >= 90


def builtin_topologies() -> dict[str, Path]:
    return {p.stem: p for p in sorted(data_dir("topologies").glob("*.yaml"))}


def load_topology(ref: str) -> Topology:
    """A built-in topology name or a YAML file path."""
    builtin = builtin_topologies()
    if not ref.strip():
        raise PlanError(f"the topology is empty: give a built-in name ({', '.join(builtin)}) or a YAML file")
    path = user_path(ref)
    kind = path_kind(path)
    ref = ref.lower() if kind == "missing" and ref.lower() in builtin else ref   # 8xH200 as models take DeepSeek-V3
    if ref in builtin and kind == "missing":
        path = builtin[ref]
    elif kind == "missing":
        raise InputError(ref, "not a built-in topology nor an existing file" + did_you_mean(ref, builtin)
                         + f"; built-ins: {', '.join(builtin)}")
    if path == builtin.get(ref):   # the package's own file, checked by the tests: built directly
        topo = Topology(**read_data(path))
    else:
        topo = validate(Topology, gpu_named(read_mapping(path), str(path)), str(path))
    check_overrides(topo.efficiency, str(path))
    return topo


def gpu_named(data: dict, where: str, at: str = "gpu") -> dict:
    """A topology mapping DATA with a built-in GPU's name replaced by its table entry (an unknown name refused at
    `at`, the field's place in the file): what a user's topology or a plan file gives before it is validated."""
    name = data.get("gpu")
    if not isinstance(name, str):
        return data
    table = gpu_table()
    if name not in table:
        raise InputError(where, f"unknown GPU '{name}'{did_you_mean(name, table)}; built-in: {', '.join(table)}", at)
    return {**data, "gpu": table[name]}
