"""What a plan says of one candidate beside its layout and knobs: the memory and performance figures the
search predicted, as typed records. Built once from the search (`of`), written as their fields (`written`:
the plan file's `memory` and `performance`, docs/json.md), read back from a plan file (`from_file`). A
plan built by hand may give only some figures: the others are None, and are left out when written."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from mla_planner.memory.results import MemoryReport
from mla_planner.perf.bands import kv_band
from mla_planner.perf.metrics import Metrics


@dataclass(frozen=True)
class StageMemory:
    """One representative GPU of one pipeline stage (memory.results.RankMemory, as the plan records it)."""
    pp_stage: Optional[int] = None
    layers: Optional[int] = None
    total_bytes: Optional[float] = None
    weights_bytes: Optional[float] = None
    kv_pool_bytes: Optional[float] = None
    kv_bytes_per_token: Optional[float] = None
    kv_tokens: Optional[int] = None
    terms: Optional[dict[str, float]] = None


@dataclass(frozen=True)
class CandidateMemory:
    """The memory model's answer for the candidate's knobs (memory.results.MemoryReport, as the plan records it)."""
    kv_capacity_tokens: Optional[int] = None         # tokens per engine instance / DP rank, as the engine logs them
    kv_capacity_tokens_low: Optional[int] = None     # what the engine would log if the model errs as on held-out
    kv_capacity_tokens_high: Optional[int] = None    # published logs (perf/bands.kv_band)
    kv_tokens_per_replica: Optional[int] = None
    fits: Optional[bool] = None
    binding_stage: Optional[int] = None
    kv_holding: Optional[str] = None
    pp_layer_partition: Optional[list[int]] = None   # decoder layers per pipeline stage
    per_gpu: Optional[list[StageMemory]] = None

    @classmethod
    def of(cls, mem: MemoryReport, kv_holding: str, partition: list[int]) -> "CandidateMemory":
        return cls(mem.kv_capacity_tokens, *kv_band(mem.kv_capacity_tokens), mem.kv_tokens_per_replica, mem.fits,
                   mem.binding_stage, kv_holding,
                   partition, [StageMemory(g.pp_stage, g.layers, g.total_bytes, g.weights_bytes, g.kv_pool_bytes,
                                           g.kv_bytes_per_token, g.kv_tokens, dict(g.terms)) for g in mem.per_gpu])

    @classmethod
    def from_file(cls, data: dict) -> Optional["CandidateMemory"]:
        """The record a plan file holds (the figures it gives; a hand-built plan may give a few or none)."""
        record = _known(cls, data)
        if record and isinstance(record.get("per_gpu"), list):
            record["per_gpu"] = [StageMemory(**_known(StageMemory, g)) for g in record["per_gpu"]]
        return cls(**record) if record else None


@dataclass(frozen=True)
class Performance:
    """The seed article's metrics at the candidate's operating point (perf.metrics.Metrics)."""
    concurrency: Optional[int] = None
    concurrency_per_dp_rank: Optional[int] = None
    capacity_per_dp_rank: Optional[int] = None
    concurrency_limit: Optional[str] = None
    throughput_tokens_per_s: Optional[float] = None
    throughput_tokens_per_s_low: Optional[float] = None     # each band: what a deployment would measure if the
    throughput_tokens_per_s_high: Optional[float] = None    # prediction errs as on held-out published runs (perf/bands)
    throughput_tokens_per_s_per_gpu: Optional[float] = None
    throughput_tokens_per_s_per_gpu_low: Optional[float] = None
    throughput_tokens_per_s_per_gpu_high: Optional[float] = None
    step_s: Optional[float] = None
    step_s_low: Optional[float] = None
    step_s_high: Optional[float] = None
    tpot_s: Optional[float] = None
    tpot_s_low: Optional[float] = None
    tpot_s_high: Optional[float] = None
    tokens_per_s_per_user: Optional[float] = None
    tokens_per_s_per_user_low: Optional[float] = None
    tokens_per_s_per_user_high: Optional[float] = None
    network_wait_share: Optional[float] = None
    decode_network_wait_share: Optional[float] = None
    memory_utilization: Optional[float] = None
    ttft_s: Optional[float] = None
    ttft_s_low: Optional[float] = None
    ttft_s_high: Optional[float] = None
    ttft_longest_s: Optional[float] = None
    ttft_longest_s_low: Optional[float] = None
    ttft_longest_s_high: Optional[float] = None
    meets_targets: Optional[bool] = None
    tie_group: Optional[int] = None    # the rank of the first candidate it is tied with (bands overlap); 0 alone

    @classmethod
    def of(cls, m: Metrics, bands: Optional[dict] = None, tie_group: int = 0) -> "Performance":
        return cls(**{f.name: getattr(m, f.name) for f in fields(cls) if hasattr(m, f.name)}, **(bands or {}),
                   tie_group=tie_group)

    @classmethod
    def from_file(cls, data: dict) -> Optional["Performance"]:
        """The record a plan file holds (the figures it gives; a hand-built plan may give a few or none)."""
        record = _known(cls, data)
        return cls(**record) if record else None


@dataclass(frozen=True)
class Rejection:
    """A layout x engine x KV dtype the plan does not offer, and why ("any": for every engine or dtype)."""
    layout: str
    engine: str
    kv_dtype: str
    reason: str

    @classmethod
    def from_file(cls, data: dict) -> "Rejection":
        return cls(**{f.name: str(data.get(f.name, "")) for f in fields(cls)})


def _known(cls, data) -> dict:
    """The fields of `cls` that `data` gives (a figure a plan file leaves out stays None)."""
    return {f.name: data[f.name] for f in fields(cls) if f.name in data} if isinstance(data, dict) else {}


def written(record) -> dict:
    """A record as the plan file holds it: its fields in order, the ones it does not give left out."""
    if record is None:
        return {}
    out = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if value is not None:
            out[f.name] = [written(v) for v in value] if f.name == "per_gpu" else value
    return out
