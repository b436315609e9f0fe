"""Which decode kernel the plan's engine and attention backend run, and whether verify can time that kernel here.

The attention check times the engine's own kernel where its library is importable on this machine (a GPU run):
  vLLM FLASHMLA, SGLang flashmla         FlashMLA dense decode (verify/engine_flashmla.py: vLLM's build and its
                                         dense fp8 kernel; SGLang's own flash_mla_interface wrapper, fp8 too)
  vLLM FLASHINFER_MLA, SGLang trtllm_mla FlashInfer's trtllm-gen MLA decode (verify/engine_flashinfer.py)
  vLLM TRITON_MLA                        vLLM's Triton decode_attention_fwd (verify/engine_triton.py; fp8 too)
  vLLM FLASH_ATTN_MLA, SGLang fa3        FlashAttention-3's MLA decode (verify/engine_fa3.py; SGLang's fp8 too)
Elsewhere (a CPU rehearsal, a backend without an adapter here: CUTLASS_MLA, SGLang's triton and flashinfer,
AITER, the sparse and V4 backends, a library that does not import) the project's own kernel is timed as a
labelled fallback: `why_not` says why, its result is reported but not judged, it calibrates no factor of the
engine's (calibrate.usable), and the verdict counts the plan's attention as not measured (coverage.attention_gap).
Torch-free: the adapters (which import torch and their libraries) load only when chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.sparse import is_sparse
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.model import ModelSpec

ADAPTED = {("vllm", "FLASHMLA"): "flashmla", ("sglang", "flashmla"): "flashmla",
           ("vllm", "FLASHINFER_MLA"): "flashinfer", ("sglang", "trtllm_mla"): "flashinfer",
           ("vllm", "TRITON_MLA"): "triton", ("vllm", "FLASH_ATTN_MLA"): "fa3", ("sglang", "fa3"): "fa3"}


@dataclass(frozen=True)
class EngineKernel:
    backend: str                      # "FLASHMLA (vllm)": what the plan's engine runs
    build: Optional[Callable] = None  # bench.KernelBuild of that kernel; None: the project's fallback is timed
    runs: str = ""                    # the library that runs it, when build is set
    why_not: str = ""                 # why the engine's kernel is not timed, when build is None
    fp8_query: bool = False           # the kernel quantises the query to e4m3 (reference.TOLERANCES["fp8"])
    casts_cache: bool = False         # it casts the whole fp8 cache to bf16 in each call (SGLang's fa3)


QUANTISE_Q = ("flashmla", "flashinfer")   # their fp8 paths compute in e4m3 (the query quantised); Triton and FA3
                                          # keep the query in bf16 and dequantise (or cast) the cache


def engine_kernel(knobs: Knobs, spec: ModelSpec, device_type: str) -> EngineKernel:
    """The engine's decode kernel for this plan on this device, or why verify falls back to its own."""
    engine, backend, kv = knobs.engine, knobs.attention_backend, knobs.kv_cache_dtype
    label = f"{backend} ({engine})" if backend else f"{engine}'s default backend"
    if device_type != "cuda":
        return EngineKernel(label, why_not="the engines' kernels run on GPUs; this is a CPU rehearsal")
    if is_sparse(spec) or is_compressed(spec):
        return EngineKernel(label, why_not=f"verify has no adapter for the engine's sparse kernel ({label})")
    if not backend:
        return EngineKernel(label, why_not="the plan names no attention backend")
    which = ADAPTED.get((engine, backend))
    if which is None:
        return EngineKernel(label, why_not=f"verify has no adapter for {label}")
    if kv not in ("bf16", "fp8"):
        return EngineKernel(label, why_not=f"no adapter for a {kv} cache on {label}")
    if which == "flashmla":
        from mla_planner.verify import engine_flashmla
        build, runs, why = engine_flashmla.kernel(engine, kv)
    elif which == "flashinfer":
        from mla_planner.verify import engine_flashinfer
        build, runs, why = engine_flashinfer.kernel(spec.qk_nope_head_dim)
    elif which == "triton":
        from mla_planner.verify import engine_triton
        build, runs, why = engine_triton.kernel()
    else:
        from mla_planner.verify import engine_fa3
        build, runs, why = engine_fa3.kernel(engine, kv, knobs.cuda_graphs)
    return EngineKernel(label, build, runs, why, fp8_query=kv == "fp8" and build is not None and which in QUANTISE_Q,
                        casts_cache=(engine, which) == ("sglang", "fa3"))
