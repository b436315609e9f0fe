"""DeepSeek Sparse Attention (DSA: DeepSeek-V3.2, deepseek-ai/DeepSeek-V3.2-Exp `inference/model.py`; GLM-5):
MLA whose decode attends only to the top-k cached tokens a lightning indexer selects. Beside the latent every
layer caches one index key per token: index_head_dim fp8 values and one fp32 scale per 128 of them (132 B for
V3.2; vLLM `model_executor/models/deepseek_v2.py` Indexer and its cache spec, v0.33.0). The indexer scores every cached token (its keys
read, 2 x index heads x index_head_dim FLOPs each, in FP8), then the MLA core reads min(context, top-k)
latents. The latent row is 1152 B in bf16, 576 B in plain fp8 (vLLM's FlashInfer sparse backend, SGLang's trtllm)
and 656 B in FlashMLA's fp8-with-scale layout (`fp8_ds_mla`, which vLLM's FLASHMLA_SPARSE turns fp8 into); which
one an engine uses on a GPU is an engine fact (docs/dsa-engines.md).

GLM-5.2 keeps an indexer on some layers only (IndexCache): the others reuse the previous layer's top-k and
have neither indexer weights nor an index-key cache. Which layers, both engines read from config.json alike
(vLLM 0.33.0 `models/deepseek_v32/attention.py`, SGLang 0.5.23 `srt/configs/model_config.py`
`dsa_layer_skips_topk`): `index_topk_pattern` ("F" keeps one, "S" skips) when given, else layer l skips
when max(l - index_skip_topk_offset + 1, 0) % index_topk_freq != 0 (offset 2 when absent, freq 1: every
layer). An MTP layer always has its indexer (vLLM `is_mtp_layer`)."""

from __future__ import annotations

from typing import Optional

from mla_planner.specs.attention.base import CoreCost, KVGroup, Projection
from mla_planner.specs.attention.mla import MLA

INDEX_FIELDS = ("index_n_heads", "index_head_dim", "index_topk")   # config.json keys of the V3.2 indexer
SHARING_FIELDS = ("index_topk_freq", "index_skip_topk_offset", "index_topk_pattern")   # GLM-5.2's IndexCache
DEFAULT_SKIP_OFFSET = 2        # both engines, when index_skip_topk_offset is absent
INDEX_SCALE_BYTES = 4          # one fp32 scale per INDEX_QUANT_BLOCK index-key values
INDEX_QUANT_BLOCK = 128


def index_key_bytes(spec) -> int:
    """Bytes of one token's index key in one layer: index_head_dim fp8 values + their fp32 block scales."""
    return spec.index_head_dim + INDEX_SCALE_BYTES * -(-spec.index_head_dim // INDEX_QUANT_BLOCK)


def indexer_layers(spec) -> Optional[tuple[int, ...]]:
    """The decoder layers (0-based) that keep an indexer, or None when every layer does."""
    layers = range(spec.num_hidden_layers)
    if spec.index_topk_pattern is not None:
        kept = tuple(i for i in layers if i >= len(spec.index_topk_pattern) or spec.index_topk_pattern[i] == "F")
    else:
        freq = spec.index_topk_freq or 1
        offset = spec.index_skip_topk_offset or DEFAULT_SKIP_OFFSET
        kept = tuple(i for i in layers if max(i - offset + 1, 0) % freq == 0)
    return None if len(kept) == spec.num_hidden_layers else kept


def index_scan(spec, requests: int, context: int, q_len: int) -> CoreCost:
    """One indexer layer's decode scan: every cached index key read (`index_key_bytes` each) and scored by every
    index head, 2 x index_n_heads x index_head_dim FLOPs per key and query token (vLLM 0.33.0
    `layers/sparse_attn_indexer.py`, in FP8)."""
    keys = requests * context
    return CoreCost(keys * index_key_bytes(spec), 2.0 * spec.index_n_heads * spec.index_head_dim * keys * q_len)


def indexer_share(spec) -> float:
    """The share of decoder layers that keep an indexer (1 for V3.2 and GLM-5; 21/78 for GLM-5.2)."""
    kept = indexer_layers(spec)
    return 1.0 if kept is None else len(kept) / spec.num_hidden_layers


class DSA(MLA):
    name = "mla-dsa"
    extra_fields = INDEX_FIELDS + SHARING_FIELDS
    backend_family = "mla-sparse"
    verify_kernel = True         # verify/sparse_kernel.py, timed by verify/sparse_bench.py
    not_modelled_in = ()

    def check(self, spec) -> str:
        missing = [f for f in INDEX_FIELDS if getattr(spec, f) is None]
        if missing:
            return f"{missing[0]} is required for DeepSeek Sparse Attention (attention: {self.name})"
        if spec.index_topk_pattern and spec.index_topk_pattern[0] == "S":
            return "index_topk_pattern skips layer 0's indexer, but layer 0 has no earlier top-k to reuse"
        return super().check(spec)

    def kv_groups(self, spec, kv_dtype: str, layout=None) -> tuple[KVGroup, ...]:
        """The latent (1152 B bf16, 576 B fp8, 656 B fp8_ds_mla) and the index keys, whole on every rank."""
        latent = super().kv_groups(spec, kv_dtype, layout)
        return latent + (KVGroup("index_keys", index_key_bytes(spec), layers=indexer_layers(spec)),)

    def layout_problems(self, spec, layout) -> list[str]:
        """A latent-sharded cache is not modelled for DSA. Under DCP both caches are split over the ranks as
        vLLM splits them (docs/dsa-engines.md section 2d); SGLang's replicated index keys are an engine fact
        (engines/layouts.py refuses its DSA under DCP)."""
        out = ["a latent-sharded cache is not modelled for DeepSeek Sparse Attention"] \
            if layout.kv_layout == "latent-sharded" else []
        return out + super().layout_problems(spec, layout)

    def decode_core(self, spec, layout, kv_dtype: str, requests: int, context: int, q_len: int,
                    padded_heads: Optional[int] = None) -> CoreCost:
        """The indexer scans every cached token (`index_scan`); the MLA core reads the top-k (`sparse_core`).
        Per layer on average: where only some layers keep an indexer, the scan is that share of it. Under DCP
        each rank scores its own 1/dcp of the index keys (vLLM merges the ranks' top-k) and attends to its share
        of the chosen latents with every rank's query heads (MLA's DCP core)."""
        core = self.sparse_core(spec, layout, kv_dtype, requests, context, q_len, padded_heads)
        scan = index_scan(spec, requests, context, q_len)
        share = indexer_share(spec) / layout.dcp
        return CoreCost(core.bytes + share * scan.bytes, core.flops + share * scan.flops)

    def sparse_core(self, spec, layout, kv_dtype: str, requests: int, context: int, q_len: int,
                    padded_heads: Optional[int] = None) -> CoreCost:
        """The MLA core over the top-k chosen latents (all of them below k). `padded_heads`: the query heads the
        engine's sparse kernel computes for this rank's (FlashMLA-sparse rounds them up to 64 or 128:
        engines/sparse.py), which multiplies the core's FLOPs, not its reads."""
        dense = super().decode_core(spec, layout, kv_dtype, requests, min(context, spec.index_topk), q_len)
        heads = spec.num_attention_heads // layout.tp * layout.dcp
        scale = max(padded_heads, heads) / heads if padded_heads else 1.0
        return CoreCost(dense.bytes, dense.flops * scale)

    def prefill_core(self, spec, layout, kv_dtype: str, chunk: int, prefix: int) -> CoreCost:
        """MLA's prefill plus the indexer scoring every (query, key) pair of the chunk, keys read once (per
        layer on average, as decode_core)."""
        base = super().prefill_core(spec, layout, kv_dtype, chunk, prefix)
        pairs = chunk * prefix + chunk * (chunk + 1) / 2
        share = indexer_share(spec)
        return CoreCost(base.bytes + share * (prefix + chunk) * index_key_bytes(spec),
                        base.flops + share * 2.0 * spec.index_n_heads * spec.index_head_dim * pairs)

    def projections(self, spec) -> list[Projection]:
        """MLA's, plus the indexer's (replicated on every rank): wq_b from the query's low-rank state, wk from
        the hidden state, the key LayerNorm (weight and bias), and weights_proj, kept unquantized; on the
        layers that keep an indexer."""
        d, h, dim, kept = spec.hidden_size, spec.index_n_heads, spec.index_head_dim, indexer_layers(spec)
        return super().projections(spec) + [
            Projection("attn.indexer.wq_b", (h * dim, spec.q_lora_rank), "replicated", layers=kept),
            Projection("attn.indexer.wk", (dim, d), "replicated", layers=kept),
            Projection("attn.indexer.k_norm", (2 * dim,), "replicated", True, kept),
            Projection("attn.indexer.weights_proj", (h, d), "replicated", True, kept)]
