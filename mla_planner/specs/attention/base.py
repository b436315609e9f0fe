"""The attention seam: what a model's attention asks of the memory model, the step model, the knobs and
`verify`, answered once per attention kind (mla.py, gqa.py; kinds.py names them).

Every layer's cache belongs to a KV-cache group, as the engines group layers themselves (vLLM
`vllm/v1/kv_cache_interface.py`: one `KVCacheSpec` per layer group, the pool sized over the groups;
SGLang `mem_cache/memory_pool.py`: one pool per kind of cache). A group says what one token costs one
layer of it and how tensor parallelism shares that among the ranks. A kind also says what a decode step
reads and computes per request, what a prefill chunk computes, which KV formats apply, which layouts
its cache cannot take, and its attention weights. No module outside this package branches on a kind's name
(only `verify`'s MLA microkernel knows MLA's dimensions: it is the MLA kernel).

A kind reads the spec's fields (`spec.kv_lora_rank`, `spec.num_attention_heads`, ...) without importing
ModelSpec: model.py validates a spec's `attention` through the kinds, so they sit below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mla_planner.specs.knobs import KV_DTYPES

KV_DTYPE_BYTES = {"bf16": 2, "fp8": 1}


def element_bytes(kv_dtype: str) -> int:
    """Bytes of one cached element in the format `kv_dtype` (fp8 and its variants: 1; bf16: 2)."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"unknown KV dtype {kv_dtype!r}; expected {', '.join(KV_DTYPES)}")
    return KV_DTYPE_BYTES["fp8" if kv_dtype.startswith("fp8") else "bf16"]


@dataclass(frozen=True)
class KVGroup:
    """One KV-cache group: the layers that hold the same kind of cache, and what a token costs them.

    `layers` None: every decoder layer with attention (and the MTP layer when it runs); a kind whose
    layers differ (sparse indexers, compressed or sliding layers) names its decoder layers (0-based), and the
    MTP layer holds the group too. `bytes_per_token_layer` is what one token adds to one layer on a rank
    holding the whole cache; `rank_share` the part of it one GPU of the layout holds (1: every TP rank keeps
    it whole, as both engines do with the MLA latent)."""
    name: str
    bytes_per_token_layer: float
    rank_share: float = 1.0
    layers: Optional[tuple[int, ...]] = None
    mtp: bool = True            # the MTP layer holds it too (not DeepSeek-V4's compressed caches: its MTP layer
                                # is window-only)

    @property
    def gpu_bytes_per_token_layer(self) -> float:
        return self.bytes_per_token_layer * self.rank_share

    def layer_count(self, layers, num_hidden_layers: int) -> float:
        """How many of LAYERS hold this group: LAYERS a range of decoder layers (a pipeline stage's), or a
        count of layers anywhere in the model (then a named group's share of them, on average)."""
        if self.layers is None:
            return len(layers) if isinstance(layers, range) else layers
        if isinstance(layers, range):
            return len(set(self.layers).intersection(layers))
        return layers * len(self.layers) / num_hidden_layers


@dataclass(frozen=True)
class Projection:
    """One stored attention weight of a layer: its name in the inventory, shape, how TP splits it
    (specs/weights.py: column, row, replicated), whether it is kept in bf16 whatever the checkpoint (norms,
    biases), the decoder layers that have it (None: every layer; the MTP layer always has it), and a dtype it
    is always stored in when not the checkpoint's nor bf16 (fp32 attention sinks); `mtp` False: the MTP layer
    lacks it (DeepSeek-V4's MTP layer is window-only: no compressor)."""
    name: str
    shape: tuple[int, ...]
    split: str
    bf16: bool = False
    layers: Optional[tuple[int, ...]] = None
    dtype: Optional[str] = None
    mtp: bool = True


@dataclass(frozen=True)
class CoreCost:
    """HBM bytes and FLOPs of one attention call on one rank for one layer."""
    bytes: float
    flops: float


class AttentionKind:
    """One kind of attention. Subclasses answer every method; `name` is the spec's `attention` value."""
    name: str = ""
    backend_family: Optional[str] = None   # the engines' attention backends that serve it: "mla" (their MLA
                                           # backends, engines/backends.py); None: the engine's default attention
    latent: bool = False                   # one latent per token shared by every head (the MLA family): decode
                                           # runs the absorbed form, DCP splits the tokens, the latent width can
                                           # be sharded (Route B); the planner searches and prices those
    verify_kernel: bool = False            # `verify`'s microkernel runs this kind's decode (the MLA kernel)
    extra_fields: tuple[str, ...] = ()     # spec fields only this kind reads; on a spec of another kind they
                                           # contradict its declared attention, and the spec is refused
    not_modelled_in: tuple[str, ...] = ()  # the commands that cannot price it yet (refused in one line),
    not_planned: str = ""                  # and this says what is missing

    def check(self, spec) -> str:
        """Why the spec's fields do not describe this kind ('' when they do)."""
        raise NotImplementedError

    def kv_formats(self, spec) -> tuple[str, ...]:
        """The KV dtypes this kind's cache can be stored in (knobs, `show`'s table)."""
        raise NotImplementedError

    def kv_groups(self, spec, kv_dtype: str, layout=None) -> tuple[KVGroup, ...]:
        """The cache groups of every layer; `layout` None: a rank holding the whole cache."""
        raise NotImplementedError

    def layout_problems(self, spec, layout) -> list[str]:
        """Why this kind's cache cannot take `layout` (TP over its heads, DCP, latent sharding)."""
        raise NotImplementedError

    def decode_core(self, spec, layout, kv_dtype: str, requests: int, context: int, q_len: int) -> CoreCost:
        """The attention core of one decode step on one rank, one layer: `requests` sequences of `context`
        cached tokens each (the new one included), `q_len` query tokens each."""
        raise NotImplementedError

    def prefill_core(self, spec, layout, kv_dtype: str, chunk: int, prefix: int) -> CoreCost:
        """The attention of one prefill chunk of `chunk` tokens after `prefix` cached ones, one rank, one
        layer."""
        raise NotImplementedError

    def qk_head_dim(self, spec) -> int:
        """Query/key head dim (MLA: d_nope + d_rope, 192 for DeepSeek; per-head kinds: head_dim)."""
        return spec.gqa_head_dim

    def v_head_dim(self, spec) -> int:
        return spec.gqa_head_dim

    def projections(self, spec) -> list[Projection]:
        """The attention weights of one layer (the weight inventory, specs/weights.py, prices them)."""
        raise NotImplementedError

    def absorb_params_per_head(self, spec) -> int:
        """Parameters per head of the up-projections decode absorbs into the query and output (MLA's W_UK and
        W_UV: (d_nope + d_v) x d_c); the engines keep a bf16 copy of them. 0: nothing is absorbed."""
        return 0

    def tp_holding(self, spec, layout) -> str:
        """Plain words for how the TP group holds the cache (memory reports it as `kv_holding`), from the groups'
        rank shares; a kind may word it better."""
        if layout.tp == 1:
            return "one copy per rank"
        shares = {g.rank_share for g in self.kv_groups(spec, "bf16", layout)}
        if shares == {1.0}:
            return f"replicated on every TP rank ({layout.tp} copies)"
        return f"split over the {layout.tp} TP ranks ({max(shares):.0%} of it per rank)"

    def holding(self, spec, layout) -> str:
        """`tp_holding`, then how DCP and DP attention split it."""
        return self.tp_holding(spec, layout) + layout.cache_split_words()

    def per_head_bytes_per_token_layer(self, spec, kv_dtype: str) -> Optional[float]:
        """The per-head K/V cache this kind avoids, for comparison (`show`); None when it is its own."""
        return None

    # derived from the groups

    def bytes_per_token_layer(self, spec, kv_dtype: str) -> float:
        """Bytes one token adds to one layer's caches on a rank that holds them whole (averaged over the
        decoder layers where a group holds only some of them)."""
        total, layers = self.bytes_per_token(spec, kv_dtype, range(spec.num_hidden_layers)), spec.num_hidden_layers
        return total // layers if total % layers == 0 else total / layers

    def bytes_per_token(self, spec, kv_dtype: str, layers, mtp_layers: int = 0) -> float:
        """Bytes one token adds to the caches of LAYERS (a range of decoder layers, or a count) and
        MTP_LAYERS MTP layers, on a rank that holds them whole."""
        return sum((g.layer_count(layers, spec.num_hidden_layers) + mtp_layers * g.mtp) * g.bytes_per_token_layer
                   for g in self.kv_groups(spec, kv_dtype))

    def gpu_bytes_per_token(self, spec, layout, kv_dtype: str, layers, mtp_layers: int = 0) -> float:
        """Bytes one token slot costs one GPU of `layout` over LAYERS (a range of decoder layers, e.g. a
        pipeline stage's, or a count) and MTP_LAYERS MTP layers, every group at its rank share."""
        return sum((g.layer_count(layers, spec.num_hidden_layers) + mtp_layers * g.mtp) *
                   g.gpu_bytes_per_token_layer for g in self.kv_groups(spec, kv_dtype, layout))

