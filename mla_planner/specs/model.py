"""The model spec: the architecture facts the planner needs, named like Hugging Face config.json keys.

One flat, frozen record (DeepSeek-V3 `inference/model.py` ModelArgs style); unknown keys fail loudly.
An MLA model (DeepSeek-V2/V3/R1, Kimi-K2) and a conventional GQA/MHA model (Llama, Qwen2) share it:
the MLA fields are null for GQA, the GQA fields are unused for MLA.

A plain frozen dataclass: a user's file is validated into it by pydantic (core/validation.py reads the
checked field types below), a built-in one is built directly (specs/builtin.py; tests/test_builtin_specs.py
holds every built-in equal to its validated self). Either way `__post_init__` checks that the fields agree.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, fields
from functools import cached_property
from typing import Annotated, Literal, Optional

from mla_planner.core.files import Checked, Flag, NonNegInt, PosInt
from mla_planner.specs.attention.kinds import KINDS, foreign_field, kind_named

# Plausible sizes (far above any model: DeepSeek-V3 hidden 7,168, 256 experts, 128 heads): a larger one is not a
# model, and is refused before its parameters are counted.
Dim = Annotated[int, Checked(strict=True, gt=0, le=2**20)]
Width = Annotated[int, Checked(strict=True, gt=0, le=2**16)]          # heads, experts, groups
Width0 = Annotated[int, Checked(strict=True, ge=0, le=2**16)]
MAX_LAYERS = 4096     # far above any model (GLM-5: 78); the planner walks every layer, so 1e9 would never end
DSPARK_LAYERS = 3     # DSpark draft decoder layers when the config names none (vLLM 0.33.0 deepseek_v4/nvidia/dspark.py)
WeightDtype = Literal["bf16", "fp8", "int4", "int8", "nvfp4", "mxfp4"]
# What pydantic's validation makes of a file's values, done for a spec built directly (specs/builtin.py):
TUPLE_FIELDS = ("weight_block_size", "unquantized_modules", "compress_ratios",   # YAML and JSON give lists
                "dspark_target_layer_ids")
FLOAT_FIELDS = ("rms_norm_eps", "rope_theta")                  # `rope_theta: 10000` is an int in YAML


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    __pydantic_config__ = {"extra": "forbid"}     # read by pydantic when it validates a file into the spec

    # identity
    name: Annotated[str, Checked(min_length=1)]
    hf_id: Optional[str] = None
    model_type: Optional[str] = None              # config.json's; engines key some defaults on it (GLM's KV)
    config_format: Literal["hf", "mistral"] = "hf"   # a Hugging Face config.json, or Mistral's params.json
    attention: str = "mla"                        # an attention kind (specs/attention/kinds.py)
    # trunk
    hidden_size: Dim
    num_hidden_layers: Annotated[int, Checked(strict=True, gt=0, le=MAX_LAYERS)]
    num_attention_heads: Width
    num_key_value_heads: Optional[Width] = None
    vocab_size: Annotated[int, Checked(strict=True, gt=0, le=2**25)]
    tie_word_embeddings: Flag = False
    max_position_embeddings: PosInt
    rms_norm_eps: Annotated[float, Checked(gt=0, allow_inf_nan=False)] = 1e-6
    # mla
    q_lora_rank: Optional[Dim] = None
    kv_lora_rank: Optional[Dim] = None
    qk_nope_head_dim: Optional[Dim] = None
    qk_rope_head_dim: Optional[Dim] = None
    v_head_dim: Optional[Dim] = None
    # DeepSeek Sparse Attention's lightning indexer (attention: mla-dsa; DeepSeek-V3.2 config.json)
    index_n_heads: Optional[Width] = None
    index_head_dim: Optional[Dim] = None
    index_topk: Optional[PosInt] = None
    index_topk_freq: Optional[PosInt] = None         # GLM-5.2 IndexCache: an indexer every index_topk_freq layers,
    index_skip_topk_offset: Optional[PosInt] = None  # counted from this offset; the others reuse the top-k
    index_topk_pattern: Optional[Annotated[str, Checked(pattern=r"^[FS]+$")]] = None   # or per layer: F has one
    # DeepSeek-V4 compressed hybrid attention (attention: csa-hca; its config.json keys): a ratio per layer (0
    # window only, 4 CSA with the indexer above, 128 HCA; entries past num_hidden_layers are MTP/draft layers),
    # the sliding window every layer keeps, the grouped output projection, hyper-connection streams, and the
    # first layers routed by a token-id table instead of a gate
    compress_ratios: Optional[tuple[NonNegInt, ...]] = None
    sliding_window: Optional[PosInt] = None
    o_groups: Optional[Width] = None
    o_lora_rank: Optional[Dim] = None
    hc_mult: Optional[Width] = None
    num_hash_layers: Optional[NonNegInt] = None
    # gqa (and the KV row width of csa-hca)
    head_dim: Optional[Dim] = None
    attention_bias: Flag = False
    # ffn / moe
    intermediate_size: Optional[Dim] = None    # the dense FFN's; none in a model without dense layers (V4)
    first_k_dense_replace: NonNegInt = 0
    moe_intermediate_size: Optional[Dim] = None
    n_routed_experts: Width0 = 0
    n_shared_experts: Width0 = 0
    num_experts_per_tok: Width0 = 0
    topk_method: Optional[str] = None
    # mtp
    num_nextn_predict_layers: NonNegInt = 0
    # a DSpark draft shipped beside the model (DeepSeek-V4 -0731 and later): tokens it drafts per step, the target
    # layers it reads, its Markov head's rank; its layer count is `dspark_layers` (vLLM's default 3)
    dspark_block_size: Optional[PosInt] = None
    dspark_target_layer_ids: Optional[tuple[NonNegInt, ...]] = None
    dspark_markov_rank: Optional[PosInt] = None
    # a vision encoder beside the text model (multimodal checkpoints: Kimi-K2.5), bf16 (specs/vision.py)
    vision_params: Annotated[int, Checked(strict=True, ge=0, le=10**13)] = 0     # parameters, not a small count
    vision_layers: Optional[PosInt] = None
    vision_hidden_size: Optional[Dim] = None
    vision_patch_size: Optional[Width] = None      # MoonViT's image geometry (served with images: specs/vision.py)
    vision_merge: Optional[Width] = None
    vision_heads: Optional[Width] = None
    # rope
    rope_theta: Annotated[float, Checked(gt=0, allow_inf_nan=False)] = 10000.0
    rope_scaling: Optional[dict] = None   # a flat mapping of the config's scalars (yarn's factor, ...): rope_problem
    # weights as stored in the checkpoint
    weight_dtype: WeightDtype = "bf16"
    expert_weight_dtype: Optional[WeightDtype] = None
    weight_block_size: tuple[PosInt, PosInt] = (128, 128)
    int4_group_size: PosInt = 32
    int4_zero_point: Flag = False                 # AWQ: a 4-bit zero per group besides the scale
    unquantized_modules: tuple[str, ...] = ()     # HF modules a quantized checkpoint keeps bf16: AWQ
                                                  # modules_to_not_convert substrings, compressed-tensors `ignore`
                                                  # (names, "re:" regexes), ModelOpt exclude_modules (wildcards)
    int8_block: Flag = False                      # int8 with weight_block_size scales (blockwise_int8), else one
                                                  # fp32 scale per output channel (w8a8_int8)

    def __post_init__(self) -> None:
        for name in TUPLE_FIELDS:
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in FLOAT_FIELDS:
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.attention not in KINDS:   # a kind specs.attention knows (mla, gqa, or one registered there)
            names = [repr(k) for k in KINDS]
            raise ValueError(f"attention: Input should be {', '.join(names[:-1])} or {names[-1]}")
        problem = rope_problem(self.rope_scaling) or foreign_field(self) or kind_named(self.attention).check(self)
        if problem:
            raise ValueError(problem)
        for pattern in self.unquantized_modules:
            if pattern.startswith("re:"):
                try:
                    re.compile(pattern[3:])
                except re.error as exc:
                    raise ValueError(f"unquantized_modules: {pattern!r} is not a valid regular expression ({exc})")
        if self.intermediate_size is None and (self.num_dense_layers or not self.is_moe):
            raise ValueError("intermediate_size is required: the model has dense FFN layers")
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise ValueError("first_k_dense_replace is larger than num_hidden_layers")
        if not self.n_routed_experts and (self.num_experts_per_tok or self.n_shared_experts):
            raise ValueError("num_experts_per_tok and n_shared_experts need n_routed_experts > 0")
        if self.n_routed_experts:
            if self.moe_intermediate_size is None:
                raise ValueError("moe_intermediate_size is required when n_routed_experts > 0")
            if not 1 <= self.num_experts_per_tok <= self.n_routed_experts:
                raise ValueError(f"num_experts_per_tok must be in 1..n_routed_experts={self.n_routed_experts}")

    def to_dict(self) -> dict:
        """The fields, as a spec file or `show --json` writes them."""
        return asdict(self)

    @cached_property
    def _content_hash(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __hash__(self) -> int:
        """Equal content, equal hash (the model functions memoise on the spec; rope_scaling is a dict)."""
        return self._content_hash

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    # ---- derived geometry (no arithmetic beyond the config) ----
    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_hidden_layers if not self.is_moe else self.first_k_dense_replace

    @property
    def num_moe_layers(self) -> int:
        return self.num_hidden_layers - self.num_dense_layers

    def dense_layers_in(self, layers: range) -> int:
        """How many of `layers` (e.g. one pipeline stage's) are dense-FFN layers: the first
        first_k_dense_replace layers of the model are (HF config)."""
        return len(range(max(layers.start, 0), min(layers.stop, self.num_dense_layers)))

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def gqa_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def qk_head_dim(self) -> int:
        """Query/key head dim as the attention kind has it: MLA d_n + d_r (192 for DeepSeek), GQA head_dim."""
        return kind_named(self.attention).qk_head_dim(self)

    @property
    def latent_dim(self) -> int:
        """Cached elements per token per layer for MLA: kv_lora_rank + qk_rope_head_dim (576)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def expert_dtype(self) -> WeightDtype:
        return self.expert_weight_dtype or self.weight_dtype

    def block_scaled(self, dtype: str) -> bool:
        """Whether `dtype` weights carry weight_block_size scale blocks: fp8 (DeepSeek-V3's release) and
        blockwise int8 (meituan's DeepSeek-R1-Block-INT8)."""
        return dtype == "fp8" or (dtype == "int8" and self.int8_block)

    @property
    def drafter(self) -> Optional[str]:
        """The draft the checkpoint ships for speculative decoding: "mtp" (its MTP layer(s)), "dspark" (a DSpark
        draft: DeepSeek-V4-Flash-0731 and later), or None."""
        return "dspark" if self.dspark_block_size is not None else "mtp" if self.num_nextn_predict_layers else None

    @property
    def draft_layers(self) -> int:
        """Decoder layers the drafter runs: the MTP layers, or DSpark's (DSPARK_LAYERS)."""
        return {"mtp": self.num_nextn_predict_layers, "dspark": DSPARK_LAYERS}.get(self.drafter or "", 0)

    @property
    def default_draft_tokens(self) -> int:
        """Tokens drafted per step when not asked: DSpark's block (vLLM's num_speculative_tokens default for method
        dspark, config/speculative.py), else 1 (DeepSeek-V3's MTP depth)."""
        return self.dspark_block_size or 1

    @property
    def has_mtp_head(self) -> bool:
        """Whether the checkpoint ships an MTP layer to draft with: num_nextn_predict_layers, except where a DSpark
        draft is shipped instead (DeepSeek-V4-Flash-0731's config still says 1, but its 166.9 GB are the model
        and its DSpark draft with no MTP layer; vLLM runs it with method dspark only)."""
        return bool(self.num_nextn_predict_layers) and self.dspark_block_size is None

    @property
    def no_mtp_head_why(self) -> str:
        """Why there is no drafter, as a clause (no MTP layer in the config, no DSpark draft beside it)."""
        return " (num_nextn_predict_layers is 0 and no DSpark draft is named)"

    @property
    def has_gate_bias(self) -> bool:
        """noaux_tc routing keeps a per-expert score-correction bias (DeepSeek-V3 e_score_correction_bias)."""
        return self.topk_method == "noaux_tc"


def rope_problem(scaling: Optional[dict]) -> str:
    """rope_scaling holds names and scalars, or lists of numbers (a config's yarn / longrope fields): a NaN, an
    infinity or a nested mapping is not a RoPE setting ('' when it is fine)."""
    def finite(v) -> bool:
        return not isinstance(v, float) or math.isfinite(v)
    for key, value in (scaling or {}).items():
        scalars = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(v, (bool, int, float, str, type(None))) and finite(v) for v in scalars):
            return f"rope_scaling.{key}: expected a finite number, a name or a list of numbers, got {str(value)[:60]}"
    return ""
