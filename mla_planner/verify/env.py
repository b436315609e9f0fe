"""The environment check: torch, CUDA, and the GPU this process drives against the topology's GPU.

A GPU matches when its product family (H200, H100, A100, ... the first word of the GPU table's
name) appears as a word in the name CUDA reports ("NVIDIA H200", "NVIDIA H100 80GB HBM3"), its
compute capability is the table's, a PCIe part is not planned as SXM, and its memory is within
MEMORY_TOLERANCE of the table's `memory_bytes` (the engines' visible figure, gpus.yaml).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
from dataclasses import dataclass

import torch

from mla_planner.core.errors import PlanError
from mla_planner.specs.gpu import GPU
from mla_planner.specs.topology import Topology
from mla_planner.verify.check import Check

MEMORY_TOLERANCE = 0.05   # visible memory differs from the table by the driver's reserve (~0.4 %) and
                          # by ECC or MIG settings; 5 % separates 80 / 94 / 141 GB parts of one family


@dataclass(frozen=True)
class DeviceInfo:
    type: str                  # "cuda" or "cpu"
    name: str
    memory_bytes: int
    compute_capability: str    # "9.0"; "" on cpu
    torch_version: str
    cuda_version: str          # torch.version.cuda, "" for a CPU build
    triton: bool
    flash_mla: bool
    index: int = 0

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.type, self.index) if self.type == "cuda" else torch.device("cpu")

    @property
    def has_fp8(self) -> bool:
        """FP8 tensor cores: sm_89 and newer (Ada, Hopper, Blackwell)."""
        if self.type != "cuda":
            return False
        major, minor = (int(x) for x in self.compute_capability.split("."))
        return major * 10 + minor >= 89


def _cpu_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def probe_device(device: str, local_rank: int = 0) -> DeviceInfo:
    """What this process runs on; PlanError when `device` is cuda and no GPU is visible."""
    common = dict(torch_version=torch.__version__, cuda_version=torch.version.cuda or "",
                  triton=importlib.util.find_spec("triton") is not None,
                  flash_mla=importlib.util.find_spec("flash_mla") is not None)
    if device == "cpu":
        return DeviceInfo("cpu", platform.processor() or platform.machine() or "cpu", _cpu_memory_bytes(), "",
                          **common)
    if device != "cuda":
        raise PlanError(f"--device must be cuda or cpu, got '{device}'")
    if not torch.cuda.is_available():
        build = "a CPU-only build" if not torch.version.cuda else f"CUDA {torch.version.cuda}"
        raise PlanError(f"--device cuda: no CUDA GPU is visible to torch {torch.__version__} ({build}); run on a "
                        f"GPU node, or rehearse with --device cpu")
    index = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    props = torch.cuda.get_device_properties(index)
    return DeviceInfo("cuda", props.name, int(props.total_memory), f"{props.major}.{props.minor}",
                      index=index, **common)


def gpu_mismatches(dev: DeviceInfo, gpu: GPU) -> list[str]:
    """Why `dev` is not the topology's `gpu` (empty when it is)."""
    family = gpu.name.split("-")[0]
    out = []
    if not re.search(rf"\b{re.escape(family)}\b", dev.name, re.IGNORECASE):
        out.append(f"the GPU is '{dev.name}', the topology plans {gpu.name}")
    if dev.compute_capability != gpu.compute_capability:
        out.append(f"compute capability {dev.compute_capability}, the topology's GPU has {gpu.compute_capability}")
    if "pcie" in dev.name.lower() and "pcie" not in gpu.name.lower():
        out.append(f"'{dev.name}' is a PCIe card, {gpu.name} is not")
    if abs(dev.memory_bytes / gpu.memory_bytes - 1) > MEMORY_TOLERANCE:
        out.append(f"{dev.memory_bytes / 2**30:,.1f} GiB of memory, {gpu.name} has {gpu.memory_bytes / 2**30:,.1f} GiB")
    return out


def describe(dev: DeviceInfo) -> str:
    if dev.type == "cpu":
        return f"cpu ({dev.name}), torch {dev.torch_version}"
    return (f"{dev.name} (cc {dev.compute_capability}, {dev.memory_bytes / 2**30:,.1f} GiB), "
            f"torch {dev.torch_version}, CUDA {dev.cuda_version}, triton {'yes' if dev.triton else 'no'}, "
            f"flash_mla {'yes' if dev.flash_mla else 'no'}")


def environment_check(dev: DeviceInfo, topo: Topology) -> Check:
    """`env.gpu`: the device against the topology's GPU (memory as the measured number)."""
    gpu = topo.gpu
    planned = gpu.memory_bytes
    if dev.type == "cpu":
        return Check("env.gpu", planned, dev.memory_bytes, "B", None, "not judged on cpu", None,
                     f"{describe(dev)}, {dev.memory_bytes / 2**30:,.1f} GiB RAM; cpu rehearsal: the topology's "
                     f"{gpu.name} is not checked")
    problems = gpu_mismatches(dev, gpu)
    detail = describe(dev) + ("; " + "; ".join(problems) if problems else f"; matches {gpu.name}")
    return Check("env.gpu", planned, dev.memory_bytes, "B", dev.memory_bytes / planned,
                 f"{gpu.name.split('-')[0]}, cc {gpu.compute_capability}, memory within {MEMORY_TOLERANCE:.0%}",
                 not problems, detail)
