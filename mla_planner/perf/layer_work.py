"""The work of one decoder layer on one GPU: HBM bytes and FLOPs per operation, for a batch under a layout.

Named operations (nanoGPT-sizing style), each with the bytes it moves and the FLOPs it does:
  attn.proj     q/kv down and up projections, W_UK/W_UV absorption, wo: 2 x tokens x the rank's
                attention matrix parameters FLOPs (every weight element is one MAC per token,
                docs/step-model.md section 2) and the rank's attention weight bytes (weights.py splits)
  attn.core     decode: the absorbed MLA core from specs.attention.cost (the functions `verify` uses); with MTP each
                sequence's s_q = q_len query tokens read its cache once (FlashMLA's s_q)
  attn.prefill  a prefill chunk: the naive/MHA form over the prefix plus K/V up-projection of the latent
  ffn.dense     dense SwiGLU FFN (first_k_dense_replace layers), split as the memory model splits it
  moe.gate      router: E x d bf16 weights, 2 x tokens x d x E FLOPs
  moe.shared    shared experts, split as the memory model splits them (`ffn_rows`: the rows they see)
  moe.experts   routed experts actually hit: E_local x (1 - (1 - k/E)^N) distinct experts per EP rank
                for N tokens in the MoE group (each token picks k of E uniformly; expectation of the
                number of distinct experts hit), each read once, split by moe_tp
Sources: DeepSeek-V3 inference/model.py; docs/step-model.md section 2; specs/attention/cost.py (FlashMLA test
formulas).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from mla_planner.core.units import ACT_BYTES
from mla_planner.engines.parallel import dense_tp
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.backends import backend
from mla_planner.engines.sparse import is_sparse, padded_heads
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout, weight_key, query_heads_per_rank
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.weights import Tensor, draft_inventory, inventory, stored_bytes


@dataclass(frozen=True)
class Op:
    name: str
    bytes: float
    flops: float
    kind: str = "gemm"     # "gemm" (weights-streaming), "moe" (the routed experts' grouped GEMMs) or "attention"
    precision: str = "bf16"   # the tensor cores it runs on: fp8 / int8 (W8A8 weights), else bf16

    @property
    def hbm_factor(self) -> str:
        """The efficiency factor of its memory side: the attention kernel's, the routed experts' (int4 weight-only
        experts have their own: the Marlin W4A16 kernel streams far below the FP8 grouped GEMMs), or the GEMMs'."""
        if self.kind == "moe":
            return "int4_moe_hbm_efficiency" if self.precision == "w4a16" else "moe_hbm_efficiency"
        return "attention_hbm_efficiency" if self.kind == "attention" else "hbm_efficiency"


@dataclass(frozen=True)
class Batch:
    """What one DP rank runs in one forward pass: `decode` sequences of `context` tokens (the new token
    included), each with `q_len` query tokens (1; with MTP the drafted tokens verified too), and optionally
    a prefill chunk of `prefill` tokens after `prefix` cached tokens."""
    decode: int
    context: int
    prefill: int = 0
    prefix: int = 0
    q_len: int = 1

    @property
    def decode_tokens(self) -> int:
        return self.decode * self.q_len

    @property
    def tokens(self) -> int:
        return self.decode_tokens + self.prefill


@dataclass(frozen=True)
class LayerWeights:
    """Per layer, per GPU: stored bytes and matrix parameters of each group under the layout's splits."""
    attn_bytes: float
    attn_params: float
    absorb_params: float     # wkv_b on this rank: W_UK / W_UV absorbed in decode, K/V up-projection in prefill
    dense_bytes: float
    dense_params: float
    shared_bytes: float
    shared_params: float
    gate_bytes: float
    expert_bytes: float      # one whole routed expert (w1, w2, w3), before the moe_tp split
    expert_params: float
    weight_precision: str    # tensor_precision of the dense weights / of the routed experts
    expert_precision: str


def _share(t: Tensor, layout: Layout, engine: str, dense_per_rank: bool) -> float:
    return 1.0 if t.split == "replicated" else 1.0 / dense_tp(layout, engine, t.group, dense_per_rank)


def ffn_rows(layout: Layout, engine: str, group: str, tokens: float, dense_per_rank: bool = False) -> float:
    """Rows one GPU's `group` (dense_ffn, shared_experts, lm_head) runs for a DP rank's `tokens`: split
    over the whole stage under SGLang's DP attention, it sees every DP rank's tokens, gathered first (dp x
    the tokens on 1/(tp x dp) of the weights); replicated while attention is tensor-parallel (SGLang's
    shared experts under DeepEP), the 1/tp of the tokens DeepEP dispatches from this rank; otherwise the
    DP rank's tokens."""
    tp = dense_tp(layout, engine, group, dense_per_rank)
    if tp == layout.stage_gpus and tp != layout.tp:
        return tokens * layout.dp
    if tp < layout.tp:
        return tokens / layout.tp
    return tokens


def layer_weights(spec: ModelSpec, layout: Layout, engine: str = "vllm", dense_per_rank: bool = False) -> LayerWeights:
    """Per-layer, per-GPU weight bytes and parameters from the weight inventory (weights.py), split as
    the memory model splits them. Memoised on what splits weights (tp, dp, ep), as the plan search asks
    for the same layer under many batches and knobs."""
    return _layer_weights(spec, weight_key(layout), engine, dense_per_rank)


@lru_cache(maxsize=4096)
def _layer_weights(spec: ModelSpec, layout: Layout, engine: str, dense_per_rank: bool) -> LayerWeights:
    sums: dict[str, list[float]] = {}
    for t in inventory(spec):
        if t.where != "layers":
            continue
        # a tensor on some layers only (GLM-5.2's indexers) is averaged over every layer, as the KV groups are
        copies = spec.num_hidden_layers if t.layers is not None else t.count
        per = stored_bytes(t, spec) / copies
        params = t.numel / copies if len(t.shape) == 2 else 0.0
        share = 1.0 if t.group == "routed_experts" else _share(t, layout, engine, dense_per_rank)
        acc = sums.setdefault(t.group, [0.0, 0.0])
        acc[0] += per * share
        acc[1] += params * share
    get = lambda g: sums.get(g, [0.0, 0.0])  # noqa: E731
    # DeepSeek-V4's hyper-connection mixes run on every token before attention and the FFN: priced with the
    # attention projections (replicated, small GEMMs)
    hc = get("hyper_connections")
    sums["attention"] = [get("attention")[0] + hc[0], get("attention")[1] + hc[1]]
    per_head = attention_of(spec).absorb_params_per_head(spec)
    absorb = spec.num_attention_heads * per_head / layout.tp if per_head else 0.0
    return LayerWeights(attn_bytes=get("attention")[0], attn_params=get("attention")[1], absorb_params=absorb,
                        dense_bytes=get("dense_ffn")[0], dense_params=get("dense_ffn")[1],
                        shared_bytes=get("shared_experts")[0], shared_params=get("shared_experts")[1],
                        gate_bytes=get("gate")[0], expert_bytes=get("routed_experts")[0],
                        expert_params=get("routed_experts")[1],
                        weight_precision=tensor_precision(spec.weight_dtype),
                        expert_precision=tensor_precision(spec.expert_dtype))


def tensor_precision(dtype: str) -> str:
    """The GEMM precision of weights stored as `dtype`: fp8 and int8 checkpoints run W8A8 (activations quantized
    per token: vLLM/SGLang fp8.py, SGLang w8a8_int8.py and blockwise_int8.py); NVFP4 runs W4A4 on FP4 tensor
    cores where the GPU has them (GPU.tensor_flops_per_s falls back to bf16 elsewhere: vLLM 0.33.0 runs it
    weight-only through Marlin below Blackwell, kernels/linear/nvfp4/marlin.py); MXFP4 (DeepSeek-V4's experts) runs
    with FP8 activations on Blackwell (the mixed-input MMA, at the FP8 rate) and weight-only elsewhere; int4 is
    weight-only (Marlin / W4A16: "w4a16"), bf16 math at a lower HBM efficiency for the experts (perf.step)."""
    return {"fp8": "fp8", "int8": "int8", "nvfp4": "fp4", "mxfp4": "w4a8", "int4": "w4a16"}.get(dtype, "bf16")


def experts_hit(local_experts: float, n_experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts hit among `local_experts` when `tokens` tokens each pick `top_k` of
    `n_experts` uniformly: local x (1 - (1 - k/E)^tokens) (each expert is missed by one token with
    probability 1 - k/E)."""
    if tokens <= 0:
        return 0.0
    return local_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)


def attention_ops(spec: ModelSpec, layout: Layout, knobs: Knobs, batch: Batch, w: LayerWeights) -> list[Op]:
    """attn.proj, attn.core and attn.prefill for this rank (heads split by TP; KV layout as in layout.py).
    Prefill tokens skip the W_UK / W_UV absorption (wkv_b up-projects the cached latent instead, counted
    in attn.prefill), so their projection FLOPs leave wkv_b out."""
    flops = 2.0 * (batch.decode_tokens * w.attn_params + batch.prefill * (w.attn_params - w.absorb_params))
    proj = Op("attn.proj", w.attn_bytes, flops, "gemm", w.weight_precision)
    ops = [proj]
    if batch.decode:
        ops.append(_decode_core(spec, layout, knobs, batch))
    if batch.prefill:
        ops.append(_prefill_core(spec, layout, knobs, batch))
    return ops


def _decode_core(spec: ModelSpec, layout: Layout, knobs: Knobs, batch: Batch) -> Op:
    """The attention kind's decode core (specs/attention: MLA's absorbed form over the latent, GQA's per-head
    K/V over the rank's KV heads, DSA's top-k and index scan with the heads its sparse kernel pads to)."""
    kind, extra = attention_of(spec), {}
    heads = query_heads_per_rank(spec, layout)
    if (is_sparse(spec) or is_compressed(spec)) and knobs.attention_backend:
        extra["padded_heads"] = padded_heads(knobs.engine, knobs.attention_backend, heads, is_compressed(spec))
    elif kind.backend_family == "mla" and knobs.attention_backend:
        extra["padded_heads"] = backend(knobs.engine, knobs.attention_backend).padded_heads(heads)
    if is_compressed(spec):
        extra["index_cache"] = knobs.indexer_kv_dtype
    c = kind.decode_core(spec, layout, knobs.kv_cache_dtype, batch.decode, batch.context, batch.q_len, **extra)
    return Op("attn.core", c.bytes, c.flops, "attention")


def _prefill_core(spec: ModelSpec, layout: Layout, knobs: Knobs, batch: Batch) -> Op:
    """A prefill chunk of `batch.prefill` tokens after `batch.prefix` cached ones, as the attention kind
    prices it (MLA: the naive form after up-projecting every cached latent; docs/step-model.md section 2)."""
    extra = {"index_cache": knobs.indexer_kv_dtype} if is_compressed(spec) else {}
    c = attention_of(spec).prefill_core(spec, layout, knobs.kv_cache_dtype, batch.prefill, batch.prefix, **extra)
    return Op("attn.prefill", c.bytes, c.flops, "attention")


def ffn_ops(spec: ModelSpec, layout: Layout, batch: Batch, w: LayerWeights, moe: bool,
            engine: str = "vllm", dense_per_rank: bool = False) -> list[Op]:
    """ffn.dense for a dense layer; moe.gate, moe.shared and moe.experts for an MoE layer."""
    n = batch.tokens
    if not moe:
        rows = ffn_rows(layout, engine, "dense_ffn", n, dense_per_rank)
        return [Op("ffn.dense", w.dense_bytes, 2.0 * rows * w.dense_params, "gemm", w.weight_precision)]
    E, k = spec.n_routed_experts, spec.num_experts_per_tok
    ops = [Op("moe.gate", w.gate_bytes, 2.0 * n * spec.hidden_size * E)]
    if w.shared_bytes:
        rows = ffn_rows(layout, engine, "shared_experts", n)
        ops.append(Op("moe.shared", w.shared_bytes, 2.0 * rows * w.shared_params, "gemm", w.weight_precision))
    group_tokens = batch.decode_tokens * layout.dp + batch.prefill   # distinct tokens entering the MoE group
    hit = experts_hit(E / layout.ep, E, k, group_tokens)
    routed_pairs = group_tokens * k / layout.ep                # token-expert pairs landing on this EP rank
    ops.append(Op("moe.experts", hit * w.expert_bytes / layout.moe_tp,
                  2.0 * routed_pairs * w.expert_params / layout.moe_tp, "moe", w.expert_precision))
    return ops


def head_ops(spec: ModelSpec, layout: Layout, tokens: int, engine: str = "vllm",
             dense_per_rank: bool = False) -> list[Op]:
    """lm_head on the last stage: vocab-parallel V x d bf16 split as the memory model splits it
    (engines.parallel.dense_tp: the TP group; SGLang under DP attention: tp x dp, unless `dense_per_rank`);
    logits only for decoding rows (split over tp x dp, the rows of all dp ranks are gathered first)."""
    V, d = spec.vocab_size, spec.hidden_size
    tp = dense_tp(layout, engine, "lm_head", dense_per_rank)
    rows = ffn_rows(layout, engine, "lm_head", tokens, dense_per_rank)
    return [Op("lm_head", V * d * ACT_BYTES / tp, 2.0 * rows * V * d / tp)]


def mtp_proj_ops(spec: ModelSpec, batch: Batch) -> list[Op]:
    """The drafter's own projections, besides its decoder layers (priced as more layers) and the shared lm_head,
    over every token it runs on: the MTP module's eh_proj [d, 2d]; DSpark's main_proj, context_wkv_proj and its
    Markov head's two [vocab, rank] tables (weights.draft_inventory), replicated."""
    return [Op(name, nbytes, 2.0 * batch.tokens * params, "gemm", precision)
            for name, nbytes, params, precision in _draft_projections(spec)]


DRAFT_PROJECTIONS = ("mtp.eh_proj", "dspark.main_proj", "dspark.context_wkv_proj", "dspark.markov")


@lru_cache(maxsize=64)
def _draft_projections(spec: ModelSpec) -> tuple:
    """(name, bytes, parameters, GEMM precision) of each drafter projection, read from the inventory once per model."""
    return tuple((t.name, stored_bytes(t, spec) / (1 if t.name == "dspark.markov" else t.count),
                  t.numel / (1 if t.name == "dspark.markov" else t.count), tensor_precision(t.dtype))
                 for t in draft_inventory(spec) if t.name in DRAFT_PROJECTIONS)
