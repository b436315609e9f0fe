"""An all-reduce timed the way a decode step runs it: after a stretch of GPU work, not back to back.

nccl-tests (and `collectives._time`) run one collective after another, so NCCL's network proxy and the NICs
are never idle between calls. In a decode step the TP all-reduce follows a layer's kernels: the step model
prices it at comm.collective's time with nothing overlapped (docs/step-model.md section 3). This check
interleaves each all-reduce with a matmul sized to half a planned layer's kernel time (one all-reduce after
attention, one after the MoE), and reports what the all-reduce adds on top of the matmul alone:

    exposed_s = mean(matmul; all_reduce) - mean(matmul)

On CUDA the all-reduce is synchronous (torch.distributed, async_op=False): the compute stream waits for it,
so it sits on the critical path as in the engines. This is the measurement the step model's
`internode_latency_s` stands for, so a group spanning nodes calibrates it from here
(collectives._evidence does so only for this check). Unlike the engines it runs eagerly, not from a CUDA
graph: each call's CPU launch (tens of µs) hides behind the filler only while the filler is longer, which a
planned layer's half (hundreds of µs at decode batches) is.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

FILLER_MIN_S = 20e-6
NOISE_FLOOR_S = 1e-6             # an exposed time at or below this is timing noise: reported, not judged
FILLER_SIDES = (64, 8192)        # matmul edge: the smallest worth timing, the largest a rehearsal should allocate


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def mean_s(fn, device: torch.device, warmup: int, repeats: int, group=None) -> float:
    """Mean seconds per call over `repeats` back-to-back calls after warm-up (and, with a process `group`, a
    barrier so every rank starts together): nccl-tests' method."""
    for _ in range(max(warmup, 1)):
        fn()
    _sync(device)
    if group is not None:
        dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / repeats


def matmul(side: int, device: torch.device):
    """A closure multiplying two side x side matrices (bf16 on a GPU, fp32 on a CPU)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(side, side, device=device).to(dtype)
    b = torch.randn(side, side, device=device).to(dtype)
    return lambda: a @ b


def filler(target_s: float, device: torch.device):
    """A square matmul taking about `target_s` on this device (edge scaled by the cube root of the time
    ratio from a first guess, clamped to FILLER_SIDES), and its edge."""
    side = 512
    for _ in range(2):
        took_s = mean_s(matmul(side, device), device, 2, 5)
        side = int(min(max(side * (max(target_s, FILLER_MIN_S) / max(took_s, 1e-9)) ** (1 / 3), FILLER_SIDES[0]),
                       FILLER_SIDES[1]))
    return matmul(side, device), side


def exposed_all_reduce_s(all_reduce, group, device: torch.device, target_s: float, warmup: int,
                         repeats: int) -> tuple[float, float, int]:
    """(seconds the all-reduce adds after the filler, the filler's own seconds, the filler's edge). Every rank
    runs the group's largest filler (each sizes its own, then they agree on the max): a rank with a shorter
    one would count its wait for the others as all-reduce time."""
    work, side = filler(target_s, device)
    agreed = torch.tensor([side], dtype=torch.float32, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=group)
    if int(agreed.item()) != side:
        side = int(agreed.item())
        work = matmul(side, device)

    def step() -> None:
        work()
        all_reduce()

    alone_s = mean_s(work, device, warmup, repeats, group)
    paired_s = mean_s(step, device, warmup, repeats, group)
    return max(paired_s - alone_s, NOISE_FLOOR_S), alone_s, side   # noise can make it <= 0: keep rates finite
