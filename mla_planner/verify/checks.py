"""The checks `verify` runs, in order (their common result and bands: check.py).

Order: environment (env.py) -> memory fit (fit.py) -> MLA attention (attention.py) -> dense GEMMs (gemms.py)
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

import torch

from mla_planner.verify.attention import attention_check
from mla_planner.verify.check import Check, Options, errored, one_line, skipped, timing_for
from mla_planner.verify import env
from mla_planner.verify.collectives import collective_checks
from mla_planner.verify.env import DeviceInfo
from mla_planner.verify.fit import fit_check
from mla_planner.verify.gemms import gemm_checks
from mla_planner.verify.target import Target, caps_for


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
    dev = env.probe_device(opts.device, t.ranks.local_rank)
    timing, caps = timing_for(dev.type, opts.quick), caps_for(dev.type, opts.quick)
    on_section("env")
    checks = [env.environment_check(dev, t.chosen.topo)]
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
