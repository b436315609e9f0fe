"""What every `verify` check returns (`Check`), the tolerance bands it is judged by, and the helpers the
checks share to time, compare and word their results. The checks themselves: env.py, fit.py,
attention.py, gemms.py, collectives.py; checks.run_checks runs them in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from mla_planner.perf.layer_work import Op
from mla_planner.perf.step import op_time_s
from mla_planner.verify.target import Target


SECTIONS = ("env", "fit", "attention", "gemms", "collectives")


# Ratio bands (measured / predicted) a judged check must fall in.
ATTENTION_BAND = (0.67, 1.5)   # the default attention_hbm_efficiency 0.84 is FlashMLA's 2826 of 3350 GB/s
                               # (ai-bot-pro/achatbot#123); a kernel at 80 % of copy bandwidth
                               # (our target) is ~0.72 of datasheet, ratio ~1.17; beyond 1.5x the plan's TPOT
                               # is wrong by more than the margin between neighbouring layouts


GEMM_BAND = (0.5, 2.0)         # decode GEMMs are skinny: each kernel's fixed ~2-5 us start-up, which the step
                               # model books under `launch`, is a large share of a 10-20 us weight stream


COLLECTIVE_BAND = (0.5, 2.0)   # busbw: nccl-tests busbw moves by ~30 % with protocol and message size, and
                               # decode messages (~1 MB) sit where latency still matters


@dataclass(frozen=True)
class Check:
    name: str
    predicted: Optional[float]
    measured: Optional[float]
    unit: str                      # "s", "B/s" or "B" (SI in the JSON; the table picks µs, GB/s, GiB)
    ratio: Optional[float]         # measured / predicted
    tolerance: str
    passed: Optional[bool]         # None: not judged (skipped, or a CPU rehearsal)
    detail: str = ""
    error: Optional[str] = None    # set when the check could not run
    extra: dict = field(default_factory=dict)
    rank: int = 0

    @property
    def status(self) -> str:
        if self.error:
            return "error"
        if self.passed is None:
            return "info" if self.measured is not None else "skip"
        return "pass" if self.passed else "fail"


@dataclass(frozen=True)
class Timing:
    warmup: int
    repeats: int


def timing_for(device_type: str, quick: bool) -> Timing:
    """Warm-up and timed runs per measurement (median of the timed runs; bench.time_fn)."""
    if device_type == "cuda":
        return Timing(2, 5) if quick else Timing(3, 20)
    return Timing(1, 2) if quick else Timing(1, 3)


@dataclass(frozen=True)
class Options:
    device: str = "cuda"
    quick: bool = False
    only: frozenset = frozenset(SECTIONS)
    timeout_s: float = 120.0
    memory_limit_bytes: Optional[int] = None


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip().rstrip(":")


def errored(name: str, why: str, detail: str = "") -> Check:
    return Check(name, None, None, "", None, "-", False, detail, error=why)


def skipped(name: str, why: str) -> Check:
    return Check(name, None, None, "", None, "-", None, why)


def band_text(band: tuple[float, float]) -> str:
    return f"ratio {band[0]:g}-{band[1]:g}"


def ratio_check(name: str, predicted: float, measured: float, unit: str, band: tuple[float, float],
                judged: bool, detail: str, extra: dict) -> Check:
    """measured / predicted against `band`; reported without a verdict when not `judged` (CPU)."""
    ratio = measured / predicted if predicted else None
    passed = (ratio is not None and band[0] <= ratio <= band[1]) if judged else None
    tolerance = band_text(band) if judged else "not judged on cpu"
    return Check(name, predicted, measured, unit, ratio, tolerance, passed, detail, extra=extra)


def roofline(op: Op, t: Target) -> tuple[float, dict]:
    """Predicted seconds of `op` on the topology's GPU (step.op_time_s) and the evidence that turns a
    measured time into the efficiency factor of its bound side (calibrate.py)."""
    gpu, calib = t.chosen.topo.gpu, t.chosen.calib
    mem_s, math_s = op_time_s(op, gpu, calib)
    attn = op.kind == "attention"
    if mem_s >= math_s:
        factor = op.hbm_factor
        return mem_s, {"factor": factor, "amount": op.bytes, "peak": gpu.hbm_bytes_per_s, "bound": "memory"}
    factor = "attention_tensor_core_efficiency" if attn else "tensor_core_efficiency"
    peak = gpu.tensor_flops_per_s(op.precision)
    return math_s, {"factor": factor, "amount": op.flops, "peak": peak, "bound": "compute"}


def rates(op: Op, predicted_s: float, measured_s: float) -> dict:
    """Achieved and predicted bytes/s and FLOP/s (gpt-fast style: work / time)."""
    return {"bytes": op.bytes, "flops": op.flops,
            "achieved_bytes_per_s": op.bytes / measured_s, "achieved_flops_per_s": op.flops / measured_s,
            "predicted_bytes_per_s": op.bytes / predicted_s, "predicted_flops_per_s": op.flops / predicted_s}
