"""From a search result to a Plan (search.planfile.Plan): the candidates' memory and performance as plain data."""

from __future__ import annotations


from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout
from mla_planner.memory.report import memory_report
from mla_planner.memory.pp_split import layer_split
from mla_planner.search.planfile import Candidate, Plan
from mla_planner.search.run import Option, SearchResult
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology
from mla_planner.search.tuning import draft_knobs, Rejected


def memory_dict(o: Option, spec: ModelSpec) -> dict:
    mem = o.tuned.metrics.memory
    return {"kv_capacity_tokens": mem.kv_capacity_tokens, "kv_tokens_per_replica": mem.kv_tokens_per_replica,
            "fits": mem.fits, "binding_stage": mem.binding_stage, "kv_holding": o.layout.kv_holding(),
            "pp_layer_partition": layer_split(spec, o.layout, o.tuned.knobs),
            "per_gpu": [{"pp_stage": g.pp_stage, "layers": g.layers, "total_bytes": g.total_bytes,
                         "weights_bytes": g.weights_bytes, "kv_pool_bytes": g.kv_pool_bytes,
                         "kv_bytes_per_token": g.kv_bytes_per_token, "kv_tokens": g.kv_tokens,
                         "terms": dict(g.terms)} for g in mem.per_gpu]}


def performance_dict(o: Option) -> dict:
    m = o.tuned.metrics
    return {"concurrency": m.concurrency, "concurrency_per_dp_rank": m.concurrency_per_dp_rank,
            "capacity_per_dp_rank": m.capacity_per_dp_rank,
            "concurrency_limit": m.concurrency_limit, "throughput_tokens_per_s": m.throughput_tokens_per_s,
            "throughput_tokens_per_s_per_gpu": m.throughput_tokens_per_s_per_gpu, "step_s": m.step_s,
            "tpot_s": m.tpot_s, "tokens_per_s_per_user": m.tokens_per_s_per_user,
            "network_wait_share": m.network_wait_share,
            "decode_network_wait_share": m.decode_network_wait_share, "memory_utilization": m.memory_utilization,
            "ttft_s": m.ttft_s, "ttft_longest_s": m.ttft_longest_s, "meets_targets": m.meets_targets}


def to_plan(spec: ModelSpec, model_path: str, topo: Topology, workload: Workload, result: SearchResult,
            top: int | None = None) -> Plan:
    options = result.options if top is None else result.options[:top]
    cands = [Candidate(o.layout, o.tuned.knobs, memory_dict(o, spec), performance_dict(o), o.warnings,
                       [f"{k}: {v}" for k, v in o.tuned.reasons.items()]) for o in options]
    return Plan(spec, model_path, topo, workload, cands, result.rejected)


def nothing_fits_advice(spec: ModelSpec, topo: Topology, workload: Workload, engine: str = "vllm") -> list[str]:
    """Why plain TP over a node (x PP over the nodes) does not serve on `engine`, and what would (memory.ways_out
    re-runs the model on each alternative: fp8 KV, shorter context, dcp, PP, DP attention, a 4-bit AWQ checkpoint,
    more nodes)."""
    tp = max(d for d in range(1, topo.gpus_per_node + 1)
             if spec.num_attention_heads % d == 0 and topo.gpus_per_node % d == 0)
    layout = Layout(tp=tp, pp=topo.nodes if topo.gpus_per_node == tp else 1)   # the whole cluster when TP fills a node
    try:
        knobs, _ = draft_knobs(spec, topo, layout, engine, "bf16", workload)
    except Rejected as exc:
        return [str(exc)]
    mem = memory_report(spec, topo, layout, knobs)
    where = "on one node" if layout.pp == 1 else f"on all {layout.total_gpus} GPUs"
    lines = [f"{layout.label} {where}: {r}" for r in mem.reasons[:2]]
    return lines + [f"would fit: {w}" for w in mem.ways_out]
