"""Findings about how a command serves the checkpoint itself: a multimodal checkpoint's vision encoder
(the plan serves it text-only), Mistral's params.json format (SGLang reads it only when told or when the
path names the model), vLLM attention-config keys the engine no longer has (recipes written for older releases),
and a context length above the model's. (level, flag, text) tuples, as audit/lint.py makes findings of them."""

from __future__ import annotations

import json

from mla_planner.specs.model import ModelSpec

# SGLang 0.5.23 utils/hf_transformers/mistral_utils.py is_mistral_model: the names its `auto` parser knows
SGLANG_MISTRAL_NAMES = ("mistral-large-3", "mistral-small-4", "leanstral")


# vLLM 0.33.0's AttentionConfig fields (vllm/config/attention.py); its @config dataclass forbids any other key
VLLM_ATTENTION_CONFIG = ("backend", "minimax_m3_msa_decode_backend", "backend_per_kind", "flash_attn_version",
                         "flash_attn_max_num_splits_for_cuda_graph", "tokenspeed_mla_min_split_kv",
                         "tq_max_kv_splits_for_cuda_graph", "use_trtllm_attention", "disable_flashinfer_q_quantization",
                         "mla_prefill_backend", "use_prefill_query_quantization", "trtllm_ragged_backend",
                         "indexer_kv_dtype", "indexer_sparse_logits", "indexer_tp_shard_min_rows",
                         "minimax_m3_indexer_cp", "hisparse_config", "use_non_causal", "sparse_mla_force_mqa",
                         "sparse_mla_prefill_workspace_factor", "flex_attn_block_m", "flex_attn_block_n",
                         "flex_attn_q_block_size", "flex_attn_kv_block_size")
RENAMED = {"use_fp4_indexer_cache": 'the FP4 index-key cache is indexer_kv_dtype now: --attention-config '
                                    '\'{"indexer_kv_dtype":"mxfp4"}\''}


def attention_config_findings(flags: set, values: dict) -> list[tuple]:
    """Keys of vLLM's --attention-config (JSON, or the dotted --attention-config.KEY form) it does not have: it refuses
    to start. Older recipes name some (DeepSeek-V4's use_fp4_indexer_cache)."""
    keys = [f.split(".", 1)[1].replace("-", "_") for f in flags if f.startswith("--attention-config.")]
    try:
        given = json.loads(values.get("attention_config") or "{}")
    except ValueError:
        given = {}
    keys += list(given) if isinstance(given, dict) else []
    return [("error", "--attention-config", f"{key}: vLLM 0.33's attention config has no such field (vllm/config/"
             f"attention.py forbids unknown keys): it refuses to start" + (f"; {RENAMED[key]}" if key in RENAMED else ""))
            for key in keys if key not in VLLM_ATTENTION_CONFIG]


def _tokens(text: str | None) -> int | None:
    """A context length as the engines read it: 4096, 128k (x 1000), 128K (x 1024), 1m / 1M; None for
    auto, -1 or nothing (the model's own), and for a value that is not a token count (the engine's own parser
    reports it: audit/lint_engine)."""
    if text is None or text in ("auto", "-1"):
        return None
    scale = {"k": 1000, "K": 1024, "m": 10**6, "M": 2**20}.get(text[-1:], 1)
    try:
        return int(text) if scale == 1 else int(float(text[:-1]) * scale)
    except (ValueError, OverflowError):
        return None


def model_findings(engine: str, flags: set, values: dict, model: str | None, spec: ModelSpec,
                   env: dict | None = None) -> list[tuple]:
    out = attention_config_findings(flags, values) if engine == "vllm" else []
    max_len = _tokens(values.get("max_len"))
    if engine == "sglang" and max_len and max_len > spec.max_position_embeddings:   # vLLM: its own rule (lint_engine)
        # SGLang 0.5.23 raises ValueError unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN, then warns
        # "may lead to incorrect model outputs or CUDA errors" (configs/model_config.py)
        allowed = (env or {}).get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN") in ("1", "true", "True", "TRUE")
        out.append(("warn" if allowed else "error", "--context-length",
                    f"{max_len:,} tokens is above {spec.name}'s max_position_embeddings "
                    f"({spec.max_position_embeddings:,})" + ("; SGLang starts with a warning (it may give incorrect "
                                                             "outputs past the trained length)" if allowed else
                                                             "; SGLang refuses it unless "
                                                             "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")))
    multimodal = {"--language-model-only", "--mm-encoder-tp-mode", "--limit-mm-per-prompt"}   # told either way
    if engine == "vllm" and spec.vision_params and not multimodal & flags:
        out.append(("warn", "--language-model-only", f"{spec.name} carries a vision encoder ({spec.vision_params / 1e6:,.0f}M "
                    "parameters, bf16): without --language-model-only vLLM builds it on every GPU and profiles "
                    "image inputs out of the KV budget (config/multimodal.py, v1/worker/gpu_model_runner.py "
                    "profile_run), priced above with its weights whole per GPU; add it to serve text only"
                    + (" (`plan --images` plans it with images)" if spec.vision_patch_size else "")))
    if engine == "sglang" and spec.config_format == "mistral" and values.get("config_parser") != "mistral" and \
            not any(name in (model or "").lower() for name in SGLANG_MISTRAL_NAMES):
        out.append(("error", "--model-config-parser", f"{spec.name} is a params.json checkpoint and the path "
                    f"{model!r} does not name it as SGLang's auto parser expects ({', '.join(SGLANG_MISTRAL_NAMES)}): "
                    "pass --model-config-parser mistral --load-format mistral"))
    return out
