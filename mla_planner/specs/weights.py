"""The weight inventory: every stored tensor of a model, with how tensor/expert parallelism splits it.

Table-driven in the manner of gpt-fast's `tp.py`: each entry names its shape, how many copies the
model has (one per layer), the group it is reported under, and its split under parallelism:
  replicated  every TP rank holds all of it (wq_a, wkv_a, norms, the router gate)
  column      output rows split by TP (wq_b, wkv_b, w1/w3; Megatron column-parallel)
  row         input columns split by TP (wo, w2; row-parallel, followed by an all-reduce)
  expert      routed experts: split by EP, and each expert by the MoE TP degree
  vocab       embedding / lm_head rows split over TP (vocab-parallel)
Shapes follow DeepSeek-V3 `inference/model.py` and the HF checkpoints (e.g.
https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json). MoE FFN parameters are SwiGLU:
w1, w3 [I, d] column and w2 [d, I] row.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from math import ceil, prod
from typing import Optional

from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.model import DSPARK_LAYERS, ModelSpec

Split = str  # "replicated" | "column" | "row" | "expert_column" | "expert_row" | "vocab"


@dataclass(frozen=True)
class Tensor:
    name: str              # e.g. "attn.wkv_b"
    group: str             # reporting group, e.g. "attention", "routed_experts"
    shape: tuple[int, ...]
    count: int             # copies in the model (layers x experts)
    split: Split
    dtype: str             # storage dtype: bf16, fp8, int4, nvfp4, mxfp4, fp32, int32 (lookup tables)
    where: str = "layers"  # "first" (embedding, first PP stage), "last" (lm_head), "layers", "mtp"
    layers: Optional[tuple[int, ...]] = None   # where "layers": the decoder layers that have it (None: all)

    @property
    def numel(self) -> int:
        return prod(self.shape) * self.count


def bytes_of(t: Tensor, block: tuple[int, int] = (128, 128), int4_group: int = 32, int4_zero_point: bool = False,
             int8_block: bool = False) -> float:
    """Stored bytes of a tensor including quantisation scales.

    fp8 block-scaled (DeepSeek-V3 `quantization_config.weight_block_size` 128x128): one fp32
    `weight_scale_inv` per block, 1 + 4*ceil(r/128)*ceil(c/128)/(r*c) bytes/param (DeepSeek-V3 README_WEIGHTS.md).
    int4 group-quantised (compressed-tensors experts, Kimi-K2-Thinking style; AutoAWQ): 0.5 B/param plus one
    16-bit scale per `int4_group` values, and with `int4_zero_point` (AWQ's `qzeros`, packed 8 to an int32)
    a 4-bit zero per group too. int8 W8A8 (meituan's DeepSeek-R1 INT8 releases, SGLang w8a8_int8.py /
    blockwise_int8.py): 1 B/param plus an fp32 scale per output channel (`weight_scale` [rows, 1]), or with
    `int8_block` one per block as fp8. NVFP4 (ModelOpt, compressed-tensors nvfp4-pack-quantized): e2m1 two
    to a byte, an e4m3 scale per 16 values and two fp32 per tensor (ModelOpt's `weight_scale_2` and
    `input_scale`; compressed-tensors' global scales); MXFP4: e2m1 and one e8m0 byte per 32 values (vLLM 0.33.0
    layers/quantization/modelopt.py, mxfp4.py). bf16 2 B, fp32 4 B.
    """
    n = prod(t.shape)
    if (t.dtype == "fp8" or (t.dtype == "int8" and int8_block)) and len(t.shape) == 2:
        per = n + 4 * ceil(t.shape[0] / block[0]) * ceil(t.shape[1] / block[1])
    elif t.dtype == "int8":
        per = n + 4 * (t.shape[0] if len(t.shape) == 2 else 1)
    elif t.dtype == "int4":
        per = n / 2 + (2.5 if int4_zero_point else 2) * ceil(n / int4_group)
    elif t.dtype == "nvfp4":
        per = n / 2 + ceil(n / NVFP4_GROUP) + 8
    elif t.dtype == "mxfp4":
        per = n / 2 + ceil(n / MXFP4_GROUP)
    else:
        per = n * {"bf16": 2, "fp8": 1, "fp32": 4, "int32": 4}[t.dtype]
    return per * t.count


NVFP4_GROUP, MXFP4_GROUP = 16, 32     # values per scale


def stored_bytes(t: Tensor, spec: ModelSpec) -> float:
    """`bytes_of` with the checkpoint's own quantisation parameters."""
    return bytes_of(t, spec.weight_block_size, spec.int4_group_size, spec.int4_zero_point, spec.int8_block)


# Hugging Face module names (DeepSeek-V2/V3 modeling code) of the linear layers AWQ quantizes, as the
# engines match `modules_to_not_convert` against them (a substring of "model.layers.<i>.<module>";
# routed experts by their fused module "mlp.experts").
HF_MODULES = {"attn.wq_a": "self_attn.q_a_proj", "attn.wq_b": "self_attn.q_b_proj", "attn.wq": "self_attn.q_proj",
              "attn.wkv_a": "self_attn.kv_a_proj_with_mqa", "attn.wkv_b": "self_attn.kv_b_proj",
              "attn.wo": "self_attn.o_proj", "attn.q_proj": "self_attn.q_proj", "attn.k_proj": "self_attn.k_proj",
              "attn.v_proj": "self_attn.v_proj", "attn.o_proj": "self_attn.o_proj",
              "dense_ffn.w1": "mlp.gate_proj", "dense_ffn.w3": "mlp.up_proj", "dense_ffn.w2": "mlp.down_proj",
              "shared_experts.w1": "mlp.shared_experts.gate_proj", "shared_experts.w3": "mlp.shared_experts.up_proj",
              "shared_experts.w2": "mlp.shared_experts.down_proj", "routed_experts.w1": "mlp.experts",
              "routed_experts.w3": "mlp.experts", "routed_experts.w2": "mlp.experts"}


def module_skipped(skip, module: str, layers) -> bool:
    """Whether an entry of SKIP names `module` in any of `layers`, matched against its full name
    "model.layers.<i>.<module>" as the engines match it: "re:<regex>" as a compressed-tensors `ignore` regex
    (re.match), a pattern with "*" as a ModelOpt `exclude_modules` wildcard (fnmatch), anything else as a
    substring (AWQ's `modules_to_not_convert`, vLLM `is_layer_skipped`). A routed-expert module ("mlp.experts")
    also matches through its per-expert names (mlp.experts.0.gate_proj, ...), which regexes and wildcards name.
    Memoised: the memory model asks for every tensor of every stage it prices."""
    return _module_skipped(tuple(skip), module, layers if isinstance(layers, range) else tuple(layers))


@lru_cache(maxsize=8192)
def _module_skipped(skip: tuple[str, ...], module: str, layers) -> bool:
    names = [module] + ([f"{module}.0.{p}" for p in ("gate_proj", "up_proj", "down_proj")]
                        if module.endswith("experts") else [])
    for i in layers:
        for k, name in enumerate(f"model.layers.{i}.{n}" for n in names):
            for s in skip:
                if s.startswith("re:"):
                    hit = re.match(s[3:], name) is not None
                elif "*" in s:
                    hit = fnmatch.fnmatchcase(name, s)
                else:
                    hit = k == 0 and s in name      # a substring names the (fused) module itself
                if hit:
                    return True
    return False


QUANTIZED = ("int4", "int8", "fp8", "nvfp4", "mxfp4")


def _keep_unquantized(spec: ModelSpec, tensors: list[Tensor], layers: dict[str, range]) -> list[Tensor]:
    """Quantized tensors whose module the checkpoint leaves unquantized (`unquantized_modules`, matched as
    `module_skipped` does) stay bf16. A name that picks out some layers only (e.g. "model.layers.0.") keeps
    the module bf16 in every layer: the memory model errs towards more bytes."""
    if not spec.unquantized_modules:
        return tensors
    out = []
    for t in tensors:
        module = HF_MODULES.get(t.name)
        if t.dtype in QUANTIZED and module:
            if module_skipped(spec.unquantized_modules, module, layers.get(t.group, layers["attention"])):
                t = replace(t, dtype="bf16")
        out.append(t)
    return out


@lru_cache(maxsize=256)
def dtype_of(spec: ModelSpec, name: str) -> str | None:
    """Storage dtype of the main model's tensor `name` (None if it has none)."""
    return next((t.dtype for t in inventory(spec) if t.name == name), None)


def _attention(spec: ModelSpec, layers: int, dt: str, where: str) -> list[Tensor]:
    """The attention kind's projections (specs/attention), in the checkpoint's dtype (norms and biases bf16);
    one a kind has on some decoder layers only (GLM-5.2's indexers) counts those, and every MTP layer."""
    out = []
    for p in attention_of(spec).projections(spec):
        if where == "mtp" and not p.mtp:
            continue
        some = p.layers if where == "layers" else None
        out.append(Tensor(p.name, "attention", p.shape, layers if some is None else len(some), p.split,
                          p.dtype or ("bf16" if p.bf16 else dt), where, some))
    return out


def _ffn(group: str, d: int, inter: int, count: int, dt: str, where: str, expert: bool = False) -> list[Tensor]:
    col, row = ("expert_column", "expert_row") if expert else ("column", "row")
    return [Tensor(f"{group}.w1", group, (inter, d), count, col, dt, where),
            Tensor(f"{group}.w3", group, (inter, d), count, col, dt, where),
            Tensor(f"{group}.w2", group, (d, inter), count, row, dt, where)]


def _moe(spec: ModelSpec, layers: int, where: str) -> list[Tensor]:
    d, E, inter = spec.hidden_size, spec.n_routed_experts, spec.moe_intermediate_size
    out = _ffn("routed_experts", d, inter, layers * E, spec.expert_dtype, where, expert=True)
    if spec.n_shared_experts:
        out += _ffn("shared_experts", d, inter * spec.n_shared_experts, layers, spec.weight_dtype, where)
    out.append(Tensor("gate.weight", "gate", (E, d), layers, "replicated", "bf16", where))
    hashed = min(spec.num_hash_layers or 0, layers) if where == "layers" else 0
    if spec.has_gate_bias and layers > hashed:
        out.append(Tensor("gate.bias", "gate", (E,), layers - hashed, "replicated", "fp32", where))
    if hashed:   # DeepSeek-V4's first layers route by token id through a frozen table, without the bias
        out.append(Tensor("gate.tid2eid", "gate", (spec.vocab_size, spec.num_experts_per_tok), hashed, "replicated",
                          "int32", where, tuple(range(hashed))))
    return out


def _hyper_connections(spec: ModelSpec, layers: int, where: str) -> list[Tensor]:
    """DeepSeek-V4's hyper-connections (`hc_mult` = m residual streams; vLLM 0.33.0 `models/deepseek_v4/nvidia/
    model.py`): per layer, before attention and before the FFN, a mixing projection [(2 + m) m, m d] with its bias
    [(2 + m) m] and 3 scales, all fp32 and replicated."""
    if not spec.hc_mult:
        return []
    m, d = spec.hc_mult, spec.hidden_size
    mix = (2 + m) * m
    return [Tensor("hc.fn", "hyper_connections", (mix, m * d), 2 * layers, "replicated", "fp32", where),
            Tensor("hc.base", "hyper_connections", (mix,), 2 * layers, "replicated", "fp32", where),
            Tensor("hc.scale", "hyper_connections", (3,), 2 * layers, "replicated", "fp32", where)]


def _hc_head(spec: ModelSpec, where: str) -> list[Tensor]:
    """The hyper-connection head that folds the m streams back into one before the norm and lm_head (fp32)."""
    if not spec.hc_mult:
        return []
    m, d = spec.hc_mult, spec.hidden_size
    return [Tensor("hc_head", "hyper_connections", (m * m * d + m + 1,), 1, "replicated", "fp32", where)]


def _decoder_layers(spec: ModelSpec, n_dense: int, n_moe: int, where: str) -> list[Tensor]:
    dt, d, n = spec.weight_dtype, spec.hidden_size, n_dense + n_moe
    out = _attention(spec, n, dt, where) + _hyper_connections(spec, n, where)
    out.append(Tensor("norms.layer", "norms", (d,), 2 * n, "replicated", "bf16", where))
    if n_dense:
        out += _ffn("dense_ffn", d, spec.intermediate_size, n_dense, dt, where)
    if n_moe:
        out += _moe(spec, n_moe, where)
    return out


def inventory(spec: ModelSpec) -> list[Tensor]:
    """Every tensor of the main model (MTP excluded; see `mtp_inventory`)."""
    d, V = spec.hidden_size, spec.vocab_size
    L, k = spec.num_hidden_layers, spec.num_dense_layers
    out = [Tensor("embed_tokens", "embedding", (V, d), 1, "vocab", "bf16", "first")]
    out += _keep_unquantized(spec, _decoder_layers(spec, k, spec.num_moe_layers, "layers"),
                             {"attention": range(L), "dense_ffn": range(k), "shared_experts": range(k, L),
                              "routed_experts": range(k, L)})
    out.append(Tensor("norm", "norms", (d,), 1, "replicated", "bf16", "last"))
    out += _hc_head(spec, "last")
    if not spec.tie_word_embeddings:
        out.append(Tensor("lm_head", "lm_head", (V, d), 1, "vocab", "bf16", "last"))
    return out


def mtp_inventory(spec: ModelSpec) -> list[Tensor]:
    """The multi-token-prediction module(s) (`num_nextn_predict_layers`): per module one full
    decoder layer (MoE when the model is MoE) plus enorm, hnorm, eh_proj [d, 2d] and the shared-head
    norm; embedding and head are shared with the main model (DeepSeek-V3 README_WEIGHTS.md)."""
    n, d = spec.num_nextn_predict_layers if spec.has_mtp_head else 0, spec.hidden_size
    if not n:
        return []
    moe, L = spec.is_moe, spec.num_hidden_layers
    layers = _keep_unquantized(spec, _decoder_layers(spec, 0 if moe else n, n if moe else 0, "mtp"),
                               {"attention": range(L, L + n)})
    out = [t.__class__(t.name, "mtp", t.shape, t.count, t.split, t.dtype, "mtp") for t in layers]
    # eh_proj is a plain nn.Linear in the engines' MTP modules (vLLM models/deepseek_mtp.py, SGLang
    # models/deepseek_nextn.py): never int4-quantized, nor named by meituan's per-channel INT8 conversion (it
    # quantizes q/kv projections, o_proj and the MLPs by name), nor an FP4 one (4-bit formats quantize the
    # decoder's linear layers); block INT8 follows the FP8 release's tensors
    eh_dtype = "bf16" if spec.weight_dtype in ("int4", "nvfp4", "mxfp4") or \
        spec.weight_dtype == "int8" and not spec.int8_block else spec.weight_dtype
    out += [Tensor("mtp.eh_proj", "mtp", (d, 2 * d), n, "replicated", eh_dtype, "mtp"),
            Tensor("mtp.norms", "mtp", (d,), 3 * n, "replicated", "bf16", "mtp")]
    return out + [replace(t, group="mtp", count=n) for t in _hc_head(spec, "mtp")]


DSPARK_CONFIDENCE = 1


def dspark_inventory(spec: ModelSpec) -> list[Tensor]:
    """A DSpark draft shipped beside the model (DeepSeek-V4 -0731 and later; vLLM 0.33.0 `models/deepseek_v4/nvidia/
    dspark.py`): DSPARK_LAYERS window-only decoder layers with full MoE (as the MTP layer's), main_proj from the
    target layers it reads [d, len(dspark_target_layer_ids) d] and context_wkv_proj [3 head_dim, d] in the
    checkpoint's dtype, the Markov head's two [vocab, rank] bf16 tables, a confidence head [1, d + rank] in fp32,
    two norms and the hyper-connection head; embedding and lm_head are the target's."""
    if spec.dspark_block_size is None:
        return []
    n, d, V = DSPARK_LAYERS, spec.hidden_size, spec.vocab_size
    rank, reads = spec.dspark_markov_rank or 0, len(spec.dspark_target_layer_ids or ()) or n
    moe, L = spec.is_moe, spec.num_hidden_layers
    layers = _keep_unquantized(spec, _decoder_layers(spec, 0 if moe else n, n if moe else 0, "mtp"),
                               {"attention": range(L, L + n)})
    out = [replace(t, group="dspark") for t in layers]
    out += [Tensor("dspark.main_proj", "dspark", (d, reads * d), 1, "replicated", spec.weight_dtype, "mtp"),
            Tensor("dspark.context_wkv_proj", "dspark", (3 * (spec.head_dim or d), d), 1, "replicated",
                   spec.weight_dtype, "mtp"),
            Tensor("dspark.norms", "dspark", (d,), 2, "replicated", "bf16", "mtp")]
    if rank:
        out += [Tensor("dspark.markov", "dspark", (V, rank), 2, "replicated", "bf16", "mtp"),
                Tensor("dspark.confidence", "dspark", (DSPARK_CONFIDENCE, d + rank), 1, "replicated", "fp32", "mtp")]
    return out + [replace(t, group="dspark") for t in _hc_head(spec, "mtp")]


def draft_inventory(spec: ModelSpec) -> list[Tensor]:
    """The drafter's tensors, held on the last stage when speculative decoding runs: the MTP layer(s) or the DSpark
    draft (`spec.drafter`)."""
    return dspark_inventory(spec) if spec.drafter == "dspark" else mtp_inventory(spec)


def vision_inventory(spec: ModelSpec) -> list[Tensor]:
    """A multimodal checkpoint's vision encoder and projector (specs/vision.py), bf16, counted apart from the
    text model: whole on every GPU of the first stage where an engine builds it (SGLang's Kimi-K2.5 replicates
    its MLP and projector and splits only the attention: up to the whole per GPU, the bytes erring high)."""
    if not spec.vision_params:
        return []
    return [Tensor("vision.encoder", "vision", (spec.vision_params,), 1, "replicated", "bf16", "first")]
