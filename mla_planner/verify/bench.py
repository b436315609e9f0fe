"""Timing helpers for the MLA attention core: CUDA-event timing with an L2 flush, device copy
bandwidth, and one benchmark point reported as achieved bytes/s and FLOP/s.

Achieved rates use the planner's own formulas (`specs.attention.cost.absorbed_core_bytes/flops`),
so measured and predicted numbers cannot drift apart (gpt-fast reports bandwidth the same
way). L2 flush between runs as in FlashMLA's benchmarks (a 256 MiB buffer rewritten).

Before a kernel is timed, its output on the problem's first sequences is checked against the naive fp64
reference (verify/reference.py); a kernel that does not match is not timed (`time_s` None, `output_check`
says by how much). The cache is stored as the plan stores it (verify/kv_storage.py: bf16, or fp8 with its
scale, the query then on the e4m3 grid as the engines quantise it); the bytes are counted at that size.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Optional

import torch
from torch import Tensor

from mla_planner.specs.attention.cost import absorbed_core_bytes, absorbed_core_flops
from mla_planner.verify.fast import (TritonConfig, absorbed_core_fast, absorbed_core_triton, fast_path_name,
                                     make_flash_mla_core)
from mla_planner.verify.kernel import absorbed_core, softmax_scale
from mla_planner.verify.kv_storage import StoredKV, on_fp8_grid, store
from mla_planner.verify import reference

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


KV_STD = 0.1        # the cache's values: randn / 10 clipped to [-1, 1] (FlashMLA's tests)
SCORE_STD = 2.0     # the check's scores q.k x scale: a spread that makes the softmax far from uniform, so a kernel
                    # that gets the scores wrong (scale, RoPE part, query) moves the output well past the fp8
                    # tolerances (reference.TOLERANCES); with q at randn / 10 the scores spread ~0.03 and the
                    # output hardly depends on them


def query_std(scale: float, dim: int) -> float:
    """The query's standard deviation that gives scores q.k x `scale` over `dim`-wide rows of KV_STD values a
    standard deviation of SCORE_STD."""
    return SCORE_STD / (scale * math.sqrt(dim) * KV_STD)


def random_decode_inputs(batch: int, context: int, heads: int, block_size: int, dtype: torch.dtype,
                         device: torch.device, seed: int = 0, latent_dim: int = 576, q_std: float = KV_STD):
    """q_mqa [B, H, 576] (randn x q_std), cache [B * nb, bs, 576], int32 block_table [B, nb] (randomly permuted
    block ids) and seqlens [B] = context; cache values randn/10 clipped to [-1, 1] (FlashMLA tests)."""
    gen = torch.Generator(device).manual_seed(seed)
    blocks_per_seq = -(-context // block_size)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=device) * KV_STD).clamp_(-1, 1).to(dtype)

    cache = rand(batch * blocks_per_seq, block_size, latent_dim)
    perm = torch.randperm(batch * blocks_per_seq, generator=torch.Generator().manual_seed(seed))
    block_table = perm.view(batch, blocks_per_seq).to(device=device, dtype=torch.int32)
    seqlens = torch.full((batch,), context, dtype=torch.int32, device=device)
    q = (torch.randn(batch, heads, latent_dim, generator=gen, device=device) * q_std).to(dtype)
    return q, cache, block_table, seqlens


@dataclass(frozen=True)
class DecodeInputs:
    """One decode problem: q [B, H, 576] in the work dtype (on the e4m3 grid of `q_scale` for an fp8 cache, as
    the engines quantise it), the paged cache as stored, int32 block_table [B, nb] and seqlens [B]."""
    q: Tensor
    kv: StoredKV
    block_table: Tensor
    seqlens: Tensor
    q_scale: float = 1.0

    def head(self, n: int) -> "DecodeInputs":
        """The first n sequences (the same cache)."""
        return replace(self, q=self.q[:n], block_table=self.block_table[:n], seqlens=self.seqlens[:n])


KernelBuild = Callable[[DecodeInputs, float], Callable[[], tuple]]   # (inputs, softmax scale) -> the call


def decode_inputs(batch: int, context: int, heads: int, block_size: int, dtype: torch.dtype, device: torch.device,
                  scale: float, kv_kind: str = "bf16", seed: int = 0) -> DecodeInputs:
    """random_decode_inputs with the query drawn so that its scores at softmax `scale` spread by SCORE_STD, the
    cache stored as `kv_kind` (kv_storage.store) and, for an fp8 cache, the query rounded to its e4m3 grid
    (kv_storage.on_fp8_grid)."""
    q, rows, block_table, seqlens = random_decode_inputs(batch, context, heads, block_size, dtype, device, seed,
                                                         q_std=query_std(scale, 576))
    q_scale = 1.0
    if kv_kind != "bf16":
        q, q_scale = on_fp8_grid(q)
    return DecodeInputs(q, store(rows, kv_kind), block_table, seqlens, q_scale)


def project_kernel(config: TritonConfig | None = None, impl: str = "fast") -> KernelBuild:
    """The project's own absorbed core (`impl` fast: Triton split-K on CUDA, plain torch elsewhere; torch: the
    plain one) over the stored cache; an fp8 cache is dequantised to the query's dtype inside the timed call."""
    def build(inp: DecodeInputs, scale: float) -> Callable[[], tuple]:
        core = _core_for(impl, inp.seqlens, inp.q.shape[1], config)
        q, table, lens = inp.q, inp.block_table, inp.seqlens
        if inp.kv.kind == "bf16":
            return lambda: core(q, inp.kv.cache, table, lens, scale)
        return lambda: core(q, inp.kv.dequantized(q.dtype), table, lens, scale)
    return build


def checked_and_timed(inp: DecodeInputs, build: KernelBuild, scale: float, device: torch.device, warmup: int,
                      repeats: int, fp8_query: bool = False) -> tuple[reference.OutputCheck, Optional[float]]:
    """(the kernel's output on the first SLICE_SEQUENCES sequences against reference.dense, the median seconds of
    the whole problem, or None when the output did not match)."""
    n = min(reference.SLICE_SEQUENCES, inp.q.shape[0])
    part = inp.head(n)
    out, lse = build(part, scale)()[:2]
    ref_out, ref_lse = reference.dense(part.q, part.kv, part.block_table, part.seqlens, scale, n)
    checked = reference.check_output("attention", out, lse, ref_out, ref_lse,
                                     reference.precision_of(out, fp8_query))
    if not checked.ok:
        return checked, None
    return checked, time_fn(build(inp, scale), device, warmup, repeats)


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


def dense_rates(batch: int, context: int, heads: int, inp: DecodeInputs, time_s: Optional[float]) -> dict:
    """Bytes (the cache at its stored row size, q and o at the query's) and FLOPs of the problem, and the rates."""
    act = inp.q.element_size()
    moved = absorbed_core_bytes(batch, heads, batch * context, inp.kv.row_bytes, act_bytes=act)
    flops = absorbed_core_flops(heads, batch * context)
    rates = {"achieved_gb_per_s": moved / time_s / 1e9, "achieved_tflop_per_s": flops / time_s / 1e12} \
        if time_s else {"achieved_gb_per_s": None, "achieved_tflop_per_s": None}
    return {"bytes": moved, "flops": flops, **rates}


def dequantised_bytes(batch: int, context: int, heads: int, inp: DecodeInputs) -> float:
    """Bytes moved by a kernel that first dequantises (or casts) the whole stored cache to the query's dtype inside
    the call and then reads it (the fallback's fp8 path; SGLang's fa3 with an fp8 cache): the stored cache read,
    its copy written, and the copy's rows, q and o as the core reads them."""
    act, cache = inp.q.element_size(), inp.kv.cache
    return cache.numel() * (cache.element_size() + act) + absorbed_core_bytes(
        batch, heads, batch * context, cache.shape[-1] * act, act_bytes=act)


def attention_benchmark(batch: int, context: int, heads: int, block_size: int = 64,
                        dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cuda",
                        impl: str = "fast", warmup: int = 3, repeats: int = 20,
                        config: TritonConfig | None = None, kv_kind: str = "bf16") -> dict:
    """Check, then time one absorbed-core call (DeepSeek dims 512 + 64, V3 softmax scale) and report rates.

    bytes and FLOPs come from `specs.attention.cost.absorbed_core_bytes/flops` with sum(T_b) =
    batch * context and the cache's stored row size (kv_kind: bf16 rows in `dtype`, or fp8).
    `config` overrides the Triton tile settings of the fast path. A kernel whose output does not
    match the reference is not timed: AssertionError naming the error (`output_check`: what was checked).
    """
    device = torch.device(device)
    scale = softmax_scale(128, 64, {"factor": 40, "mscale_all_dim": 1.0})
    inp = decode_inputs(batch, context, heads, block_size, dtype, device, scale, kv_kind)
    checked, time_s = checked_and_timed(inp, project_kernel(config, impl), scale, device, warmup, repeats)
    if time_s is None:
        raise AssertionError(f"{impl}: {checked.text}")
    path = {"fast": fast_path_name(device), "torch": "torch-reference", "flash_mla": "flash_mla"}[impl]
    return {"impl": impl, "path": path, "batch": batch, "context": context, "heads": heads,
            "block_size": block_size, "dtype": str(dtype).removeprefix("torch."), "kv": inp.kv.text(),
            "time_s": time_s, "output_check": asdict(checked), **dense_rates(batch, context, heads, inp, time_s)}
