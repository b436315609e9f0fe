"""From a search result to a Plan (search.planfile.Plan): each candidate with its typed memory and performance
figures (search.candidate)."""

from __future__ import annotations


from mla_planner.memory.pp_split import layer_split
from mla_planner.memory.report import memory_report
from mla_planner.search.attention_backend import Rejected
from mla_planner.search.candidate import CandidateMemory, Performance
from mla_planner.search.deployment import choose, decode_twin, record, stall_share
from mla_planner.search.planfile import Candidate, Plan
from mla_planner.search.run import SearchResult
from mla_planner.search.tuning import draft_knobs
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


def to_plan(spec: ModelSpec, model_path: str, topo: Topology, workload: Workload, result: SearchResult,
            top: int | None = None, rank_by: str = "per-gpu") -> Plan:
    options = result.options if top is None else result.options[:top]
    cands = [Candidate(o.layout, o.tuned.knobs,
                       CandidateMemory.of(o.tuned.metrics.memory, attention_of(spec).holding(spec, o.layout),
                                          layer_split(spec, o.layout, o.tuned.knobs)),
                       Performance.of(o.tuned.metrics, o.bands, o.tie_group), o.warnings,
                       [f"{k}: {v}" for k, v in o.tuned.reasons.items()]) for o in options]
    disagg = [record(x, workload) for x in result.disaggregated]
    choice = None
    if disagg:
        stall = stall_share(result.options[0].tuned.metrics) if result.options else 0.0
        c = choose(cands[0] if cands else None, stall, disagg[0], rank_by, decode_twin(cands, disagg[0]),
                   (result.crossover_nodes, topo.nodes))
        choice = {"winner": c.winner, "tie": c.tie, "why": c.why, "crossover_nodes": result.crossover_nodes}
    return Plan(spec, model_path, topo, workload, cands, result.rejected, disaggregated=disagg, choice=choice)


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
