"""Memory fit: allocate this GPU's planned footprint and measure the headroom it leaves.

The footprint is the memory model's terms for this GPU's stage (memory.RankMemory.terms): the
weights as buffers of their planned bytes, the KV pool as the engine lays it out (one paged cache
tensor per layer, [num_blocks, block_size, slot], vLLM `_allocate_kv_cache_tensors` / SGLang
`MLATokenToKVPool`), and the activation peak, CUDA-graph pool and NCCL buffers as buffers of their
planned bytes. `runtime_overhead` is not allocated: this process's real CUDA context stands in for it.
Measured headroom = free device memory afterwards (torch.cuda.mem_get_info); the plan's headroom is
the `free` term. CUDA out of memory is a failed check, not an error.

On a CPU the same allocations run at a scale that fits `Caps.fit_bytes`, against a simulated device
of the topology GPU's memory at that scale, so the code path and an out-of-memory verdict can be
rehearsed; the numbers are the plan's, labelled as a rehearsal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from mla_planner.core.units import GiB
from mla_planner.engines.profile import profile
from mla_planner.memory.accounting import kv_slot_bytes
from mla_planner.verify.check import Check, errored
from mla_planner.verify.env import DeviceInfo
from mla_planner.verify.target import Caps, Target

HEADROOM_SLACK_BYTES = 1 * GiB   # the runtime term (1.79 GiB, vLLM PR #10511) vs this process's real context
NOT_ALLOCATED = ("free", "runtime_overhead")


class SimulatedOOM(RuntimeError):
    """The CPU rehearsal's simulated device ran out of memory."""


@dataclass
class Pool:
    """Allocates on the device; with a capacity, also counts bytes against a simulated device."""
    device: torch.device
    capacity_bytes: Optional[float] = None
    used_bytes: float = 0.0

    def take(self, what: str, shape: tuple[int, ...], dtype: torch.dtype, held: list) -> None:
        nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
        if self.capacity_bytes is not None and self.used_bytes + nbytes > self.capacity_bytes:
            raise SimulatedOOM(f"simulated device full allocating {what}")
        held.append(torch.empty(shape, dtype=dtype, device=self.device))
        self.used_bytes += nbytes


def kv_layout(t: Target, scale: float) -> tuple[int, int, tuple[int, int, int], torch.dtype]:
    """(layers, bytes per layer, per-layer cache shape [num_blocks, block_size, slot], dtype)."""
    c, mem = t.chosen, t.memory
    slot_bytes = int(kv_slot_bytes(c.spec, c.layout, 1, c.knobs.kv_cache_dtype))
    block = c.knobs.block_size
    blocks = int(mem.kv_pool_bytes // (mem.layers * block * slot_bytes)) if mem.layers else 0
    blocks = max(int(blocks * scale), 1) if blocks else 0
    bf16 = c.knobs.kv_cache_dtype == "bf16" and slot_bytes % 2 == 0
    dtype, width = (torch.bfloat16, slot_bytes // 2) if bf16 else (torch.uint8, slot_bytes)
    return mem.layers, blocks * block * slot_bytes, (blocks, block, width), dtype


def allocate(t: Target, pool: Pool, scale: float, held: list) -> None:
    """Every planned term of this GPU, weights first, the KV pool as per-layer paged cache tensors."""
    for name, nbytes in t.memory.terms.items():
        if name in NOT_ALLOCATED or nbytes <= 0:
            continue
        if name == "kv_pool":
            layers, _, shape, dtype = kv_layout(t, scale)
            for i in range(layers):
                pool.take(f"kv_pool layer {i}", shape, dtype, held)
            continue
        pool.take(name, (max(int(nbytes * scale), 1),), torch.uint8, held)


def _planned_bytes(t: Target) -> float:
    return sum(v for k, v in t.memory.terms.items() if k not in NOT_ALLOCATED and v > 0)


def _cuda_headroom(t: Target, dev: DeviceInfo, limit: Optional[int]) -> float:
    """Allocate on the GPU (capped at `limit` through the caching allocator) and return free bytes."""
    held: list = []
    torch.cuda.empty_cache()
    if limit:
        torch.cuda.set_per_process_memory_fraction(min(1.0, limit / dev.memory_bytes), dev.index)
    try:
        allocate(t, Pool(dev.torch_device), 1.0, held)
        torch.cuda.synchronize(dev.index)
        free = float(torch.cuda.mem_get_info(dev.index)[0])
        return min(free, limit - torch.cuda.memory_reserved(dev.index)) if limit else free
    finally:
        held.clear()
        torch.cuda.empty_cache()
        if limit:
            torch.cuda.set_per_process_memory_fraction(1.0, dev.index)


def _cpu_headroom(t: Target, caps: Caps, limit: Optional[int]) -> tuple[float, float]:
    """Rehearse the allocations at scale on a simulated device; (headroom at full scale, scale)."""
    scale = min(1.0, caps.fit_bytes / max(_planned_bytes(t), 1.0))
    capacity = (limit or t.chosen.topo.gpu.memory_bytes) * scale
    pool = Pool(torch.device("cpu"), capacity, t.memory.terms.get("runtime_overhead", 0.0) * scale)
    held: list = []
    allocate(t, pool, scale, held)
    return (capacity - pool.used_bytes) / scale, scale


def _describe(t: Target) -> str:
    mem, k = t.memory, t.chosen.knobs
    layers, per_layer, shape, dtype = kv_layout(t, 1.0)
    weights = sum(v for n, v in mem.terms.items() if n.startswith("weights/"))
    base = mem.total_bytes - (mem.terms.get("runtime_overhead", 0.0) + mem.terms.get("nccl_buffers", 0.0)
                              if profile(k.engine).pool_after_static_fraction else 0.0)   # of pre-load free memory
    budget = k.memory_fraction * base
    a2a = " + DeepEP buffer" if mem.terms.get("deepep_buffer") else ""
    covers = (f"weights{a2a} + KV pool (SGLang's static pool; the rest lives outside it)"
              if profile(k.engine).pool_after_static_fraction
              else "what vLLM charges to it")
    return (f"stage {mem.pp_stage}: weights {weights / GiB:,.1f} GiB + KV pool {mem.kv_pool_bytes / GiB:,.1f} GiB "
            f"({layers} layers x [{shape[0]:,}, {shape[1]}, {shape[2]}] {str(dtype).removeprefix('torch.')}) + "
            f"activations, graphs, NCCL = {_planned_bytes(t) / GiB:,.1f} GiB of the GPU's "
            f"{mem.total_bytes / GiB:,.1f} GiB; the engine's budget, {k.memory_fraction:g} x "
            f"{base / GiB:,.1f} GiB = {budget / GiB:,.1f} GiB, covers {covers}")


def fit_check(t: Target, dev: DeviceInfo, caps: Optional[Caps], limit_bytes: Optional[int] = None) -> Check:
    """`memory.fit`: measured headroom vs the plan's `free` term; passes at >= planned - 1 GiB."""
    planned_free = t.memory.terms["free"]
    tolerance = f">= planned - {HEADROOM_SLACK_BYTES / GiB:g} GiB"
    label = ""
    try:
        if dev.type == "cuda":
            headroom = _cuda_headroom(t, dev, limit_bytes)
        else:
            headroom, scale = _cpu_headroom(t, caps, limit_bytes)
            label = f"cpu rehearsal at 1/{1 / scale:,.0f} scale, capacity simulated; "
    except (torch.cuda.OutOfMemoryError, SimulatedOOM) as exc:
        kind = "simulated out of memory (cpu rehearsal)" if isinstance(exc, SimulatedOOM) else "CUDA out of memory"
        where = str(exc).splitlines()[0][:160]
        return Check("memory.fit", planned_free, None, "B", None, tolerance, False,
                     f"{kind}: the plan's footprint does not fit this GPU ({where}); {_describe(t)}; lower the "
                     f"memory fraction or --max-num-seqs, or use more GPUs")
    except RuntimeError as exc:
        return errored("memory.fit", f"allocation failed: {str(exc).splitlines()[0][:200]}")
    judged = dev.type == "cuda"
    passed = headroom >= planned_free - HEADROOM_SLACK_BYTES if judged else None
    ratio = headroom / planned_free if planned_free > 0 else None
    return Check("memory.fit", planned_free, headroom, "B", ratio, tolerance if judged else "not judged on cpu",
                 passed, f"{label}headroom {headroom / GiB:,.2f} GiB (planned {planned_free / GiB:,.2f}); "
                 f"{_describe(t)}")
