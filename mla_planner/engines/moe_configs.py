"""Whether the engine runs its Triton fused-MoE kernel for a candidate, the tuned-config file it looks up for
that, and whether the wheel ships one (sgl-project/sglang#4161: "Using default MoE config. Performance
might be sub-optimal!").

When the kernel runs (read from the wheels' backend selection):
  vLLM 0.33.0   block-FP8 experts: Triton on Hopper and Ada without expert parallelism (fused_moe/oracle/fp8.py
                moves TRITON to the front on sm90 for TP; with EP it prefers FlashInfer CUTLASS, and DeepEP's
                low-latency mode a batched kernel), Marlin on Ampere, TensorRT-LLM's on sm10x Blackwell, DeepGEMM on
                sm12x (deep_gemm_moe.py `_supports_current_device`: families 100 and 120); BF16 experts: Triton
                everywhere but sm10x Blackwell (oracle/unquantized.py), batched Triton under DeepEP.
  SGLang 0.5.23 Triton unless DeepEP (then DeepGEMM for FP8; BF16 under DeepEP is left out here), and unless a
                DeepSeek-V3-family model runs FP8 or BF16 on Blackwell without an all-to-all backend
                (arg_groups/overrides.py: flashinfer_trtllm).
  AMD           neither: the planner's scripts export VLLM_ROCM_USE_AITER=1 / SGLANG_USE_AITER=1 (data/rocm.yaml), under
                which vLLM runs AITER's fused MoE (fused_moe/experts/rocm_aiter_moe.py: is_fused_moe_enabled) and
                SGLang's `auto` MoE runner becomes AITER (layers/quantization/fp8.py:2962-2972). Without them the
                Triton tables would be read; the wheels ship DeepSeek-shaped AMD ones for MI300X / MI325X only
                (E=256,N=256,...,dtype=fp8_w8a8,block_shape=[128,128]), none for MI355X.
The file name (vLLM fused_moe.py get_config_file_name; SGLang triton_utils/fused_moe_triton_config.py):
  E = the experts on one GPU (routed / ep; SGLang adds the shared expert it fuses in for DeepSeek-V3/R1 at
  ep = 1, models/deepseek_v2.py), N = moe_intermediate_size / moe_tp, device_name = the CUDA device name with
  spaces as '_' (vLLM maps any H200 to NVIDIA_H200), then ',dtype=fp8_w8a8' (',dtype=int8_w8a8' for SGLang's
  INT8 experts) and, for block-scaled experts, ',block_shape=[128,128]' (SGLang keeps the space: '[128, 128]').
  The shipped names: data/moe_kernel_configs.yaml.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional


from mla_planner.core.resources import data_dir, read_data
from mla_planner.engines.backends import engine_version
from mla_planner.engines.parallel import uses_ep_all_to_all
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.gpu import GPU

UNTUNED_LOG = {"vllm": "Using default MoE config",             # what each engine logs without a tuned file
               "sglang": "Using default MoE kernel config"}
TUNE_SCRIPT = {"vllm": "benchmarks/kernels/benchmark_moe.py",                       # in each engine's source tree
               "sglang": "benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py"}
TUNE_OUTPUT = {"vllm": "--save-dir /abs/moe-configs, then export VLLM_TUNED_CONFIG_FOLDER=/abs/moe-configs in every "
                       "node's script (an absolute path, the same on every node)",
               "sglang": "then point SGLANG_MOE_CONFIG_DIR at the folder it writes, in every node's script"}


def tune_command(engine: str, model: str, layout: Layout, dtype: str) -> str:
    """The engine's own tuner for the file this layout reads: TP shards the intermediate size (--tp-size = the
    MoE-TP degree); expert parallelism splits the experts instead (vLLM: --tp-size EP --enable-expert-parallel,
    which divides E by it; SGLang: --ep-size)."""
    split = (f"--tp-size {layout.moe_tp}" if layout.ep == 1 else
             f"--tp-size {layout.ep} --enable-expert-parallel" if engine == "vllm" else f"--ep-size {layout.ep}")
    return (f"python {TUNE_SCRIPT[engine]} --model {shlex.quote(model)} {split} "
            f"--dtype {dtype} --tune {TUNE_OUTPUT[engine]}")


@dataclass(frozen=True)
class MoeKernelConfig:
    engine: str
    file_name: str           # without .json
    shipped: bool
    tune_dtype: str = "auto"  # the tuners' --dtype: fp8_w8a8 / int8_w8a8 for W8A8 experts

    def advice(self, model: str, layout: Layout) -> str:
        """One line for a user whose engine would run untuned tiles."""
        label, log = "vLLM" if self.engine == "vllm" else "SGLang", UNTUNED_LOG[self.engine]
        return (f"{label} {engine_version(self.engine)} ships no tuned fused-MoE config '{self.file_name}.json' for "
                f"this GPU and split: it logs '{log}' and runs the routed experts' GEMMs untuned, slower than "
                f"planned; tune one from {label}'s source tree: "
                + tune_command(self.engine, model, layout, self.tune_dtype))


@lru_cache(maxsize=1)
def _shipped() -> dict[str, frozenset]:
    data = read_data(data_dir("moe_kernel_configs.yaml"))
    return {engine: frozenset(names) for engine, names in data.items()}


def _v3_family(spec: ModelSpec) -> bool:
    """DeepSeek-V3/R1 and Kimi-K2 (architectures DeepseekV3ForCausalLM): the specs carry the V3 router."""
    return spec.topk_method == "noaux_tc"


FOUR_BIT = ("int4", "nvfp4", "mxfp4")


def runs_triton_moe(spec: ModelSpec, gpu: GPU, layout: Layout, engine: str) -> bool:
    """Whether `engine` runs its Triton fused-MoE kernel (and so reads a tuned config) here (module docstring)."""
    if not spec.is_moe or spec.expert_dtype in FOUR_BIT:     # Marlin / FlashInfer / CUTLASS MoE kernels
        return False
    if gpu.vendor == "amd":     # the scripts switch AITER on (data/rocm.yaml): AITER's fused MoE runs, no Triton table
        return False
    fp8, deepep = spec.expert_dtype == "fp8", uses_ep_all_to_all(layout)
    if engine == "vllm":
        if fp8:
            return gpu.arch in ("hopper", "ada") and layout.ep == 1
        return gpu.arch != "blackwell"
    if deepep:
        return False
    return not (gpu.arch == "blackwell" and _v3_family(spec))


def moe_kernel_config(spec: ModelSpec, gpu: GPU, layout: Layout, engine: str) -> Optional[MoeKernelConfig]:
    """The tuned-config file the engine looks up for this candidate, and whether its wheel ships it; None where
    it runs another kernel or the GPU's CUDA name is not known."""
    if not gpu.cuda_name or not runs_triton_moe(spec, gpu, layout, engine):
        return None
    experts = spec.n_routed_experts // layout.ep
    fused = engine == "sglang" and _v3_family(spec) and spec.n_routed_experts == 256 and spec.n_shared_experts == 1 \
        and layout.ep == 1 and gpu.sm >= 80
    device = gpu.cuda_name.replace(" ", "_")
    if engine == "vllm" and "H200" in device.split("_"):
        device = "NVIDIA_H200"
    name = f"E={experts + fused},N={spec.moe_intermediate_size // layout.moe_tp},device_name={device}"
    dtype = f"{spec.expert_dtype}_w8a8" if spec.expert_dtype in ("fp8", "int8") else "auto"
    if dtype != "auto":
        name += f",dtype={dtype}"
    if spec.block_scaled(spec.expert_dtype):
        block = f"[{spec.weight_block_size[0]},{spec.weight_block_size[1]}]"
        name += ",block_shape=" + (block if engine == "vllm" else block.replace(",", ", "))
    return MoeKernelConfig(engine, name, name in _shipped()[engine], dtype)
