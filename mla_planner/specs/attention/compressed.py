"""DeepSeek-V4's hybrid compressed attention (CSA + HCA; deepseek-ai/DeepSeek-V4-Pro and -V4-Flash model cards and
technical report): one 512-wide KV row per cached entry (`head_dim`: 448 NoPE + 64 RoPE, the same row serving as
key and value, one KV head), every query head 512 wide, and per layer a compression ratio (`compress_ratios`):
  0    sliding window only (SWA): the last `sliding_window` (128) tokens;
  4    compressed sparse attention (CSA): a compressor folds every 4 tokens (overlapping windows) into one row,
       a lightning indexer (DSA's, over its own compressed index keys) picks the top `index_topk` rows;
  128  heavily compressed attention (HCA): one row per 128 tokens, every row attended.
Every layer also attends to its own 128-token sliding window, and the layers past `num_hidden_layers` in
`compress_ratios` (the MTP layer, DSpark's draft layers) are read as window-only (transformers'
`DeepseekV4Config` truncates the list; vLLM 0.33.0 `models/deepseek_v4/attention.py` forces ratio 0 there).

The caches one layer keeps, as vLLM 0.33.0 builds their specs (`deepseek_v4/attention.py`, `compressor.py`) and
SGLang 0.5.23 its pools (`mem_cache/deepseek_v4_memory_pool.py`): the rows above in FlashMLA's V4 fp8 layout, 584 B
(448 fp8 + 64 bf16 + 7 ue8m0 scales + 1 pad; both engines turn `fp8` and `auto` into it); CSA index keys of 132 B
(128 fp8 + an fp32 scale; 68 B in the FP4 indexer cache vLLM offers on Blackwell); and the compressors' fp32
state rings, per request whatever its length. How each engine pages and groups them into capacity is the engines'
business (engines/compressed_kv.py); this module says what one layer stores and what a decode step reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mla_planner.core.units import ACT_BYTES
from mla_planner.specs.attention import cost
from mla_planner.specs.attention.base import AttentionKind, CoreCost, KVGroup, Projection

RATIOS = {0: "swa", 4: "csa", 128: "hca"}        # the compression ratios the engines implement
ROW_BYTES = 584            # FlashMLA V4 fp8 row: 448 fp8 NoPE + 64 bf16 RoPE + 7 ue8m0 scales + 1 pad
INDEX_KEY_BYTES = {"fp8": 132, "mxfp4": 68}      # by indexer_kv_dtype: 128 fp8 (or 64 B of fp4) + an fp32 scale
STATE_BYTES = 4            # compressor states are fp32
KV_FORMATS = ("fp8_ds_mla",)                     # the 584-byte row; bf16 rows (FlashInfer) are not modelled
V4_FIELDS = ("compress_ratios", "sliding_window", "o_groups", "o_lora_rank", "hc_mult", "num_hash_layers")
INDEX_FIELDS = ("index_n_heads", "index_head_dim", "index_topk")


def layer_ratios(spec) -> tuple[int, ...]:
    """The compression ratio of each decoder layer (entries past num_hidden_layers are MTP/draft layers)."""
    return tuple(spec.compress_ratios[:spec.num_hidden_layers])


def layers_with(spec, ratio: int) -> tuple[int, ...]:
    """The decoder layers (0-based) of one compression ratio."""
    return tuple(i for i, r in enumerate(layer_ratios(spec)) if r == ratio)


def compressor_overlap(ratio: int) -> int:
    """Rows of state each compressed entry is built from per ratio-token step: 2 for ratio 4 (overlapping windows),
    1 otherwise (vLLM 0.33.0 `deepseek_v4/compressor.py` coff)."""
    return 2 if ratio == 4 else 1


@dataclass(frozen=True)
class LayerCache:
    """One cache the layers `layers` each keep: a row of `row_bytes` per `tokens_per_row` tokens of a request;
    `window` None: every row of the request (the cache grows with its length); else a ring of the last `window`
    tokens (fixed per request). `kind` names the layer kind: swa, csa, hca."""
    name: str
    kind: str
    layers: tuple[int, ...]
    row_bytes: int
    tokens_per_row: int = 1
    window: Optional[int] = None


def layer_caches(spec, index_cache: str = "fp8", extra_window_layers: int = 0,
                 stage: Optional[range] = None) -> tuple[LayerCache, ...]:
    """Every cache of the model's decoder layers (or of a pipeline stage's, `stage`), plus `extra_window_layers`
    (the MTP or DSpark draft layers the engine runs: window-only layers numbered from num_hidden_layers). A cache
    no layer keeps is left out. Compressor states: per layer 2 x overlap x head_dim fp32 values per token slot, a
    ring of overlap x ratio slots; the CSA indexer's own compressor the same over index_head_dim (vLLM 0.33.0
    `compressor.py`: C4 8,192 B x 8, its indexer 2,048 B x 8, C128 4,096 B x 128)."""
    n, d = spec.num_hidden_layers, spec.head_dim
    stage = range(n) if stage is None else stage
    csa = tuple(i for i in layers_with(spec, 4) if i in stage)
    hca = tuple(i for i in layers_with(spec, 128) if i in stage)
    every = tuple(stage) + tuple(range(n, n + extra_window_layers))
    out = [LayerCache("swa_kv", "swa", every, ROW_BYTES, window=spec.sliding_window)]
    if csa:
        dih = spec.index_head_dim
        out += [LayerCache("csa_kv", "csa", csa, ROW_BYTES, 4),
                LayerCache("csa_index_keys", "csa", csa, INDEX_KEY_BYTES[index_cache], 4),
                LayerCache("csa_state", "csa", csa, 2 * 2 * d * STATE_BYTES, window=2 * 4),
                LayerCache("csa_index_state", "csa", csa, 2 * 2 * dih * STATE_BYTES, window=2 * 4)]
    if hca:
        out += [LayerCache("hca_kv", "hca", hca, ROW_BYTES, 128),
                LayerCache("hca_state", "hca", hca, 2 * d * STATE_BYTES, window=128)]
    return tuple(out)


def rows_read(context: int, ratio: int, window: int, topk: Optional[int]) -> tuple[int, int, int]:
    """(compressed rows attended, window rows attended, index keys scored) for one decode query over `context`
    cached tokens (the new one included) in a layer of `ratio`: the window's last min(context, window) tokens;
    CSA the top-k of its context // 4 complete rows (all below k), every one of them scored; HCA every one of its
    context // 128 rows (the compressor emits a row once its ratio tokens are in)."""
    win = min(context, window)
    if ratio <= 1:     # window-only (vLLM gives the MTP and draft layers ratio 1)
        return 0, win, 0
    rows = context // ratio
    if ratio == 4:
        return min(rows, topk), win, rows
    return rows, win, 0


class CompressedHybrid(AttentionKind):
    name = "csa-hca"
    backend_family = "mla-compressed"
    extra_fields = V4_FIELDS + INDEX_FIELDS
    verify_kernel = True         # verify/compressed_kernel.py, timed by verify/compressed_bench.py

    def check(self, spec) -> str:
        for key in ("compress_ratios", "sliding_window", "head_dim", "qk_rope_head_dim", "q_lora_rank", "o_groups",
                    "o_lora_rank"):
            if getattr(spec, key) is None:
                return f"{key} is required for DeepSeek-V4 compressed attention (attention: {self.name})"
        if len(spec.compress_ratios) < spec.num_hidden_layers:
            return (f"compress_ratios has {len(spec.compress_ratios)} entries, fewer than num_hidden_layers "
                    f"{spec.num_hidden_layers}")
        odd = sorted({r for r in spec.compress_ratios if r not in RATIOS})
        if odd:
            return f"compress_ratios: ratio {odd[0]} is not one the engines implement (0, 4 or 128)"
        if 4 in layer_ratios(spec):
            missing = [f for f in INDEX_FIELDS if getattr(spec, f) is None]
            if missing:
                return f"{missing[0]} is required: ratio-4 layers keep a lightning indexer"
        if spec.kv_heads != 1:
            return f"num_key_value_heads must be 1 for DeepSeek-V4 attention (got {spec.num_key_value_heads})"
        if spec.num_attention_heads % spec.o_groups:
            return f"o_groups {spec.o_groups} must divide num_attention_heads {spec.num_attention_heads}"
        return ""

    def qk_head_dim(self, spec) -> int:
        return spec.head_dim

    def v_head_dim(self, spec) -> int:
        return spec.head_dim

    def kv_formats(self, spec) -> tuple[str, ...]:
        return KV_FORMATS

    def kv_groups(self, spec, kv_dtype: str, layout=None) -> tuple[KVGroup, ...]:
        """The caches that grow with a request's length, per token (unpadded): 584 / 4 B and the index keys' 132 / 4
        B on CSA layers, 584 / 128 B on HCA layers; whole on every TP rank (one KV head: TP cannot split it). The
        fixed per-request rings (window, compressor states) are `layer_caches`'."""
        return tuple(KVGroup(c.name, c.row_bytes / c.tokens_per_row, layers=c.layers, mtp=False)
                     for c in layer_caches(spec) if c.window is None)

    def tp_holding(self, spec, layout) -> str:
        return f"replicated on every TP rank ({layout.tp} copies: one KV head)" if layout.tp > 1 else "one copy per rank"

    def layout_problems(self, spec, layout) -> list[str]:
        """DCP: both engines refuse it for sliding-window caches (vLLM 0.33.0 `v1/kv_cache_interface.py`: "DCP not
        support sliding window"); TP beyond o_groups leaves a rank without an output group (`attention.py` splits
        wo_a by group)."""
        out = ["decode context parallelism: the engines refuse it for V4's sliding-window caches"] if layout.dcp > 1 else []
        if layout.kv_layout == "latent-sharded":
            out.append("a latent-sharded cache is not modelled for DeepSeek-V4 attention")
        if spec.o_groups % layout.tp:
            out.append(f"tp={layout.tp} must divide o_groups={spec.o_groups} (the grouped output projection)")
        return out

    def decode_core(self, spec, layout, kv_dtype: str, requests: int, context: int, q_len: int,
                    padded_heads: Optional[int] = None, index_cache: str = "fp8") -> CoreCost:
        """Per decoder layer on average over the model's layers (`layer_core` of each one's ratio)."""
        total = [self.layer_core(spec, layout, r, requests, context, q_len, padded_heads, index_cache)
                 for r in layer_ratios(spec)]
        n = spec.num_hidden_layers
        return CoreCost(sum(c.bytes for c in total) / n, sum(c.flops for c in total) / n)

    def layer_core(self, spec, layout, ratio: int, requests: int, context: int, q_len: int,
                   padded_heads: Optional[int] = None, index_cache: str = "fp8") -> CoreCost:
        """One layer of compression `ratio` (`rows_read`): the attended rows read once (584 B each), each scored
        and summed by num_attention_heads / tp query heads (2 x 512 + 2 x 512 FLOPs per head and row: the
        absorbed-core formulas with the row as key and value; `padded_heads`: the heads the FlashMLA kernel computes
        for them, 64 or 128), the queries and outputs, the new token's window row written; on a CSA layer the
        indexer reads and scores every compressed index key (2 x index_n_heads x index_head_dim FLOPs each, FP8;
        `index_cache` mxfp4: the 68-byte keys of vLLM's FP4 indexer cache, its indexer_kv_dtype).
        `verify` times this for one layer kind."""
        heads, d = spec.num_attention_heads // layout.tp, spec.head_dim
        rows, win, keys = rows_read(context, ratio, spec.sliding_window, spec.index_topk)
        read = requests * (rows + win)
        scale = max(padded_heads or heads, heads) / heads
        nbytes = cost.absorbed_core_bytes(requests, heads, read, ROW_BYTES, d, 0, q_len, ACT_BYTES)
        flops = cost.absorbed_core_flops(heads, read, d, 0, q_len) * scale
        if keys:
            nbytes += requests * keys * INDEX_KEY_BYTES[index_cache]
            flops += 2.0 * spec.index_n_heads * spec.index_head_dim * requests * keys * q_len
        return CoreCost(nbytes, flops)

    def prefill_core(self, spec, layout, kv_dtype: str, chunk: int, prefix: int, index_cache: str = "fp8") -> CoreCost:
        """A chunk of `chunk` tokens after `prefix` cached ones, per layer on average: each query token at position t
        attends to min(t, window) window rows plus, on a CSA layer, min(t // 4, top-k) compressed rows chosen by
        the indexer (which scores all t // 4), on an HCA layer all t // 128 (FLOPs as `layer_core`, unpadded: the
        sparse prefill kernels take any head count); every row of the layer read once, the chunk's rows written;
        `index_cache` as `layer_core`'s."""
        heads, d, w = spec.num_attention_heads // layout.tp, spec.head_dim, spec.sliding_window
        first, last = prefix + 1, prefix + chunk
        nbytes = flops = 0.0
        for ratio in layer_ratios(spec):
            pairs = _sum_min(first, last, 1, w)
            rows = min(last, w) + chunk
            if ratio > 1:
                pairs += _sum_min(first, last, ratio, spec.index_topk if ratio == 4 else None)
                rows += last // ratio
            flops += cost.absorbed_core_flops(heads, pairs, d, 0)
            nbytes += rows * ROW_BYTES + 2 * chunk * heads * d * ACT_BYTES
            if ratio == 4:
                flops += 2.0 * spec.index_n_heads * spec.index_head_dim * _sum_min(first, last, 4, None)
                nbytes += (last // 4) * INDEX_KEY_BYTES[index_cache]
        n = spec.num_hidden_layers
        return CoreCost(nbytes / n, flops / n)

    def projections(self, spec) -> list[Projection]:
        """vLLM 0.33.0 `deepseek_v4/attention.py` and `compressor.py`: on every layer wq_a and wkv fused and
        replicated, q_norm and kv_norm, wq_b column-split, the grouped output projection wo_a (o_groups x
        o_lora_rank rows, column-split by group) and wo_b (row-split), an fp32 attention sink per head; on CSA and
        HCA layers a bf16 compressor (wkv and wgate, 2 x overlap x head_dim rows) with its fp32 position bias
        (`ape`) and norm; on CSA layers the indexer: wq_b from the query's low-rank state, weights_proj, its own
        compressor over index_head_dim. Compressors, norms and the indexer's weights_proj stay bf16 (quant_config
        None), the sink and `ape` are fp32."""
        h, d, nh = spec.hidden_size, spec.head_dim, spec.num_attention_heads
        ql, ol, g = spec.q_lora_rank, spec.o_lora_rank, spec.o_groups
        out = [Projection("attn.wq_a_wkv", (ql + d, h), "replicated"),
               Projection("attn.q_norm", (ql,), "replicated", True),
               Projection("attn.kv_norm", (d,), "replicated", True),
               Projection("attn.wq_b", (nh * d, ql), "column"),
               Projection("attn.wo_a", (g * ol, nh * d // g), "column"),
               Projection("attn.wo_b", (h, g * ol), "row"),
               Projection("attn.attn_sink", (nh,), "column", dtype="fp32")]
        for ratio in (4, 128):
            layers = layers_with(spec, ratio)
            if not layers:
                continue
            co = compressor_overlap(ratio)
            out += [Projection(f"attn.compressor{ratio}.wkv_wgate", (2 * co * d, h), "replicated", True, layers,
                               mtp=False),
                    Projection(f"attn.compressor{ratio}.ape", (ratio, co * d), "replicated", layers=layers, dtype="fp32",
                               mtp=False),
                    Projection(f"attn.compressor{ratio}.norm", (d,), "replicated", True, layers, mtp=False)]
        csa = layers_with(spec, 4)
        if csa:
            ih, dih = spec.index_n_heads, spec.index_head_dim
            out += [Projection("attn.indexer.wq_b", (ih * dih, ql), "replicated", layers=csa, mtp=False),
                    Projection("attn.indexer.weights_proj", (ih, h), "replicated", True, csa, mtp=False),
                    Projection("attn.indexer.compressor.wkv_wgate", (2 * 2 * dih, h), "replicated", True, csa,
                               mtp=False),
                    Projection("attn.indexer.compressor.ape", (4, 2 * dih), "replicated", layers=csa, dtype="fp32",
                               mtp=False),
                    Projection("attn.indexer.compressor.norm", (dih,), "replicated", True, csa, mtp=False)]
        return out


def _floor_sum(n: int, r: int) -> int:
    """sum of t // r for t in 0..n."""
    if n < 0:
        return 0
    q, rem = divmod(n, r)
    return r * q * (q - 1) // 2 + q * (rem + 1)


def _sum_min(first: int, last: int, r: int, cap: Optional[int]) -> int:
    """sum over positions t in first..last of min(t // r, cap) (cap None: no cap): the rows of one kind a prefill
    chunk's queries attend to (r = 1 with cap = window: the window)."""
    if cap is None:
        return _floor_sum(last, r) - _floor_sum(first - 1, r)
    edge = r * cap - 1             # t // r < cap up to here
    below = max(min(last, edge) - first + 1, 0) and _floor_sum(min(last, edge), r) - _floor_sum(first - 1, r)
    return below + cap * max(last - max(first, edge + 1) + 1, 0)

