"""The attention check: the plan's decode attention on this GPU at the planned shape, its output checked first.

Which kernel (engine_kernels.engine_kernel): the one the plan's engine and backend run, where its library is
importable here (FlashMLA, FlashInfer's trtllm-gen MLA, vLLM's Triton MLA, FlashAttention-3's MLA); otherwise the project's own kernel (the Triton split-K
fast path on a GPU, plain torch on a CPU, the torch DSA and DeepSeek-V4 kernels) as a labelled fallback, which is
reported but not judged, carries no calibration evidence (it is not the engine's kernel: calibrate.usable says
so) and leaves the plan's attention unmeasured for the verdict (coverage.attention_gap). An engine kernel that
raises (an API this adapter does not know) falls back the same way, saying so.

Which cache: the plan's KV dtype as the engine stores it (kv_storage: bf16; fp8 rows with a per-tensor scale and
the query on the e4m3 grid; fp8_ds_mla rows for sparse models), so an fp8 plan is timed reading fp8 bytes and its
prediction counts them. On a CPU the work dtype is fp32 and an fp8 cache is still fp8, dequantised in the call.
A kernel that dequantises (or casts) the whole fp8 cache inside the call (the fallback; SGLang's fa3) moves more
than the plan reads: the check names those bytes (`moved_bytes`, bench.dequantised_bytes) beside the plan's.

Before timing, the kernel's output on the first sequences is compared with the naive fp64 reference
(reference.py); a mismatch is a FAIL on any device, naming the max error, and nothing is timed. The prediction is
the step model's roofline for the bytes and FLOPs of the timed problem (check.roofline).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional

import torch

from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.sparse import is_sparse
from mla_planner.perf.layer_work import Op
from mla_planner.verify.bench import (checked_and_timed, decode_inputs, dense_rates, dequantised_bytes,
                                      project_kernel)
from mla_planner.verify.check import ATTENTION_BAND, Check, Timing, band_text, one_line, rates, roofline, skipped
from mla_planner.verify.compressed_bench import compressed_attention_benchmark, kinds_text
from mla_planner.verify.engine_kernels import EngineKernel, engine_kernel
from mla_planner.verify.env import DeviceInfo
from mla_planner.verify.fast import fast_path_name
from mla_planner.verify.kernel import softmax_scale
from mla_planner.verify.sparse_bench import sparse_attention_benchmark
from mla_planner.verify.target import Caps, Target


def _dense(t: Target, choice: EngineKernel, batch: int, context: int, dtype: torch.dtype, dev: DeviceInfo,
           timing: Timing) -> dict:
    """The dense MLA core with the engine's kernel (falling back when it raises) or the project's."""
    spec, knobs = t.chosen.spec, t.chosen.knobs
    scale = softmax_scale(spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.rope_scaling)
    inp = decode_inputs(batch, context, t.heads_per_rank, knobs.block_size, dtype, dev.torch_device, scale,
                        knobs.kv_cache_dtype)
    why_not = choice.why_not
    if choice.build is not None:
        try:
            checked, time_s = checked_and_timed(inp, choice.build, scale, dev.torch_device, timing.warmup,
                                                timing.repeats, choice.fp8_query)
            moved = ({"moved_bytes": dequantised_bytes(batch, context, t.heads_per_rank, inp)}
                     if choice.casts_cache and inp.kv.kind != "bf16" else {})
            return {"kernel": "engine", "impl": "engine", "path": choice.runs, "kv": inp.kv.text(), "time_s": time_s,
                    "output_check": checked, **moved, **dense_rates(batch, context, t.heads_per_rank, inp, time_s)}
        except Exception as exc:  # noqa: BLE001 - an adapter the installed library does not take: fall back
            why_not = f"{choice.runs} raised {one_line(exc)}"
    checked, time_s = checked_and_timed(inp, project_kernel(), scale, dev.torch_device, timing.warmup,
                                        timing.repeats)
    moved = ({"moved_bytes": dequantised_bytes(batch, context, t.heads_per_rank, inp)} if inp.kv.kind != "bf16"
             else {})
    return {"kernel": "fallback", "impl": "fast", "path": fast_path_name(dev.torch_device), "kv": inp.kv.text(),
            "time_s": time_s, "output_check": checked, "why_not": why_not, **moved,
            **dense_rates(batch, context, t.heads_per_rank, inp, time_s)}


def _run(t: Target, choice: EngineKernel, batch: int, context: int, dtype: torch.dtype, dev: DeviceInfo,
         timing: Timing) -> dict:
    """The timed problem of this model's attention kind (dense MLA, DSA, DeepSeek-V4's compressed layers)."""
    spec, knobs = t.chosen.spec, t.chosen.knobs
    if is_compressed(spec):     # DeepSeek-V4: window, compressed rows (CSA: the indexer's top-k), sink
        r = compressed_attention_benchmark(spec, t.chosen.layout, batch, context, dtype, dev.torch_device,
                                           timing.warmup, timing.repeats)
    elif is_sparse(spec):       # DeepSeek Sparse Attention: indexer, top-k, attention over the chosen latents
        r = sparse_attention_benchmark(spec, t.chosen.layout, batch, context, knobs.block_size, dtype,
                                       dev.torch_device, timing.warmup, timing.repeats, knobs.kv_cache_dtype)
    else:
        return _dense(t, choice, batch, context, dtype, dev, timing)
    return r | {"kernel": "fallback", "why_not": choice.why_not}


def attention_check(t: Target, dev: DeviceInfo, timing: Timing, caps: Optional[Caps]) -> Check:
    """The plan's decode attention core at this GPU's planned shape (micro-batch, heads per rank, context per rank,
    block size, KV dtype): the engine's kernel or the labelled fallback, its output checked, then timed against
    the roofline of its bytes and FLOPs (specs.attention.cost; the DSA kind's decode_core; the csa-hca kind's
    layer_core, averaged over the layers)."""
    knobs, layout = t.chosen.knobs, t.chosen.layout
    if layout.kv_layout == "latent-sharded":
        return skipped("attention", "latent-sharded KV is a planning figure: no engine kernel to time")
    if is_sparse(t.chosen.spec) and layout.dcp > 1:
        return skipped("attention", "the sparse kernel under DCP (each rank's share of the merged top-k) is not "
                                    "reproduced here; check the layout without DCP")
    batch, context = t.micro_batch, t.attention_context
    if caps:
        batch, context = min(batch, caps.batch), min(context, caps.context)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    choice = engine_kernel(knobs, t.chosen.spec, dev.type)
    r = _run(t, choice, batch, context, dtype, dev, timing)
    op = Op("attn.core", r["bytes"], r["flops"], "attention")
    predicted_s, evidence = roofline(op, t)
    planned_s = t.step.layers[t.layer_kind].terms_s["attn.core"]
    engine = r["kernel"] == "engine"
    notes = [f"{r['path']}, B={batch} x T={context} x {t.heads_per_rank} heads, block {knobs.block_size}, "
             f"{r['kv']}; {evidence['bound']}-bound; step model {planned_s * 1e6:,.1f} us at "
             f"B={t.micro_batch} x T={t.attention_context}", r["output_check"].text]
    if "kinds" in r:
        notes.append(kinds_text(r, lambda b, f: roofline(Op("attn.core", b, f, "attention"), t)[0]) +
                     f"; {r['dtype']} rows of {t.chosen.spec.head_dim} values timed where the engine reads 584-B fp8 "
                     "rows, bytes counted at the timed size; the step model's figure counts the heads it pads to")
    if "moved_bytes" in r:
        notes.append(f"the fp8 cache is dequantised to the query's dtype inside the timed call: "
                     f"{r['moved_bytes'] / 1e6:,.1f} MB moved (the stored cache read, its copy written and read) where "
                     f"the plan reads {r['bytes'] / 1e6:,.1f} MB; the achieved rates count the plan's bytes")
    if not engine:
        notes.append(f"the project's fallback kernel, not the engine's {choice.backend} ({r['why_not']}): not "
                     "judged, calibrates no factor, and the plan's attention counts as not measured")
    extra = {"impl": r["impl"], "kernel": r["kernel"], "engine_backend": choice.backend, "kv_cache": r["kv"],
             "output_check": asdict(r["output_check"])}
    if "moved_bytes" in r:
        extra["moved_bytes"] = r["moved_bytes"]         # what the call moved; `bytes`: what the plan reads
    if not engine:
        extra["fallback_reason"] = r["why_not"]
    if "kinds" in r:
        extra["layer_kinds"] = r["kinds"]
    detail = "; ".join(notes)
    judged = dev.type == "cuda" and engine
    if r["time_s"] is None:        # the output did not match: a failure wherever it runs, nothing timed
        return Check("attention", predicted_s, None, "s", None, "output = naive reference", False, detail,
                     extra=extra)
    extra |= rates(op, predicted_s, r["time_s"])
    if engine:
        extra["evidence"] = evidence | {"seconds": r["time_s"]}
    ratio = r["time_s"] / predicted_s if predicted_s else None
    passed = (ratio is not None and ATTENTION_BAND[0] <= ratio <= ATTENTION_BAND[1]) if judged else None
    tolerance = band_text(ATTENTION_BAND) if judged else (
        "not judged on cpu" if dev.type != "cuda" else "not judged: fallback kernel")
    return Check("attention", predicted_s, r["time_s"], "s", ratio, tolerance, passed, detail, extra=extra)
