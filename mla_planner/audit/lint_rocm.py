"""What a launch command needs on an AMD Instinct GPU that a CUDA command does not (lint's ROCm checks).

The planner prices the AITER kernels and writes scripts that switch them on (data/rocm.yaml); a command the user
wrote may not. Without the switch (an exported variable lint cannot see is why these are warnings):
  vLLM 0.33.0   VLLM_ROCM_USE_AITER unset: the MLA order is TRITON_MLA alone, which takes block sizes in multiples of
                16 (vllm/platforms/rocm.py:548-551, triton_mla.py:114-121), and the MoE runs Triton's kernels
  SGLang 0.5.23 SGLANG_USE_AITER unset: Triton MoE and FP8 GEMMs (layers/quantization/fp8.py:2962-2972); with no
                --attention-backend it picks aiter only at 16 or 128 heads per rank, else triton
                (arg_groups/model_override_base.py:338-347)
DeepEP is CUDA's: on ROCm the engines' expert all-to-all is MoRI (vLLM all2all.py; SGLang --moe-a2a-backend mori),
which the planner does not model (under DP + EP engines.parallel.deepep_problem says so for the layout).
"""

from __future__ import annotations

from mla_planner.engines.backends import backend
from mla_planner.engines.parallel import uses_deepep
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import GPU

SWITCH = {"vllm": "VLLM_ROCM_USE_AITER", "sglang": "SGLANG_USE_AITER"}
ON = ("1", "true", "True", "TRUE")
SGLANG_OWN_AITER_HEADS = (16, 128)


def rocm_findings(engine: str, env: dict, values: dict, spec: ModelSpec, gpu: GPU,
                  layout: Layout) -> list[tuple[str, str, str]]:
    """(level, flag, text) for a command on an AMD GPU ([] on NVIDIA)."""
    if gpu.vendor != "amd":
        return []
    out = []
    a2a = values.get("a2a", "")
    if a2a.startswith("deepep") and not uses_deepep(layout):     # under DP + EP the layout rule says it already
        out.append(("error", "--all2all-backend" if engine == "vllm" else "--moe-a2a-backend",
                    f"{a2a}: DeepEP is CUDA's all-to-all; on ROCm the engines run MoRI (mori), which the planner does "
                    "not model yet"))
    switch = SWITCH[engine]
    if env.get(switch) not in ON:
        what = ("vLLM selects only TRITON_MLA and Triton MoE" if engine == "vllm"
                else "SGLang runs Triton MoE and FP8 GEMMs")
        block = values.get("block")
        triton = backend("vllm", "TRITON_MLA")    # the one MLA backend vLLM selects on ROCm without AITER
        if engine == "vllm" and not values.get("backend") and block and block.isdigit() \
                and not triton.accepts_block(int(block)):
            what += f" (and TRITON_MLA takes block sizes in multiples of 16: --block-size {block} would not start)"
        out.append(("warn", switch, f"not set on this command: without it {what}, not the AITER kernels the planner "
                                    f"prices; export {switch}=1 (the planner's scripts do) unless your shell does"))
    heads = spec.num_attention_heads // layout.tp
    if engine == "sglang" and not values.get("backend") and heads not in SGLANG_OWN_AITER_HEADS:
        out.append(("warn", "--attention-backend", f"not given: SGLang picks aiter only at 16 or 128 query heads per "
                                                   f"rank and runs triton at {heads}; pin --attention-backend aiter"))
    return out
