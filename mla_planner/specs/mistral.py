"""Mistral's own checkpoint format: a `params.json` instead of a Hugging Face config.json (Mistral Large 3,
`mistralai/Mistral-Large-3-675B-Instruct-2512`, ships only that). Read as both engines read it: vLLM 0.33.0
`transformers_utils/configs/mistral.py` `adapt_config_dict` (with `--config_format mistral`) and SGLang 0.5.23
`utils/hf_transformers/mistral_utils.py` rename its keys into a DeepSeek-V3 config; an MLA model with shared
experts becomes `MistralLarge3ForCausalLM` (model_type deepseek_v3). A `vision_encoder` block is Pixtral's
vision tower, counted here (`pixtral`) as vLLM 0.33.0 `model_executor/models/pixtral.py` builds it.
"""

from __future__ import annotations

from mla_planner.core.errors import InputError
from mla_planner.specs.vision import VisionTower

ARCHITECTURE = "MistralLarge3ForCausalLM"
GENERAL = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
           "n_kv_heads": "num_key_value_heads", "hidden_dim": "intermediate_size", "norm_eps": "rms_norm_eps",
           "tied_embeddings": "tie_word_embeddings"}
SAME = ("vocab_size", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "rope_theta", "max_position_embeddings")
MOE = {"num_experts": "n_routed_experts", "num_experts_per_tok": "num_experts_per_tok",
       "expert_hidden_dim": "moe_intermediate_size", "first_k_dense_replace": "first_k_dense_replace",
       "num_shared_experts": "n_shared_experts"}
DEFAULT_MAX_POSITIONS = 128_000     # both adapters' default when params.json gives none


def hf_config_from_params(params: dict, where: str) -> dict:
    """The DeepSeek-V3-style config an engine makes of PARAMS (only the fields the planner reads), with
    `vision_config` holding the Pixtral encoder's block when there is one."""
    moe = params.get("moe")
    if not params.get("qk_nope_head_dim") or not isinstance(moe, dict) or not moe.get("num_shared_experts"):
        missing = "qk_nope_head_dim" if not params.get("qk_nope_head_dim") else "moe"
        raise InputError(where, "a Mistral params.json that is not Mistral Large 3's MLA + shared-expert MoE (the "
                                "engines make it Mixtral or Mistral, which are not MLA models)", missing)
    cfg = {"architectures": [ARCHITECTURE], "model_type": "deepseek_v3",
           "max_position_embeddings": params.get("max_position_embeddings") or DEFAULT_MAX_POSITIONS}
    cfg.update({hf: params[key] for key, hf in GENERAL.items() if key in params})
    cfg.update({key: params[key] for key in SAME if key in params})
    cfg.update({hf: moe[key] for key, hf in MOE.items() if key in moe})
    if params.get("quantization_config") is not None:
        cfg["quantization_config"] = params["quantization_config"]
    elif params.get("quantization") is not None:
        raise InputError(where, "Mistral's own `quantization` block is not modelled (a compressed-tensors "
                                "quantization_config is)", "quantization")
    if isinstance(params.get("vision_encoder"), dict):
        cfg["vision_config"] = params["vision_encoder"]
    return cfg


def pixtral(vision: dict, text_hidden: int, where: str = "params.json") -> VisionTower:
    """Pixtral's vision encoder with its projector, as vLLM 0.33.0 builds it for Mistral Large 3: a patch
    convolution C x P x P -> D without bias, an RMSNorm, L blocks (two RMSNorms, fused QKV 3D x D and
    output D x D without bias, a gated SiLU MLP of I: 3 x D x I), an optional RMSNorm before the projector,
    the patch merger (D s^2 -> D, no bias) where `mm_projector_id` is patch_merge, and the vision-language
    adapter D -> T -> T with biases when `adapter_bias`."""
    sizes = {}
    for key, default in (("hidden_size", None), ("num_hidden_layers", None), ("intermediate_size", None),
                         ("patch_size", None), ("num_channels", 3), ("spatial_merge_size", 1)):
        value = vision.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(where, f"expected a positive integer, got {value!r}", f"vision_encoder.{key}")
        sizes[key] = value
    if not isinstance(text_hidden, int) or text_hidden < 1:
        raise InputError(where, f"expected a positive integer, got {text_hidden!r}", "dim")
    D, L, inter = sizes["hidden_size"], sizes["num_hidden_layers"], sizes["intermediate_size"]
    P, C, s, T = sizes["patch_size"], sizes["num_channels"], sizes["spatial_merge_size"], text_hidden
    bias = 1 if vision.get("adapter_bias", True) else 0
    tower = C * P * P * D + D + L * (2 * D + 4 * D * D + 3 * D * inter)
    projector = (D if vision.get("add_pre_mm_projector_layer_norm") else 0) \
        + (D * s * s * D if vision.get("mm_projector_id") == "patch_merge" else 0) \
        + (D * T + bias * T) + (T * T + bias * T)
    return VisionTower(tower + projector, L, D)
