"""Timing helpers for the MLA attention core: CUDA-event timing with an L2 flush, device copy
bandwidth, and one benchmark point reported as achieved bytes/s and FLOP/s.

Achieved rates use the planner's own formulas (`specs.attention.cost.absorbed_core_bytes/flops`),
so measured and predicted numbers cannot drift apart (gpt-fast reports bandwidth the same
way). L2 flush between runs as in FlashMLA's benchmarks (a 256 MiB buffer rewritten).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable

import torch

from mla_planner.specs.attention.cost import absorbed_core_bytes, absorbed_core_flops
from mla_planner.verify.fast import (TritonConfig, absorbed_core_fast, absorbed_core_triton, fast_path_name,
                                     make_flash_mla_core)
from mla_planner.verify.kernel import absorbed_core, softmax_scale

IMPLS = ("fast", "torch", "flash_mla")


def time_cuda(fn: Callable[[], object], warmup: int = 3, repeats: int = 20,
              flush_l2_bytes: int = 256 * 2**20) -> float:
    """Median seconds of fn() on the current CUDA stream, timed with CUDA events.

    A `flush_l2_bytes` buffer is zeroed before every timed run so each run reads its
    operands from HBM, not from L2 (0 disables the flush). The GPU is first held busy
    briefly so all runs are queued ahead and CPU launch latency is not timed.
    """
    flush = torch.empty(max(flush_l2_bytes, 1), dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    if hasattr(torch.cuda, "_sleep"):  # park the GPU ~10 ms so Python launch overhead stays off the clock
        torch.cuda._sleep(20_000_000)
    for start, end in events:
        if flush_l2_bytes:
            flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events) / 1e3


def time_cpu(fn: Callable[[], object], warmup: int = 1, repeats: int = 5) -> float:
    """Median wall-clock seconds of fn() measured with time.perf_counter."""
    for _ in range(warmup):
        fn()
    runs_s = []
    for _ in range(repeats):
        start_s = time.perf_counter()
        fn()
        runs_s.append(time.perf_counter() - start_s)
    return statistics.median(runs_s)


def time_fn(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> float:
    """`time_cuda` on CUDA devices, `time_cpu` elsewhere."""
    if device.type == "cuda":
        return time_cuda(fn, warmup, repeats)
    return time_cpu(fn, warmup, repeats)


def measure_copy_bandwidth(device: str | torch.device = "cuda", size_bytes: int = 2**30,
                           repeats: int = 10) -> float:
    """Device-to-device copy bandwidth in bytes/s: (bytes read + bytes written) / time.

    The buffer (default 1 GiB, far above L2) makes L2 irrelevant; this is the practical
    ceiling for a memory-bound kernel such as the MLA decode core.
    """
    device = torch.device(device)
    src = torch.empty(size_bytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    if device.type == "cuda":
        seconds = time_cuda(lambda: dst.copy_(src), warmup=2, repeats=repeats, flush_l2_bytes=0)
    else:
        seconds = time_cpu(lambda: dst.copy_(src), warmup=1, repeats=repeats)
    return 2 * size_bytes / seconds


def random_decode_inputs(batch: int, context: int, heads: int, block_size: int, dtype: torch.dtype,
                         device: torch.device, seed: int = 0, latent_dim: int = 576):
    """q_mqa [B, H, 576], cache [B * nb, bs, 576], int32 block_table [B, nb] (randomly permuted
    block ids) and seqlens [B] = context; values randn/10 clipped to [-1, 1] (FlashMLA tests)."""
    gen = torch.Generator(device).manual_seed(seed)
    blocks_per_seq = -(-context // block_size)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=device) / 10).clamp_(-1, 1).to(dtype)

    cache = rand(batch * blocks_per_seq, block_size, latent_dim)
    perm = torch.randperm(batch * blocks_per_seq, generator=torch.Generator().manual_seed(seed))
    block_table = perm.view(batch, blocks_per_seq).to(device=device, dtype=torch.int32)
    seqlens = torch.full((batch,), context, dtype=torch.int32, device=device)
    return rand(batch, heads, latent_dim), cache, block_table, seqlens


def _core_for(impl: str, seqlens: torch.Tensor, heads: int, config: TritonConfig | None) -> Callable:
    if impl == "fast" and config is not None and fast_path_name(seqlens.device) == "triton-splitk":
        return functools.partial(absorbed_core_triton, config=config)
    if impl == "fast":
        return absorbed_core_fast
    if impl == "torch":
        return absorbed_core
    if impl == "flash_mla":
        return make_flash_mla_core(seqlens, heads)
    raise ValueError(f"unknown impl {impl!r}; choose one of {IMPLS}")


def attention_benchmark(batch: int, context: int, heads: int, block_size: int = 64,
                        dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cuda",
                        impl: str = "fast", warmup: int = 3, repeats: int = 20,
                        config: TritonConfig | None = None) -> dict:
    """Time one absorbed-core call (DeepSeek dims 512 + 64, V3 softmax scale) and report rates.

    bytes and FLOPs come from `specs.attention.cost.absorbed_core_bytes/flops` with sum(T_b) =
    batch * context and a cache element size equal to `dtype`'s. `config` overrides the
    Triton tile settings of the fast path.
    """
    device = torch.device(device)
    q, cache, block_table, seqlens = random_decode_inputs(batch, context, heads, block_size, dtype, device)
    scale = softmax_scale(128, 64, {"factor": 40, "mscale_all_dim": 1.0})
    core = _core_for(impl, seqlens, heads, config)
    time_s = time_fn(lambda: core(q, cache, block_table, seqlens, scale), device, warmup, repeats)
    elem_bytes = cache.element_size()
    moved_bytes = absorbed_core_bytes(batch, heads, batch * context, 576 * elem_bytes, act_bytes=elem_bytes)
    flops = absorbed_core_flops(heads, batch * context)
    path = {"fast": fast_path_name(device), "torch": "torch-reference", "flash_mla": "flash_mla"}[impl]
    return {"impl": impl, "path": path, "batch": batch, "context": context, "heads": heads,
            "block_size": block_size, "dtype": str(dtype).removeprefix("torch."), "time_s": time_s,
            "bytes": moved_bytes, "flops": flops, "achieved_gb_per_s": moved_bytes / time_s / 1e9,
            "achieved_tflop_per_s": flops / time_s / 1e12}
