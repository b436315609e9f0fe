"""The checks `verify` runs, in order, and the attention check (their common result and bands: check.py).

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
from typing import Optional

import torch

from mla_planner.perf.layer_work import Op
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.sparse import is_sparse
from mla_planner.verify.bench import attention_benchmark
from mla_planner.verify.check import (ATTENTION_BAND, Check, Options, Timing, errored, one_line, rates, ratio_check,
                                      roofline, skipped, timing_for)
from mla_planner.verify import env
from mla_planner.verify.collectives import collective_checks
from mla_planner.verify.compressed_bench import compressed_attention_benchmark, kinds_text
from mla_planner.verify.env import DeviceInfo
from mla_planner.verify.fit import fit_check
from mla_planner.verify.gemms import gemm_checks
from mla_planner.verify.sparse_bench import sparse_attention_benchmark
from mla_planner.verify.target import Caps, Target, caps_for




def attention_check(t: Target, dev: DeviceInfo, timing: Timing, caps: Optional[Caps]) -> Check:
    """The MLA decode microkernel (fast path) at this GPU's planned shape: micro-batch, heads per rank,
    context per rank, block size; bytes and FLOPs from specs.attention.cost via bench.attention_benchmark (a
    sparse-attention model: verify/sparse_bench.py, its bytes and FLOPs from the DSA kind's decode_core; a
    DeepSeek-V4 model: verify/compressed_bench.py, one layer of each compression ratio timed, averaged over the
    layers, its bytes and FLOPs from the csa-hca kind's layer_core)."""
    knobs, layout = t.chosen.knobs, t.chosen.layout
    if layout.kv_layout == "latent-sharded":
        return skipped("attention", "latent-sharded KV is a planning figure: no engine kernel to time")
    batch, context = t.micro_batch, t.attention_context
    if caps:
        batch, context = min(batch, caps.batch), min(context, caps.context)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if is_sparse(t.chosen.spec) and layout.dcp > 1:
        return skipped("attention", "the sparse kernel under DCP (each rank's share of the merged top-k) is not "
                                    "reproduced here; check the layout without DCP")
    if is_compressed(t.chosen.spec):     # DeepSeek-V4: window, compressed rows (CSA: the indexer's top-k), sink
        r = compressed_attention_benchmark(t.chosen.spec, layout, batch, context, dtype, dev.torch_device,
                                           timing.warmup, timing.repeats)
    elif is_sparse(t.chosen.spec):     # DeepSeek Sparse Attention: indexer, top-k, attention over the chosen latents
        r = sparse_attention_benchmark(t.chosen.spec, layout, batch, context, knobs.block_size, dtype,
                                       dev.torch_device, timing.warmup, timing.repeats)
    else:
        r = attention_benchmark(batch, context, t.heads_per_rank, knobs.block_size, dtype, dev.torch_device,
                                "fast", timing.warmup, timing.repeats)
    op = Op("attn.core", r["bytes"], r["flops"], "attention")
    predicted_s, evidence = roofline(op, t)
    planned_s = t.step.layers[t.layer_kind].terms_s["attn.core"]
    notes = [f"{r['path']}, B={batch} x T={context} x {t.heads_per_rank} heads, block {knobs.block_size}, "
             f"{r['dtype']} cache; {evidence['bound']}-bound; step model {planned_s * 1e6:,.1f} us at "
             f"B={t.micro_batch} x T={t.attention_context}"]
    if "kinds" in r:
        notes.append(kinds_text(r, lambda b, f: roofline(Op("attn.core", b, f, "attention"), t)[0]) +
                     f"; {r['dtype']} rows of {t.chosen.spec.head_dim} values timed where the engine reads 584-B fp8 "
                     "rows, bytes counted at the timed size; the step model's figure counts the heads it pads to")
    elif knobs.kv_cache_dtype != "bf16" and dev.type == "cuda":
        notes.append(f"{knobs.kv_cache_dtype} KV planned: timed with a bf16 cache, bytes counted at 2 B")
    extra = {"impl": r["impl"], **rates(op, predicted_s, r["time_s"]),
             "evidence": evidence | {"seconds": r["time_s"]}}
    if "kinds" in r:
        extra["layer_kinds"] = r["kinds"]
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
