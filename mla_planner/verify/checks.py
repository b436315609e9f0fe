"""The checks `verify` runs, their common result (`Check`), their tolerances, and the attention check.

Order: environment (env.py) -> memory fit (fit.py) -> MLA attention (here) -> dense GEMMs (gemms.py)
-> collectives (collectives.py, under torchrun only). A check that cannot run becomes an errored
`Check` with a one-line message, never a traceback. A topology GPU that does not match the real one
stops the GPU checks: their predictions would be for another chip.

Every timed check compares the measured time with the step model's roofline for *the same* bytes and
FLOPs (step.op_time_s: max(bytes / (HBM x efficiency), FLOPs / (peak x efficiency)); docs/step-model.md
section 3), so `measured / predicted` is exactly the correction its efficiency factor needs; the
check's `extra["evidence"]` carries what calibrate.py turns into that factor. On a CPU the checks run
at capped shapes (target.Caps) and are reported, not judged: the topology's GPU is not there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

import torch

from ..step import op_time_s
from ..step_work import Op
from .bench import attention_benchmark
from .target import Caps, Target, caps_for

if TYPE_CHECKING:
    from .env import DeviceInfo

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
        factor = {"attention": "attention_hbm_efficiency", "moe": "moe_hbm_efficiency"}.get(op.kind, "hbm_efficiency")
        return mem_s, {"factor": factor, "amount": op.bytes, "peak": gpu.hbm_bytes_per_s, "bound": "memory"}
    factor = "attention_tensor_core_efficiency" if attn else "tensor_core_efficiency"
    peak = gpu.tensor_flops_per_s(op.precision)
    return math_s, {"factor": factor, "amount": op.flops, "peak": peak, "bound": "compute"}


def rates(op: Op, predicted_s: float, measured_s: float) -> dict:
    """Achieved and predicted bytes/s and FLOP/s (gpt-fast style: work / time)."""
    return {"bytes": op.bytes, "flops": op.flops,
            "achieved_bytes_per_s": op.bytes / measured_s, "achieved_flops_per_s": op.flops / measured_s,
            "predicted_bytes_per_s": op.bytes / predicted_s, "predicted_flops_per_s": op.flops / predicted_s}


def attention_check(t: Target, dev: DeviceInfo, timing: Timing, caps: Optional[Caps]) -> Check:
    """The MLA decode microkernel (fast path) at this GPU's planned shape: micro-batch, heads per rank,
    context per rank, block size; bytes and FLOPs from attention_cost via bench.attention_benchmark."""
    knobs, layout = t.chosen.knobs, t.chosen.layout
    if layout.kv_layout == "latent-sharded":
        return skipped("attention", "latent-sharded KV is a planning figure: no engine kernel to time")
    batch, context = t.micro_batch, t.attention_context
    if caps:
        batch, context = min(batch, caps.batch), min(context, caps.context)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    r = attention_benchmark(batch, context, t.heads_per_rank, knobs.block_size, dtype, dev.torch_device,
                            "fast", timing.warmup, timing.repeats)
    op = Op("attn.core", r["bytes"], r["flops"], "attention")
    predicted_s, evidence = roofline(op, t)
    planned_s = t.step.layers[t.layer_kind].terms_s["attn.core"]
    notes = [f"{r['path']}, B={batch} x T={context} x {t.heads_per_rank} heads, block {knobs.block_size}, "
             f"{r['dtype']} cache; {evidence['bound']}-bound; step model {planned_s * 1e6:,.1f} us at "
             f"B={t.micro_batch} x T={t.attention_context}"]
    if knobs.kv_cache_dtype != "bf16" and dev.type == "cuda":
        notes.append(f"{knobs.kv_cache_dtype} KV planned: timed with a bf16 cache, bytes counted at 2 B")
    extra = rates(op, predicted_s, r["time_s"]) | {"evidence": evidence | {"seconds": r["time_s"]}}
    return ratio_check("attention", predicted_s, r["time_s"], "s", ATTENTION_BAND, dev.type == "cuda",
                       "; ".join(notes), extra)


def guarded(section: str, fn: Callable[[], list[Check]]) -> list[Check]:
    """Run one section; anything it raises becomes one errored check (no traceback reaches the user)."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a broken check must still give a report
        return [errored(section, one_line(exc))]
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def run_checks(t: Target, opts: Options, on_section: Callable[[str], None] = lambda s: None
               ) -> tuple[DeviceInfo, list[Check]]:
    """All sections `opts.only` asks for, on this process's device, in order."""
    from .collectives import collective_checks
    from .env import environment_check, probe_device
    from .fit import fit_check
    from .gemms import gemm_checks

    dev = probe_device(opts.device, t.ranks.local_rank)
    timing, caps = timing_for(dev.type, opts.quick), caps_for(dev.type, opts.quick)
    on_section("env")
    checks = [environment_check(dev, t.chosen.topo)]
    env_ok = checks[0].passed is not False
    local = [("fit", lambda: [fit_check(t, dev, caps, opts.memory_limit_bytes)]),
             ("attention", lambda: [attention_check(t, dev, timing, caps)]),
             ("gemms", lambda: gemm_checks(t, dev, timing, caps))]
    for section, fn in local:
        if section not in opts.only:
            continue
        if not env_ok:
            checks.append(skipped(section, "not run: this GPU is not the topology's (see env.gpu)"))
            continue
        on_section(section)
        checks += guarded(section, fn)
    if "collectives" in opts.only:
        on_section("collectives")
        checks += guarded("collectives", lambda: collective_checks(t, dev, timing, caps, opts.timeout_s))
    return dev, checks
