"""What a plan says of one candidate beside its layout and knobs: the memory and performance figures the
search predicted, as typed records. Built once from the search (`of`), written as their fields (`written`:
the plan file's `memory` and `performance`, docs/json.md), read back from a plan file (pydantic checks the figures as it reads it: search/planfile.py). A
plan built by hand may give only some figures: the others are None, and are left out when written."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Annotated, Optional

from mla_planner.core.files import Checked
from mla_planner.memory.results import MemoryReport
from mla_planner.perf.bands import kv_band
from mla_planner.perf.metrics import Metrics
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout


# A plan file's figures, as pydantic checks them when the file is read back (search/planfile.py): counts whole and
# not negative, quantities finite (a hand-edited "1e999" or a string reached the emitted README and check-log's
# arithmetic, and broke them with a traceback). Keys a figure record does not define are ignored.
Count = Optional[Annotated[int, Checked(strict=True, ge=0)]]
Figure = Optional[Annotated[float, Checked(allow_inf_nan=False)]]
Word = Optional[Annotated[str, Checked(strict=True)]]
Yes = Optional[Annotated[bool, Checked(strict=True)]]
Terms = Optional[dict[str, Annotated[float, Checked(allow_inf_nan=False)]]]
Partition = Optional[list[Annotated[int, Checked(strict=True, gt=0)]]]
READ_BACK = {"extra": "ignore"}


@dataclass(frozen=True)
class StageMemory:
    """One representative GPU of one pipeline stage (memory.results.RankMemory, as the plan records it)."""
    __pydantic_config__ = READ_BACK
    pp_stage: Count = None
    layers: Count = None
    total_bytes: Figure = None
    weights_bytes: Figure = None
    kv_pool_bytes: Figure = None
    kv_bytes_per_token: Figure = None
    kv_tokens: Count = None
    terms: Terms = None


@dataclass(frozen=True)
class CandidateMemory:
    """The memory model's answer for the candidate's knobs (memory.results.MemoryReport, as the plan records it)."""
    __pydantic_config__ = READ_BACK
    kv_capacity_tokens: Count = None         # tokens per engine instance / DP rank, as the engine logs them
    kv_capacity_tokens_low: Count = None     # what the engine would log if the model errs as on held-out
    kv_capacity_tokens_high: Count = None    # published logs (perf/bands.kv_band)
    kv_tokens_per_replica: Count = None
    fits: Yes = None
    binding_stage: Count = None
    kv_holding: Word = None
    pp_layer_partition: Partition = None   # decoder layers per pipeline stage
    per_gpu: Optional[list[StageMemory]] = None

    @classmethod
    def of(cls, mem: MemoryReport, kv_holding: str, partition: list[int]) -> "CandidateMemory":
        return cls(mem.kv_capacity_tokens, *kv_band(mem.kv_capacity_tokens), mem.kv_tokens_per_replica, mem.fits,
                   mem.binding_stage, kv_holding,
                   partition, [StageMemory(g.pp_stage, g.layers, g.total_bytes, g.weights_bytes, g.kv_pool_bytes,
                                           g.kv_bytes_per_token, g.kv_tokens, dict(g.terms)) for g in mem.per_gpu])



@dataclass(frozen=True)
class Performance:
    """The seed article's metrics at the candidate's operating point (perf.metrics.Metrics)."""
    __pydantic_config__ = READ_BACK
    concurrency: Count = None
    concurrency_per_dp_rank: Count = None
    capacity_per_dp_rank: Count = None
    concurrency_limit: Word = None
    throughput_tokens_per_s: Figure = None
    throughput_tokens_per_s_low: Figure = None     # each band: what a deployment would measure if the
    throughput_tokens_per_s_high: Figure = None    # prediction errs as on held-out published runs (perf/bands)
    throughput_tokens_per_s_per_gpu: Figure = None
    throughput_tokens_per_s_per_gpu_low: Figure = None
    throughput_tokens_per_s_per_gpu_high: Figure = None
    step_s: Figure = None
    step_s_low: Figure = None
    step_s_high: Figure = None
    tpot_s: Figure = None
    tpot_s_low: Figure = None
    tpot_s_high: Figure = None
    tokens_per_s_per_user: Figure = None
    tokens_per_s_per_user_low: Figure = None
    tokens_per_s_per_user_high: Figure = None
    network_wait_share: Figure = None
    decode_network_wait_share: Figure = None
    memory_utilization: Figure = None
    ttft_s: Figure = None
    ttft_s_low: Figure = None
    ttft_s_high: Figure = None
    ttft_longest_s: Figure = None
    ttft_longest_s_low: Figure = None
    ttft_longest_s_high: Figure = None
    meets_targets: Yes = None
    tie_group: Count = None    # the rank of the first candidate it is tied with (bands overlap); 0 alone

    @classmethod
    def of(cls, m: Metrics, bands: Optional[dict] = None, tie_group: int = 0) -> "Performance":
        return cls(**{f.name: getattr(m, f.name) for f in fields(cls) if hasattr(m, f.name)}, **(bands or {}),
                   tie_group=tie_group)


@dataclass(frozen=True)
class Pool:
    """One pool of a disaggregated deployment: `instances` copies of one layout, each over `nodes_per_instance`
    whole nodes (search/disagg.py)."""
    role: str                 # "prefill" or "decode"
    layout: Layout            # one instance (replicas 1)
    knobs: Knobs
    instances: int
    nodes_per_instance: int

    @property
    def gpus(self) -> int:
        return self.instances * self.layout.instance_gpus

    @property
    def label(self) -> str:
        return f"{self.instances}x({self.layout.label})" if self.instances > 1 else self.layout.label


@dataclass(frozen=True)
class DisaggPerformance:
    """What the model predicts for a disaggregated deployment (perf/disagg.py), as the plan records it."""
    __pydantic_config__ = READ_BACK
    gpus: Count = None
    requests_per_s: Figure = None
    throughput_tokens_per_s: Figure = None
    throughput_tokens_per_s_low: Figure = None
    throughput_tokens_per_s_high: Figure = None
    throughput_tokens_per_s_per_gpu: Figure = None
    throughput_tokens_per_s_per_gpu_low: Figure = None
    throughput_tokens_per_s_per_gpu_high: Figure = None
    tpot_s: Figure = None
    tpot_s_low: Figure = None
    tpot_s_high: Figure = None
    ttft_s: Figure = None
    ttft_s_low: Figure = None
    ttft_s_high: Figure = None
    ttft_longest_s: Figure = None             # the longest (p99) prompt's TTFT, held to the target
    queue_s: Figure = None                    # TTFT's parts: the wait for a prefill instance,
    prefill_s: Figure = None                  # the prompt's prefill,
    transfer_s: Figure = None                 # the KV transfer TTFT waits for,
    first_step_s: Figure = None               # the decode instance's first step,
    host_s: Figure = None                     # and the part outside the engines (ttft_host_s)
    transfer_bytes_per_request: Figure = None
    prefill_tokens_per_s_per_instance: Figure = None
    prefill_utilization: Figure = None
    decode_utilization: Figure = None
    decode_batch_per_dp_rank: Count = None
    decode_limit: Word = None
    decode_kv_capacity_tokens: Count = None
    prefill_kv_capacity_tokens: Count = None
    binding: Word = None                      # decode, prefill or offered: what sets the rate
    meets_targets: Yes = None


@dataclass(frozen=True)
class DisaggCandidate:
    """A disaggregated deployment as a plan holds it: its two pools (one engine, one KV dtype), the figures and
    the reasons."""
    prefill: Pool
    decode: Pool
    performance: Optional[DisaggPerformance] = None
    reasons: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    @property
    def engine(self) -> str:
        return self.decode.knobs.engine

    @property
    def label(self) -> str:
        return f"P {self.prefill.label} + D {self.decode.label}"

    @property
    def ratio(self) -> str:
        return f"{self.prefill.instances}:{self.decode.instances}"


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
