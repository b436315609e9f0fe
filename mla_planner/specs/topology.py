"""Cluster topology: nodes of GPUs, the link inside a node and the fabric between nodes.

Every number carries its unit in its name. The GPU is named from the built-in table
(`mla_planner/data/gpus.yaml`, each figure with its source) or given inline.
"""

from __future__ import annotations

import re

from functools import cached_property, lru_cache
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mla_planner.core.errors import InputError, PlanError, did_you_mean
from mla_planner.core.files import Checked, parse_yaml, Flag, NonNegInt, path_kind, read_mapping, user_path
from mla_planner.core.validation import validate
from mla_planner.core.hashing import HashedByContent
from mla_planner.core.resources import data_dir
from mla_planner.specs.efficiency import check_overrides

Strict = ConfigDict(frozen=True, extra="forbid")

# Plausible ranges (units in the names), spanning every GPU and link sold with margin on both sides: they refuse
# what is not a measurement (NaN, .inf, 1e-300 B/s, 1e30 B of memory: priced, it gave 5.6e25 KV tokens) before
# it reaches the model. Memory up to 4 TiB per GPU; HBM 10 GB/s - 1 PB/s; dense tensor rates 1 TFLOP/s -
# 1 EFLOP/s (0: no such tensor cores); links up to 100 TB/s; latencies up to one second.
MemoryBytes = Annotated[int, Checked(strict=True, ge=2**28, le=2**42)]
HbmRate = Annotated[float, Checked(allow_inf_nan=False, ge=1e10, le=1e15)]
FlopRate = Annotated[float, Checked(allow_inf_nan=False, ge=1e12, le=1e18)]
OptionalFlopRate = Annotated[float, Checked(allow_inf_nan=False, ge=0, le=1e18)]
LinkRate = Annotated[float, Checked(allow_inf_nan=False, ge=0, le=1e14)]
LinkGBps = Annotated[float, Checked(allow_inf_nan=False, ge=0.1, le=1e5)]
LatencyUs = Annotated[float, Checked(allow_inf_nan=False, ge=1e-3, le=1e6)]
Count = Annotated[int, Checked(strict=True, gt=0, le=1_000_000)]

# The NVIDIA architectures by compute capability (CUDA C Programming Guide, "Compute Capabilities"), and AMD's by gfx
# target (ROCm "GPU hardware specifications": gfx942 is MI300X / MI325X, CDNA3; gfx950 is MI355X / MI350X, CDNA4).
# Blackwell is two families to the engines: sm10x (B200, GB200...) and sm12x (RTX PRO 6000, RTX 50: no sm10x kernels).
NVIDIA_ARCHS = {"7.0": "volta", "7.5": "turing", "8.0": "ampere", "8.6": "ampere", "8.7": "ampere", "8.9": "ada",
                "9.0": "hopper", "10.0": "blackwell", "10.3": "blackwell", "11.0": "blackwell",
                "12.0": "blackwell-sm12x", "12.1": "blackwell-sm12x"}
AMD_ARCHS = {"gfx90a": "cdna2", "gfx942": "cdna3", "gfx950": "cdna4"}


class GPU(BaseModel):
    model_config = Strict
    name: str
    vendor: Literal["nvidia", "amd"] = "nvidia"
    memory_bytes: MemoryBytes
    nvidia_smi_mib: Optional[Count] = None   # total as nvidia-smi prints it (SGLang sizes defaults by it)
    hbm_bytes_per_s: HbmRate
    bf16_flops_per_s: FlopRate
    fp8_flops_per_s: OptionalFlopRate = 0.0
    int8_ops_per_s: OptionalFlopRate = 0.0    # dense INT8 tensor-core rate (W8A8 GEMMs); 0: they run at bf16's
    fp4_flops_per_s: OptionalFlopRate = 0.0   # dense FP4 tensor-core rate (NVFP4 W4A4); 0: none (Marlin, bf16 math)
    compute_capability: Optional[str] = Field(None, pattern=r"^\d+\.\d+$")   # NVIDIA: what CUDA reports
    gfx_arch: Optional[str] = Field(None, pattern=r"^gfx[0-9a-f]+$")           # AMD: the ROCm gfx target
    nvlink_bytes_per_s: LinkRate = 0.0
    xgmi_bytes_per_s: LinkRate = 0.0   # AMD Infinity Fabric to its peers, per GPU per direction (all links)
    cuda_name: Optional[str] = None           # torch.cuda.get_device_name(): what tuned-kernel files are keyed on
    source: Optional[str] = None

    @model_validator(mode="after")
    def _fp8_rate_where_fp8_exists(self):
        if self.vendor == "nvidia":
            if self.compute_capability is None:
                raise ValueError("compute_capability is required for an NVIDIA GPU (e.g. \"9.0\" for Hopper)")
            if self.compute_capability not in NVIDIA_ARCHS:
                raise ValueError(f"compute_capability {self.compute_capability} is not an NVIDIA architecture (known: "
                                 f"{', '.join(NVIDIA_ARCHS)}); an AMD Instinct GPU is given as vendor: amd with its "
                                 "gfx_arch (gfx942: MI300X / MI325X, gfx950: MI355X)")
            if self.gfx_arch is not None:
                raise ValueError("gfx_arch is an AMD field; an NVIDIA GPU has a compute_capability")
        else:
            if self.gfx_arch not in AMD_ARCHS:
                raise ValueError(f"gfx_arch {self.gfx_arch} is not an AMD Instinct architecture the planner knows "
                                 f"({', '.join(AMD_ARCHS)})")
            if self.compute_capability is not None:
                raise ValueError("compute_capability is a CUDA figure; an AMD GPU is described by its gfx_arch")
        if self.sm >= 89 and not self.fp8_flops_per_s:
            raise ValueError(f"fp8_flops_per_s is missing: a compute capability {self.compute_capability} GPU has FP8 "
                             "tensor cores; give their dense FP8 FLOP/s (the datasheet's, without sparsity)")
        return self

    @cached_property
    def sm(self) -> int:
        """NVIDIA compute capability as an integer, 9.0 -> 90 (0 for an AMD GPU: no CUDA architecture)."""
        if self.compute_capability is None:
            return 0
        major, minor = self.compute_capability.split(".")
        return int(major) * 10 + int(minor)

    @property
    def arch(self) -> str:
        """The architecture family: NVIDIA ampere / ada / hopper / blackwell / blackwell-sm12x, AMD cdna2 / 3 / 4."""
        if self.vendor == "amd":
            return AMD_ARCHS[self.gfx_arch]
        return NVIDIA_ARCHS[self.compute_capability]

    @property
    def arch_id(self) -> str:
        """The architecture as the toolchains name it: sm90, sm100, gfx942."""
        return self.gfx_arch if self.vendor == "amd" else f"sm{self.sm}"

    @cached_property
    def has_fp8(self) -> bool:
        return self.fp8_flops_per_s > 0 and (self.sm >= 89 or self.vendor == "amd")

    def tensor_flops_per_s(self, precision: str) -> float:
        """Dense peak of a GEMM whose operands are `precision`: fp8 on FP8 tensor cores (sm89+), int8 (W8A8:
        int8 weights, per-token int8 activations) on INT8 tensor cores where the table gives their rate, else
        fp4 (NVFP4 W4A4) on FP4 tensor cores where the table gives their rate (Blackwell), w4a8 (MXFP4 weights with
        FP8 activations: Blackwell's mixed-input tensor-core MMA runs it at the FP8 rate) where the GPU has FP4
        tensor cores, else bf16 (weight-only formats, FP8 Marlin, int4 and FP4 Marlin, dequantize to bf16 in the
        kernel)."""
        if precision == "fp8" and self.has_fp8:
            return self.fp8_flops_per_s
        if precision == "int8" and self.int8_ops_per_s:
            return self.int8_ops_per_s
        if precision == "fp4" and self.fp4_flops_per_s:
            return self.fp4_flops_per_s
        if precision == "w4a8" and self.fp4_flops_per_s and self.has_fp8:
            return self.fp8_flops_per_s
        return self.bf16_flops_per_s


class IntraNode(BaseModel):
    model_config = Strict
    kind: Literal["nvswitch", "nvlink", "xgmi", "pcie"] = "nvswitch"   # xgmi: AMD Infinity Fabric, a full mesh
    gbytes_per_s: Optional[LinkGBps] = None   # per GPU, per direction; default: the GPU's NVLink or PCIe
    latency_us: LatencyUs = 3.0
    nvls: Optional[Flag] = None                    # NVLink SHARP all-reduce; default on for NVSwitch, SM90+


MAX_NIC_GBIT_PER_S = 3200   # above any NIC sold (ConnectX-8: 800 Gb/s); catches a figure in bits/s


class InterNode(BaseModel):
    model_config = Strict
    fabric: Literal["infiniband", "roce", "ethernet"]
    nics_per_node: Annotated[int, Checked(strict=True, gt=0, le=64)]
    nic_gbit_per_s: Annotated[float, Checked(allow_inf_nan=False, gt=0)]   # the ceiling below names a unit mistake
    latency_us: LatencyUs = 5.0
    socket_ifname: Optional[str] = None   # NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
    ib_hca: Optional[str] = None          # NCCL_IB_HCA, e.g. "mlx5_0,mlx5_1"
    ib_gid_index: Optional[NonNegInt] = None  # NCCL_IB_GID_INDEX (RoCE v2: usually 3)

    @field_validator("nic_gbit_per_s")
    @classmethod
    def _gbit(cls, value: float):
        if value > MAX_NIC_GBIT_PER_S:
            raise ValueError(f"is in Gb/s per NIC (400 for NDR InfiniBand), at most {MAX_NIC_GBIT_PER_S:,}; got "
                             f"{value:g} (bits/s?)")
        return value

    @model_validator(mode="after")
    def _hcas_match_nics(self):
        """NCCL_IB_HCA restricts NCCL to the devices it names: exact names (mlx5_0, =mlx5_0, mlx5_0:1) fewer
        than nics_per_node would leave NICs the model prices unused, and more would have NCCL spread over NICs
        the model does not price (a storage or front-end NIC, or a nics_per_node set too low). Ports of one
        device (mlx5_0:1,mlx5_0:2) count once. A prefix (mlx5) or an exclusion (^...) names no count, and is
        left alone."""
        if not self.ib_hca or self.ib_hca.startswith("^"):
            return self
        names = [n.strip() for n in self.ib_hca.lstrip("=").split(",") if n.strip()]
        exact = self.ib_hca.startswith("=") or all(re.fullmatch(r"[\w.-]*_\d+(:\d+)?", n) for n in names)
        devices = len({n.split(":")[0] for n in names})
        if exact and self.fabric != "ethernet" and devices != self.nics_per_node:
            raise ValueError(f"ib_hca names {devices} HCA(s) ({self.ib_hca}) but nics_per_node is "
                             f"{self.nics_per_node}: NCCL would use " + ("only those" if devices < self.nics_per_node
                                                                         else "all of them") + "; make them agree")
        return self


class Topology(HashedByContent):
    model_config = Strict
    name: str
    description: str = ""
    nodes: Annotated[int, Checked(strict=True, gt=0, le=65_536)]   # hosts (a GB200 NVL72 compute tray is one)
    gpus_per_node: Annotated[int, Checked(strict=True, gt=0, le=1_024)]
    nvlink_domain_nodes: Annotated[int, Checked(strict=True, gt=0, le=1_024)] = 1     # hosts that share one NVLink domain: 18 for a GB200/GB300 NVL72 rack (18
                                        # trays of 4 GPUs on its NVLink switch trays); 1 for an ordinary node
    gpu: GPU
    intra_node: IntraNode = IntraNode()
    inter_node: Optional[InterNode] = None
    efficiency: dict[str, float] = {}

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu_by_name(cls, value):
        if isinstance(value, str):
            table = gpu_table()
            if value not in table:
                raise ValueError(f"unknown GPU '{value}'{did_you_mean(value, table)}; built-in: {', '.join(table)}")
            return table[value]
        return value

    @field_validator("efficiency")
    @classmethod
    def _fractions(cls, value: dict):
        for key, frac in value.items():
            if not 0 < frac <= 1:
                raise ValueError(f"efficiency.{key} must be in (0, 1], got {frac}")
        return value

    @model_validator(mode="after")
    def _fabric_when_multinode(self):
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
        return self

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


@lru_cache(maxsize=1)
def gpu_table() -> dict[str, GPU]:
    raw = parse_yaml((data_dir("gpus.yaml")).read_text())
    return {name: GPU(name=name, **fields) for name, fields in raw.items()}


def builtin_topologies() -> dict[str, Path]:
    return {p.stem: p for p in sorted(data_dir("topologies").glob("*.yaml"))}


def load_topology(ref: str) -> Topology:
    """A built-in topology name or a YAML file path."""
    builtin = builtin_topologies()
    if not ref.strip():
        raise PlanError(f"the topology is empty: give a built-in name ({', '.join(builtin)}) or a YAML file")
    path = user_path(ref)
    kind = path_kind(path)
    if ref in builtin and kind == "missing":
        path = builtin[ref]
    elif kind == "missing":
        raise InputError(ref, "not a built-in topology nor an existing file" + did_you_mean(ref, builtin)
                         + f"; built-ins: {', '.join(builtin)}")
    topo = validate(Topology, read_mapping(path), str(path))
    check_overrides(topo.efficiency, str(path))
    return topo
