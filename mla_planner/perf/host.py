"""The engine's host (CPU) work between decode steps, and how much of it a decode round waits for.

Each scheduler (one per DP rank) spends `host_per_request_s` on every running request each step: scheduling it,
preparing its inputs, taking in its sampled token (data/efficiency.yaml has the figure and its sources). A round
steps every request of the rank once, however the requests are split into pipeline micro-batches, so the round's
host work is requests x host_per_request_s.

Overlapped (vLLM's async scheduling, SGLang's overlap scheduler: engines/scheduling.py says which release and
layout) the host prepares the next step while the GPU runs this one, and a round waits only for the host work
beyond the GPU's round: a step is max(GPU, host). Not overlapped, the GPU waits for all of it. The small gap the
overlap still leaves between two steps is a fixed cost, already in the fitted graph_kernel_overhead_s.
"""

from __future__ import annotations

from mla_planner.specs.calibration import Calibration


def host_round_s(requests: int, calib: Calibration) -> float:
    """Seconds of the scheduler's host work in one decode round of `requests` running requests (one DP rank)."""
    return requests * calib.host_per_request_s


def exposed_host_s(gpu_round_s: float, host_s: float, overlapped: bool) -> float:
    """Seconds a round of `gpu_round_s` on the GPUs waits for `host_s` of host work: what outlasts the GPU when
    the engine overlaps the two, all of it when it does not."""
    return max(0.0, host_s - gpu_round_s) if overlapped else host_s


def with_host_s(gpu_round_s: float, requests: int, calib: Calibration, overlapped: bool) -> float:
    """A round of `gpu_round_s` on the GPUs with `requests` running on its scheduler: the GPUs' time and the host work
    they wait for."""
    return gpu_round_s + exposed_host_s(gpu_round_s, host_round_s(requests, calib), overlapped)
