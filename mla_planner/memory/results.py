"""What the memory model returns: one representative GPU per pipeline stage, and the report over them."""

from __future__ import annotations

from dataclasses import dataclass, field

from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout


@dataclass(frozen=True)
class RankMemory:
    """One representative GPU of one pipeline stage."""
    pp_stage: int
    layers: int                 # decoder layers with a KV cache on this stage (+ the MTP layer on the last)
    terms: dict[str, float]     # named bytes summing to total_bytes
    total_bytes: float
    weights_bytes: float
    kv_pool_bytes: float
    kv_bytes_per_token: float   # bytes one cached token costs this GPU (after latent-shard /tp and /dcp)
    kv_tokens: int              # tokens this stage's pool holds, as its worker counts them


@dataclass(frozen=True)
class MemoryReport:
    engine: str
    layout: Layout
    knobs: Knobs
    per_gpu: list[RankMemory]
    binding_stage: int
    kv_capacity_tokens: int     # what the engine reports for one instance / DP rank (min over stages)
    kv_tokens_per_replica: int  # distinct tokens of context the whole replica holds (x dp ranks, not x tp)
    fits: bool
    reasons: list[str]
    ways_out: list[str]
    max_concurrency: float      # kv_capacity_tokens / max_model_len, per DP rank
    max_model_len_fit: int      # the longest max-model-len one sequence can have
    engine_version: str = ""
    safe_fraction: float = 0.0  # 0.0: no fraction fits, `no_safe_fraction` says why
    kv_holding: str = ""
    notes: list[str] = field(default_factory=list)
    no_safe_fraction: str = ""
    blocking: int = 0           # the first `blocking` reasons are why it does not fit; the rest are risks
