"""What a launch command needs on an AMD Instinct GPU that a CUDA command does not (lint's ROCm checks).

The planner prices the AITER kernels and writes scripts that switch them on (data/rocm.yaml); a command the user
wrote may not. Without the switch (an exported variable lint cannot see is why these are warnings):
  vLLM 0.33.0   VLLM_ROCM_USE_AITER unset: the MLA order is TRITON_MLA alone, which takes block sizes in multiples of
                16 (vllm/platforms/rocm.py:548-551, triton_mla.py:114-121), and the MoE runs Triton's kernels
  SGLang 0.5.23 SGLANG_USE_AITER unset: Triton MoE and FP8 GEMMs (layers/quantization/fp8.py:2962-2972); with no
                --attention-backend it picks aiter for MLA only at 16 or 128 KV heads per rank, else triton
                (arg_groups/model_override_base.py:338-347)
DeepEP is CUDA's: on ROCm the engines' expert all-to-all is MoRI (vLLM --all2all-backend mori_high_throughput |
mori_low_latency; SGLang --moe-a2a-backend mori), which the planner plans under DP attention + EP (launch/a2a.py);
a command that asks for it is checked against what the engines and MoRI assert at start-up (`mori_findings`):
  vLLM 0.33.0   gfx942 / gfx950 only (distributed/device_communicators/all2all.py); AITER's fused MoE
                (fused_moe/config.py: "Mori needs to be used with aiter fused_moe for now"); tokens per rank =
                --max-num-batched-tokens; the heap is allocated at distributed init, before the memory snapshot,
                so it sits outside --gpu-memory-utilization
  SGLang 0.5.23 SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 4096, srt/environ.py) must hold the per-rank
                chunked prefill (arg_groups/moe_hook.py asserts it); DeepSeek-V4 inside one host runs MoRI's EPv2,
                whose own arena is made before the KV pool (engines.dispatch.uses_mori_epv2): no heap to check
  MoRI          one op's buffers come out of the symmetric heap, MORI_SHMEM_HEAP_SIZE (2 GiB by default, 4 GiB in
                newer MoRI); too small a heap fails with "Out of symmetric heap memory!" (memory.terms.mori_heap_bytes)
"""

from __future__ import annotations

import re
from dataclasses import replace

from mla_planner.core.units import GiB
from mla_planner.engines.backends import backend
from mla_planner.engines.dispatch import dispatch_format, uses_mori_epv2
from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.engines.profile import AITER_RESERVE_CONTEXT, sglang_hip_backend
from mla_planner.engines.parallel import MORI_DEFAULT_HEAP_BYTES, SGLANG_MORI_TOKENS, SGLANG_MORI_TOKENS_ENV
from mla_planner.engines.sparse import is_sparse, own_rows
from mla_planner.memory.terms import mori_heap_bytes
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

SWITCH = {"vllm": "VLLM_ROCM_USE_AITER", "sglang": "SGLANG_USE_AITER"}
A2A_FLAG = {"vllm": "--all2all-backend", "sglang": "--moe-a2a-backend"}
# what each engine reads as on, case aside: vLLM's envs.py `.lower() in ("true", "1")`, SGLang's EnvBool
# (environ.py) true, 1, yes, y
ON = {"vllm": ("true", "1"), "sglang": ("true", "1", "yes", "y")}


def _on(engine: str, value) -> bool:
    return str(value).lower() in ON[engine] if value is not None else False
HONOR = "SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION"   # engines/profile.static_fraction_scale


def rocm_findings(engine: str, env: dict, values: dict, spec: ModelSpec, topo: Topology,
                  layout: Layout) -> list[tuple[str, str, str]]:
    """(level, flag, text) for a command on an AMD GPU; on NVIDIA only a MoRI all-to-all is wrong."""
    gpu, a2a = topo.gpu, values.get("a2a", "")
    if a2a.startswith("mori") and gpu.vendor != "amd":
        return [("error", A2A_FLAG[engine], f"{a2a}: MoRI is AMD's all-to-all, for Instinct gfx942 / gfx950 only; "
                 "on NVIDIA the engines' EP all-to-all is DeepEP")]
    if gpu.vendor != "amd":
        return []
    out = mori_findings(engine, env, values, spec, topo, layout) if a2a.startswith("mori") else []
    if a2a.startswith("deepep"):
        out.append(("error", A2A_FLAG[engine], f"{a2a}: DeepEP is CUDA's all-to-all; on ROCm the engines run MoRI: "
                    + ("--all2all-backend mori_low_latency" if engine == "vllm" else "--moe-a2a-backend mori")))
    switch = SWITCH[engine]
    if not _on(engine, env.get(switch)) and not (engine == "vllm" and a2a.startswith("mori")):   # mori_findings says it
        what = _without_aiter(engine, spec, gpu)
        block = values.get("block")
        triton = backend("vllm", "TRITON_MLA")    # the one MLA backend vLLM selects on ROCm without AITER
        if engine == "vllm" and not values.get("backend") and block and block.isdigit() and not own_rows(spec) \
                and not triton.accepts_block(int(block)):
            what += f" (and TRITON_MLA takes block sizes in multiples of 16: --block-size {block} would not start)"
        out.append(("warn", switch, f"not set on this command: without it {what}, not the AITER kernels the planner "
                                    f"prices; export {switch}=1 (the planner's scripts do) unless your shell does"))
    heads, own = max(1, spec.kv_heads // layout.stage_gpus), sglang_hip_backend(spec, layout)
    aiter = values.get("backend") == "aiter" or (not values.get("backend") and own == "aiter")
    context = int(values["max_len"]) if str(values.get("max_len", "")).isdigit() else spec.max_position_embeddings
    if engine == "sglang" and _on(engine, env.get(HONOR)) and values.get("fraction") and aiter and not own_rows(spec) \
            and context > AITER_RESERVE_CONTEXT:
        out.append(("warn", HONOR, f"set with an explicit --mem-fraction-static at {context:,} tokens of context: "
                                   "SGLang then sizes its pool at the whole fraction, not the 0.85 of it that keeps "
                                   "AITER's workspace outside the pool above 8,192 tokens, a reserve its own notes "
                                   "call load-bearing (a long-context MI355X run ran out of memory without it; "
                                   "sglang/srt/environ.py); the memory figures here keep the reserve: unset it"))
    if engine == "sglang" and not values.get("backend") and own == "triton":   # DSA / V4 run their own ("")
        out.append(("warn", "--attention-backend", f"not given: SGLang picks aiter only at 16 or 128 KV heads per "
                                                   f"rank of --tp-size and runs triton at {heads}; pin "
                                                   "--attention-backend aiter"))
    return out


def _without_aiter(engine: str, spec: ModelSpec, gpu) -> str:
    """What the engine runs instead of the AITER kernels the plan prices when its AITER switch is off."""
    if engine == "sglang":
        return "SGLang runs Triton MoE and FP8 GEMMs" + (" and DSA on 1-token pages (no preshuffled index keys)"
                                                         if is_sparse(spec) else "")
    if not own_rows(spec):
        return "vLLM selects only TRITON_MLA and Triton MoE"
    if gpu.arch == "cdna3":     # DSA and DeepSeek-V4 both keep an indexer
        return "vLLM's sparse indexer raises RuntimeError on gfx942 (layers/sparse_attn_indexer.py forward_hip)"
    return "vLLM runs Triton MoE" + ("" if is_sparse(spec) else " and keeps DeepSeek-V4's index keys fp8, not the FP4 "
                                                                "the plan prices (platforms/rocm.py)")


def mori_findings(engine: str, env: dict, values: dict, spec: ModelSpec, topo: Topology,
                  layout: Layout) -> list[tuple[str, str, str]]:
    """What a command running MoRI needs (module docstring)."""
    ep = max(layout.ep, layout.stage_gpus) if spec.is_moe else 1
    out = []
    defaults = engine_default_knobs(engine, spec, topo, layout.dp)
    batched = int(values["batched"]) if str(values.get("batched", "")).isdigit() else None
    if engine == "vllm":
        if not _on("vllm", env.get(SWITCH["vllm"])):
            out.append(("warn", SWITCH["vllm"], "not set on this command: vLLM asserts AITER's fused MoE with MoRI "
                                                "('Mori needs to be used with aiter fused_moe for now'); export "
                                                "VLLM_ROCM_USE_AITER=1 unless your shell does"))
        tokens = batched or defaults.max_num_batched_tokens
    else:
        given = str(env.get(SGLANG_MORI_TOKENS_ENV, ""))
        tokens = int(given) if given.isdigit() else SGLANG_MORI_TOKENS
        chunk = (batched or defaults.max_num_batched_tokens * layout.dp) // max(layout.dp, 1)
        if chunk > tokens:
            out.append(("warn" if SGLANG_MORI_TOKENS_ENV not in env else "error", SGLANG_MORI_TOKENS_ENV,
                        f"{tokens}: SGLang asserts it holds the per-rank chunked prefill ({chunk} tokens) at start; "
                        f"export {SGLANG_MORI_TOKENS_ENV}={chunk} (unless your shell does) or lower "
                        "--chunked-prefill-size"))
    if spec.is_moe and not _epv2(engine, spec, replace(layout, ep=ep), topo, env):     # EPv2 builds its own arena
        out += _heap(env, mori_heap_bytes(spec, ep, tokens, dispatch_format(engine, spec, topo.gpu)), tokens)
    return out


def _epv2(engine: str, spec: ModelSpec, layout: Layout, topo: Topology, env: dict) -> bool:
    """SGLang runs MoRI's EPv2 (no symmetric heap) for this command: the planner's rule (SGLang sets the EP size to
    the stage's for MoRI, overrides.py), unless the command turns it off (SGLANG_MORI_EP_V2 false) or asks for
    MoRI's SDMA path, which is EPv1's only (arg_groups/moe_hook.py _mori_epv2_unsupported_reason)."""
    return (uses_mori_epv2(engine, spec, layout, topo.gpu) and _on("sglang", env.get("SGLANG_MORI_EP_V2", "1"))
            and not _on("sglang", env.get("MORI_ENABLE_SDMA", "0")))


def _heap(env: dict, need: float, tokens: int) -> list[tuple[str, str, str]]:
    """MORI_SHMEM_HEAP_SIZE against one op's need: given and too small, or not given where the default is."""
    given, want = heap_bytes(env.get("MORI_SHMEM_HEAP_SIZE", "")), f"{-(-need // GiB):.0f}G"
    if given is not None and given < need:
        return [("error", "MORI_SHMEM_HEAP_SIZE", f"{given / GiB:,.1f} GiB: one MoRI op at {tokens} tokens per rank "
                 f"needs {need / GiB:,.1f} GiB of the symmetric heap ('Out of symmetric heap memory!' at start); "
                 f"set it to {want} or more")]
    if given is None and need > MORI_DEFAULT_HEAP_BYTES:
        return [("warn", "MORI_SHMEM_HEAP_SIZE", f"not set: one MoRI op at {tokens} tokens per rank needs "
                 f"{need / GiB:,.1f} GiB of the symmetric heap, above MoRI's 2 GiB default (4 GiB in newer releases); "
                 f"export MORI_SHMEM_HEAP_SIZE={want}")]
    return []


def heap_bytes(text: str) -> float | None:
    """MORI_SHMEM_HEAP_SIZE in bytes ('6G', '6144M', or bytes), None when absent or unreadable."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([GgMmKk]?)[iI]?[Bb]?\s*", text or "")
    if not match:
        return None
    scale = {"g": GiB, "m": 2**20, "k": 2**10, "": 1}[match.group(2).lower()]
    return float(match.group(1)) * scale
