"""DeepSeek Sparse Attention (DSA: DeepSeek-V3.2, deepseek-ai/DeepSeek-V3.2-Exp `inference/model.py`; GLM-5):
MLA whose decode attends only to the top-k cached tokens a lightning indexer selects. Beside the latent every
layer caches one index key per token: index_head_dim fp8 values and one fp32 scale per 128 of them (132 B for
V3.2; vLLM `model_executor/models/deepseek_v2.py` Indexer and its cache spec, v0.33.0). The indexer scores every cached token (its keys
read, 2 x index heads x index_head_dim FLOPs each, in FP8), then the MLA core reads min(context, top-k)
latents. The latent row is 1152 B in bf16, 576 B in plain fp8 (vLLM's FlashInfer sparse backend, SGLang's trtllm)
and 656 B in FlashMLA's fp8-with-scale layout (`fp8_ds_mla`, which vLLM's FLASHMLA_SPARSE turns fp8 into); which
one an engine uses on a GPU is an engine fact (docs/dsa-engines.md)."""

from __future__ import annotations

from mla_planner.specs.attention.base import CoreCost, KVGroup, Projection
from mla_planner.specs.attention.mla import MLA

INDEX_FIELDS = ("index_n_heads", "index_head_dim", "index_topk")   # config.json keys of the V3.2 indexer
INDEX_SCALE_BYTES = 4          # one fp32 scale per INDEX_QUANT_BLOCK index-key values
INDEX_QUANT_BLOCK = 128


def index_key_bytes(spec) -> int:
    """Bytes of one token's index key in one layer: index_head_dim fp8 values + their fp32 block scales."""
    return spec.index_head_dim + INDEX_SCALE_BYTES * -(-spec.index_head_dim // INDEX_QUANT_BLOCK)


class DSA(MLA):
    name = "mla-dsa"
    extra_fields = INDEX_FIELDS
    backend_family = "mla-sparse"
    verify_kernel = False
    planned = False
    not_planned = ("its sparse attention backends (FlashMLA-sparse in vLLM, the NSA backends in SGLang), their "
                   "block sizes and KV defaults are not modelled yet; `show` gives its weights and KV bytes")

    def check(self, spec) -> str:
        missing = [f for f in INDEX_FIELDS if getattr(spec, f) is None]
        if missing:
            return f"{missing[0]} is required for DeepSeek Sparse Attention (attention: {self.name})"
        return super().check(spec)

    def kv_groups(self, spec, kv_dtype: str, layout=None) -> tuple[KVGroup, ...]:
        """The latent (1152 B bf16, 576 B fp8, 656 B fp8_ds_mla) and the index keys, whole on every rank."""
        latent = super().kv_groups(spec, kv_dtype, layout)
        return latent + (KVGroup("index_keys", index_key_bytes(spec)),)

    def decode_core(self, spec, layout, kv_dtype: str, requests: int, context: int, q_len: int) -> CoreCost:
        """The indexer scans every cached token; the MLA core reads the top-k (all of them below k)."""
        dense = super().decode_core(spec, layout, kv_dtype, requests, min(context, spec.index_topk), q_len)
        scan = requests * context
        index_bytes = scan * index_key_bytes(spec)
        index_flops = 2.0 * spec.index_n_heads * spec.index_head_dim * scan * q_len
        return CoreCost(dense.bytes + index_bytes, dense.flops + index_flops)

    def prefill_core(self, spec, layout, kv_dtype: str, chunk: int, prefix: int) -> CoreCost:
        """MLA's prefill plus the indexer scoring every (query, key) pair of the chunk, keys read once."""
        base = super().prefill_core(spec, layout, kv_dtype, chunk, prefix)
        pairs = chunk * prefix + chunk * (chunk + 1) / 2
        return CoreCost(base.bytes + (prefix + chunk) * index_key_bytes(spec),
                        base.flops + 2.0 * spec.index_n_heads * spec.index_head_dim * pairs)

    def projections(self, spec) -> list[Projection]:
        """MLA's, plus the indexer's (replicated on every rank): wq_b from the query's low-rank state, wk from
        the hidden state, the key LayerNorm (weight and bias), and weights_proj, kept unquantized."""
        d, h, dim = spec.hidden_size, spec.index_n_heads, spec.index_head_dim
        return super().projections(spec) + [
            Projection("attn.indexer.wq_b", (h * dim, spec.q_lora_rank), "replicated"),
            Projection("attn.indexer.wk", (dim, d), "replicated"),
            Projection("attn.indexer.k_norm", (2 * dim,), "replicated", True),
            Projection("attn.indexer.weights_proj", (h, d), "replicated", True)]
