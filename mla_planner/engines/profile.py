"""What each engine does differently, named: the facts the memory, performance and search models ask of an
engine instead of comparing its name. One profile per engine, for the releases this project models
(vLLM 0.33.0, SGLang 0.5.23; a release that changes a fact changes it here, or in memory_rules.py where the
accounting moved between releases). Each fact cites the engine code it comes from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mla_planner.engines.parallel import DEEPEP_SGLANG_DISPATCH_MAX
from mla_planner.specs.attention.kinds import attention_of


@dataclass(frozen=True)
class EngineProfile:
    name: str
    fraction_flag: str            # the memory-fraction flag the user sets
    graph_flag: str               # the flag that sizes the decode CUDA-graph capture range
    pp_partition_env: str         # the environment variable that pins the layers per pipeline stage
    pp_remainder_last: bool       # the remainder of an uneven layer split goes to the last stages (else one
                                  # each to the stages before the last, from the second-to-last backwards)
    graph_range_in_tokens: bool   # the capture range counts tokens (1 + k per request with MTP), not requests
    step_budget_caps_prompts: bool  # one scheduler step carries at most max_num_batched_tokens of decodes and
                                    # prompt chunks together, so prompt work is spread over steps; else decodes
                                    # wait out every prefill batch
    pool_after_static_fraction: bool  # the KV pool is what the static fraction leaves after the weights and the
                                      # req_to_token table, sized per rank from pre-load free memory; else a
                                      # budget of total memory with the profiled peak taken out
    short_pool_refuses_start: bool  # a KV pool shorter than the context length stops start-up (else every
                                    # request is capped at the pool)
    dp_rank_packs_stage: bool     # with DP attention and PP, a stage's DP ranks sit together (else each DP
                                  # rank's tp x pp GPUs do, so a stage's group is strided over the instance)
    fp8_marlin_fallback: bool     # an FP8 checkpoint on a GPU without FP8 tensor cores runs weight-only FP8
                                  # Marlin (else it is refused)
    deepep_buffer_by_budget: bool   # DeepEP's low-latency buffer is sized for the whole token budget (so the
                                    # budget is kept small under DP attention + EP); else for the decode batch
    deepep_decode_cap: Optional[int]  # tokens one DP rank's low-latency dispatch takes per step, at most
    deepep_normal_for_prefill: bool   # a prefill batch runs DeepEP's normal (RDMA-once-per-node) kernels; else the
                                      # low-latency ones for every batch, as the launch asks (launch/a2a.py)
    gqa_block_multiple: int       # the block size its non-MLA attention backends take multiples of
    text_only_keeps_vision: bool  # serving a multimodal checkpoint text-only still builds its vision encoder on
                                  # every GPU (else a flag keeps it off the GPUs: vLLM --language-model-only)


PROFILES = {
    # vllm/config/cache.py, config/compilation.py, model_executor/layers/fused_moe/layer.py (max_num_tokens =
    # max_num_batched_tokens), v1/attention/backends/flash_attn.py and triton_attn.py (block multiples of 16), (max_cudagraph_capture_size: tokens), distributed/utils.py
    # get_pp_indices (vllm-project/vllm#46217), v1/core/sched/scheduler.py (one token budget per step),
    # v1/worker/gpu_worker.py determine_available_memory, config/model.py (max_model_len vs the pool),
    # distributed/parallel_state.py (world rank = dp x pp x tp + pp x tp + tp),
    # model_executor/layers/quantization/utils/marlin_utils_fp8.py, config/multimodal.py language_model_only and
    # model_executor/models/interfaces.py _mark_tower_model (the vision tower built on the meta device)
    "vllm": EngineProfile("vllm", fraction_flag="--gpu-memory-utilization",
                          graph_flag="--max-cudagraph-capture-size", pp_partition_env="VLLM_PP_LAYER_PARTITION",
                          pp_remainder_last=False, graph_range_in_tokens=True, step_budget_caps_prompts=True,
                          pool_after_static_fraction=False, short_pool_refuses_start=True,
                          dp_rank_packs_stage=False, fp8_marlin_fallback=True, deepep_buffer_by_budget=True,
                          deepep_decode_cap=None, deepep_normal_for_prefill=False, gqa_block_multiple=16,
                          text_only_keeps_vision=False),
    # sglang/srt/server_args.py (--deepep-mode auto: "low_latency for decode batch and normal for prefill batch"),
    # layers/moe/token_dispatcher/deepep.py (at most 1,024 tokens per dispatch),
    # distributed/utils.py get_pp_indices, managers/scheduler.py (prefill and decode
    # batches apart), model_executor/model_runner.py profile_max_num_token, managers/tp_worker.py (max_req_len =
    # min(context_len - 1, pool - 1)), layers/quantization/fp8.py (no FP8 Marlin MoE, sgl-project/sglang#12887),
    # models/kimi_k25.py (the vision tower and projector built unconditionally; --language-model-only is refused
    # for it, server_args.py)
    "sglang": EngineProfile("sglang", fraction_flag="--mem-fraction-static",
                            graph_flag="--cuda-graph-max-bs-decode", pp_partition_env="SGLANG_PP_LAYER_PARTITION",
                            pp_remainder_last=True, graph_range_in_tokens=False, step_budget_caps_prompts=False,
                            pool_after_static_fraction=True, short_pool_refuses_start=False,
                            dp_rank_packs_stage=True, fp8_marlin_fallback=False, deepep_buffer_by_budget=False,
                            deepep_decode_cap=DEEPEP_SGLANG_DISPATCH_MAX, deepep_normal_for_prefill=True,
                            gqa_block_multiple=1, text_only_keeps_vision=True),
}


def profile(engine: str) -> EngineProfile:
    """The profile of `engine` ('vllm' or 'sglang')."""
    return PROFILES[engine]


AITER_RESERVE_CONTEXT = 8192     # tokens of context above which SGLang keeps AITER's workspace outside its pool
AITER_RESERVE_SCALE = 0.85
SGLANG_OWN_AITER_HEADS = (16, 128)   # KV heads per rank at which SGLang picks aiter itself for MLA on HIP


def sglang_hip_backend(spec, layout) -> str:
    """The attention backend SGLang 0.5.23 runs on a ROCm GPU when --attention-backend is not given
    (arg_groups/model_override_base.py get_default_attn_backend, 326-347): aiter for MHA / GQA models; for MLA,
    aiter only at 16 or 128 KV heads per rank of the whole --tp-size group (model_config.get_num_kv_heads: total KV
    heads // tp_size, at least 1; DP attention is inside --tp-size), else triton. Sparse (DSA) and compressed
    (DeepSeek-V4) models run their own backends ("")."""
    family = attention_of(spec).backend_family
    if family is None:
        return "aiter"
    if family != "mla":
        return ""
    return "aiter" if max(1, spec.kv_heads // layout.stage_gpus) in SGLANG_OWN_AITER_HEADS else "triton"


def static_fraction_scale(knobs, gpu, spec, layout) -> float:
    """The factor SGLang applies to --mem-fraction-static before it sizes its pool: 0.85 under the aiter attention
    backend (pinned, or SGLang's own pick on an AMD GPU: `sglang_hip_backend`) with a context above 8,192
    tokens, "to reserve non-static workspace" (SGLang 0.5.23 sglang/srt/arg_groups/attention_hook.py:244-268;
    --context-length is the plan's max_model_len), else 1. It is skipped only with
    SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION and an explicit fraction, which the planner does not set: SGLang's own
    note calls the reserve "load-bearing" - skipping it ran an MI355X out of memory in long-context aiter serving
    (67.32 GiB requested, 47.40 GiB free; sglang/srt/environ.py:1064-1071)."""
    if knobs.engine != "sglang" or gpu.vendor != "amd" or knobs.max_model_len <= AITER_RESERVE_CONTEXT:
        return 1.0
    running = knobs.attention_backend or sglang_hip_backend(spec, layout)
    return AITER_RESERVE_SCALE if running == "aiter" else 1.0
