"""A GPU as the planner prices it: vendor and architecture, the memory the engine sees, HBM bandwidth, dense
tensor rates per precision and its links. The built-in table is `mla_planner/data/gpus.yaml`, each figure with
its source; a topology may also give a GPU inline.

A frozen dataclass: the built-in table is built directly (no pydantic import on the way to a plan); a GPU given
in a user's topology is validated by pydantic on the fields' `Checked` constraints (core/validation.py), and
tests/test_topology_schema.py holds every built-in GPU equal to its validated self.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Annotated, Literal, Optional

from mla_planner.core.files import Checked, with_floats
from mla_planner.core.resources import data_dir, read_data

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


@dataclass(frozen=True, kw_only=True)
class GPU:
    """One GPU model as the planner prices it (a row of data/gpus.yaml, or given inline in a topology)."""
    __pydantic_config__ = {"extra": "forbid"}     # read by pydantic when it validates a user's file
    name: str
    vendor: Literal["nvidia", "amd"] = "nvidia"
    memory_bytes: MemoryBytes
    nvidia_smi_mib: Optional[Count] = None   # total as nvidia-smi prints it (SGLang sizes defaults by it)
    hbm_bytes_per_s: HbmRate
    bf16_flops_per_s: FlopRate
    fp8_flops_per_s: OptionalFlopRate = 0.0
    int8_ops_per_s: OptionalFlopRate = 0.0    # dense INT8 tensor-core rate (W8A8 GEMMs); 0: they run at bf16's
    fp4_flops_per_s: OptionalFlopRate = 0.0   # dense FP4 tensor-core rate (NVFP4 W4A4); 0: none (Marlin, bf16 math)
    compute_capability: Optional[Annotated[str, Checked(pattern=r"^\d+\.\d+$")]] = None   # NVIDIA: what CUDA reports
    gfx_arch: Optional[Annotated[str, Checked(pattern=r"^gfx[0-9a-f]+$")]] = None           # AMD: the ROCm gfx target
    nvlink_bytes_per_s: LinkRate = 0.0
    xgmi_bytes_per_s: LinkRate = 0.0   # AMD Infinity Fabric to its peers, per GPU per direction (all links)
    cuda_name: Optional[str] = None           # torch.cuda.get_device_name(): what tuned-kernel files are keyed on
    source: Optional[str] = None

    def __post_init__(self) -> None:
        """The architecture fields agree with the vendor, and a GPU with FP8 tensor cores gives their rate."""
        with_floats(self)
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


@lru_cache(maxsize=1)
def gpu_table() -> dict[str, GPU]:
    """The built-in GPUs by name (data/gpus.yaml), built directly from the package's own file."""
    raw = read_data(data_dir("gpus.yaml"))
    return {name: GPU(name=name, **fields) for name, fields in raw.items()}
