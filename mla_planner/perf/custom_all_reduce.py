"""The all-reduce the engines run inside one NVLink or Infinity Fabric domain: their own one-shot and two-shot /
multimem kernels for 2-8 GPUs below a size cap, NCCL / RCCL otherwise.

A decode step's tensor-parallel all-reduces (a [tokens, hidden] bf16 activation, 14 KiB to a few MiB) never reach
NCCL inside a node in vLLM 0.33 or SGLang 0.5.23: FlashInfer's, the engines' custom and torch symmetric memory's
kernels run them (data/custom_all_reduce.yaml says which, with the engine files). The planner prices the faster of
the two published lines of the GPU's vendor at each size (the engines tune their switch point for speed), scaled to
the topology's link and the group's size, up to the cap; NCCL's model (perf/comm.py) above it, for larger groups,
over PCIe and across domains. nccl-tests figures stay NCCL's: `validate` prices them with perf/comm.py, and these
lines with their own rows."""

from __future__ import annotations

from functools import lru_cache

from mla_planner.core.errors import PlanError
from mla_planner.core.resources import data_dir, read_data
from mla_planner.perf.comm import collective
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.topology import Topology

MEASURED_GPUS = 8     # the GPU count every line of data/custom_all_reduce.yaml was measured at


@lru_cache(maxsize=1)
def _table() -> dict:
    return read_data(data_dir("custom_all_reduce.yaml"))


def kernels(topo: Topology) -> dict:
    """The topology's GPU vendor's kernel lines (name -> latency_us, gbytes_per_s, set_by)."""
    return _table()[topo.gpu.vendor]["kernels"]


def kernel_time_s(kernel: str, message_bytes: float, topo: Topology, group_size: int = MEASURED_GPUS) -> float:
    """Seconds of one `kernel` ("one_shot" or "two_shot") all-reduce of `message_bytes` per GPU over `group_size` GPUs
    of the topology's vendor: latency + bytes / bandwidth (data/custom_all_reduce.yaml, measured at 8 GPUs), the
    bandwidth term scaled by what each GPU moves over its links against the measurement:
      the link: measured on one (`measured_link_gbytes_per_s`, per GPU per direction), scaled to the topology's
        (an H800's 200 GB/s runs them at 0.44 of an H100's, a B200's 900 GB/s at twice it);
      the group: a one-shot GPU reads every peer's buffer, (g - 1) x bytes; a two-shot one reduce-scatters and
        all-gathers, 2 (g - 1) / g x bytes (nccl-tests PERFORMANCE.md's bus factor), against g = 8's."""
    if kernel not in kernels(topo):
        raise PlanError(f"no {kernel} all-reduce line for {topo.gpu.vendor} GPUs (data/custom_all_reduce.yaml has "
                        f"{', '.join(kernels(topo))})")
    line = kernels(topo)[kernel]
    link = topo.intra_bytes_per_s / (_table()[topo.gpu.vendor]["measured_link_gbytes_per_s"] * 1e9)
    g, m = group_size, MEASURED_GPUS
    moved = (g - 1) / (m - 1) if kernel == "one_shot" else (2 * (g - 1) / g) / (2 * (m - 1) / m)
    return line["latency_us"] * 1e-6 + message_bytes * moved / (line["gbytes_per_s"] * 1e9 * link)


def runs_custom(message_bytes: float, group_size: int, topo: Topology) -> bool:
    """Whether the engines' own kernels run this all-reduce: 2 to `max_gpus` GPUs (vLLM's custom and symmetric-memory
    all-reduce take world sizes 2-8: vllm all_reduce_utils.py; SGLang's custom v2 turns its CUDA graphs off across
    hosts) inside one NVLink domain of NVLink or NVSwitch, or of Infinity Fabric, up to the vendor's `max_bytes`.
    Over PCIe the engines' peer-copy kernels run only at 2 GPUs and with P2P access, which a topology does not say:
    NCCL's model prices it."""
    vendor = _table()[topo.gpu.vendor]
    return (1 < group_size <= min(topo.domain_gpus, vendor["max_gpus"]) and topo.intra_node.kind != "pcie"
            and message_bytes <= vendor["max_bytes"])


@lru_cache(maxsize=16384)
def engine_all_reduce(message_bytes: float, group_size: int, topo: Topology, calib: Calibration) -> tuple[str, float]:
    """(algorithm, seconds) of one tensor-parallel all-reduce as the engines run it: the faster of their kernels where
    `runs_custom`, else NCCL's pick (perf.comm.collective)."""
    if runs_custom(message_bytes, group_size, topo):
        return min(((k, kernel_time_s(k, message_bytes, topo, group_size)) for k in kernels(topo)),
                   key=lambda kt: kt[1])
    cost = collective("all_reduce", message_bytes, group_size, topo, calib, group_size > topo.domain_gpus)
    return cost.algorithm, cost.time_s
