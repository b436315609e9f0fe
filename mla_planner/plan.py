"""From a search result to a Plan (planfile.Plan): the candidates' memory and performance as plain data."""

from __future__ import annotations

from .knobs import Workload
from .memory import stage_layers
from .planfile import Candidate, Plan
from .search import Option, SearchResult
from .spec import ModelSpec
from .topology import Topology


def memory_dict(o: Option, spec: ModelSpec) -> dict:
    mem = o.tuned.metrics.memory
    return {"kv_capacity_tokens": mem.kv_capacity_tokens, "kv_tokens_per_replica": mem.kv_tokens_per_replica,
            "fits": mem.fits, "binding_stage": mem.binding_stage, "kv_holding": o.layout.kv_holding(),
            "pp_layer_partition": list(stage_layers(spec.num_hidden_layers, o.layout.pp, o.engine)),
            "per_gpu": [{"pp_stage": g.pp_stage, "layers": g.layers, "total_bytes": g.total_bytes,
                         "weights_bytes": g.weights_bytes, "kv_pool_bytes": g.kv_pool_bytes,
                         "kv_bytes_per_token": g.kv_bytes_per_token, "kv_tokens": g.kv_tokens,
                         "terms": dict(g.terms)} for g in mem.per_gpu]}


def performance_dict(o: Option) -> dict:
    m = o.tuned.metrics
    return {"concurrency": m.concurrency, "concurrency_per_dp_rank": m.concurrency_per_dp_rank,
            "concurrency_limit": m.concurrency_limit, "throughput_tokens_per_s": m.throughput_tokens_per_s,
            "throughput_tokens_per_s_per_gpu": m.throughput_tokens_per_s_per_gpu, "step_s": m.step_s,
            "tpot_s": m.tpot_s, "tokens_per_s_per_user": m.tokens_per_s_per_user,
            "network_wait_share": m.network_wait_share, "memory_utilization": m.memory_utilization,
            "ttft_s": m.ttft_s, "meets_targets": m.meets_targets}


def to_plan(spec: ModelSpec, model_path: str, topo: Topology, workload: Workload, result: SearchResult,
            top: int | None = None) -> Plan:
    options = result.options if top is None else result.options[:top]
    cands = [Candidate(o.layout, o.tuned.knobs, memory_dict(o, spec), performance_dict(o), o.warnings,
                       [f"{k}: {v}" for k, v in o.tuned.reasons.items()]) for o in options]
    return Plan(spec, model_path, topo, workload, cands, result.rejected)
