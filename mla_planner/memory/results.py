"""What the memory model returns: one representative GPU per pipeline stage, and the report over them."""

from __future__ import annotations

from dataclasses import dataclass, field

from mla_planner.core.reason import Reason
from mla_planner.engines.compressed_pool import running_requests
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
    ways_out: list[str]
    max_concurrency: float      # kv_capacity_tokens / max_model_len, per DP rank
    max_model_len_fit: int      # the longest max-model-len one sequence can have
    engine_version: str = ""
    safe_fraction: float = 0.0  # 0.0: no fraction fits, `no_safe_fraction` says why
    kv_holding: str = ""
    notes: list[str] = field(default_factory=list)
    no_safe_fraction: str = ""
    findings: tuple[Reason, ...] = ()   # why it does not fit (Reason.blocks) and the risks, in the order found
    capacity_rule: dict = field(default_factory=dict)   # DeepSeek-V4: the engine's capacity in its own terms
                                                        # (engines/compressed_kv.CompressedPool.facts)

    @property
    def reasons(self) -> list[str]:
        """The findings' texts, why it does not fit first, then the risks."""
        return [r.text for r in self.findings if r.blocks] + [r.text for r in self.findings if not r.blocks]

    @property
    def blocking(self) -> int:
        """How many of `reasons` (the first ones) are why it does not fit."""
        return sum(r.blocks for r in self.findings)

    def requests_fit(self, tokens_per_request: int) -> int:
        """Requests of `tokens_per_request` KV tokens each the pool holds at once (per DP rank): the capacity over
        the tokens, or for DeepSeek-V4 the engine's own rule in blocks or pools (compressed_pool.running_requests)."""
        if self.capacity_rule:
            return running_requests(self.capacity_rule, tokens_per_request)
        return self.kv_capacity_tokens // tokens_per_request

