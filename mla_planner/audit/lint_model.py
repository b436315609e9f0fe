"""Findings about how a command serves the checkpoint itself: a multimodal checkpoint's vision encoder
(the plan serves it text-only) and Mistral's params.json format (SGLang reads it only when told or when the
path names the model). (level, flag, text) tuples, as audit/lint.py makes findings of them."""

from __future__ import annotations

from mla_planner.specs.model import ModelSpec

# SGLang 0.5.23 utils/hf_transformers/mistral_utils.py is_mistral_model: the names its `auto` parser knows
SGLANG_MISTRAL_NAMES = ("mistral-large-3", "mistral-small-4", "leanstral")


def model_findings(engine: str, flags: set, values: dict, model: str | None, spec: ModelSpec) -> list[tuple]:
    out = []
    if engine == "vllm" and spec.vision_params and "--language-model-only" not in flags:
        out.append(("warn", "--language-model-only", f"{spec.name} carries a vision encoder ({spec.vision_params / 1e6:,.0f}M "
                    "parameters, bf16): without --language-model-only vLLM builds it on every GPU and profiles "
                    "image inputs out of the KV budget (config/multimodal.py, v1/worker/gpu_model_runner.py "
                    "profile_run); the plan serves it text-only"))
    if engine == "sglang" and spec.config_format == "mistral" and values.get("config_parser") != "mistral" and \
            not any(name in (model or "").lower() for name in SGLANG_MISTRAL_NAMES):
        out.append(("error", "--model-config-parser", f"{spec.name} is a params.json checkpoint and the path "
                    f"{model!r} does not name it as SGLang's auto parser expects ({', '.join(SGLANG_MISTRAL_NAMES)}): "
                    "pass --model-config-parser mistral --load-format mistral"))
    return out
