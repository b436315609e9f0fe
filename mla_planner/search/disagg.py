"""The disaggregated search: a prefill pool and a decode pool over whole nodes of the cluster, each with its own
layout and knobs, priced by perf/disagg.py and ranked with the aggregated candidates' measure.

1. Instance sizes: 1 .. nodes - 1 whole nodes (a pool is whole nodes, an instance one layout over them; inside a
   rack-scale NVLink domain the instance keeps the NVLink between its hosts).
2. Per engine, KV dtype and size, the best prefill layout (prompt tokens/s per GPU at full load) and the best
   decode layout (requests/s per GPU within the TPOT target, no prefill stalls) whose knobs can hand the cache over
   (engines/disagg.pools_mismatch: SGLang's page size, vLLM's attention backend), from the layouts the aggregated
   search would try on those nodes (search/layouts.py), without pipeline stages, DCP or Route B (neither engine
   pairs them with its disaggregation path here), through the same knob drafting (search/tuning.py).
3. Every split of the nodes into n_p prefill and n_d decode instances (both at least one) is priced
   (perf.disagg.split); the best splits are kept, those meeting the targets first, by output tokens/s per GPU.
Both pools run one engine and one KV dtype: the KV cache moves between them as the engine lays it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from math import ceil

from mla_planner.engines.disagg import SENDS_PER_CHUNK, pool_layout_problem, pools_mismatch
from mla_planner.engines.layouts import launch_problem
from mla_planner.perf.bands import band, error_range, tpot_errors
from mla_planner.perf.disagg import (DecodeRate, PoolSplit, PrefillRate, Transfer, closed_loop_cap, decode_rate,
                                     prefill_knobs, prefill_rate, split, transfer)
from mla_planner.search.attention_backend import Rejected
from mla_planner.search.candidate import Pool
from mla_planner.search.layouts import candidate_layouts, min_instance_gpus
from mla_planner.search.run import kv_dtypes_for
from mla_planner.search.tuning import Overrides, chunk_candidates, dense_variants, draft_knobs, largest_safe_chunk
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import ENGINES, Workload
from mla_planner.specs.layout import Layout, rdma_between_nodes
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.sizing import weight_bytes_breakdown
from mla_planner.specs.topology import Topology

KEEP = 5              # disaggregated deployments a plan lists
CROSSOVER_NODES = 4   # how far past the cluster's node count `crossover_nodes` looks


@dataclass(frozen=True)
class Disaggregated:
    """A prefill pool, a decode pool and what the model predicts for them."""
    engine: str
    kv_dtype: str
    prefill: Pool
    decode: Pool
    prefill_rate: PrefillRate
    transfer: Transfer
    decode_rate: DecodeRate
    split: PoolSplit
    bands: dict = field(default_factory=dict)

    def key(self, rank_by: str = "per-gpu") -> tuple:
        """Those meeting the targets first, then output tokens/s per GPU (or in all), then the labels."""
        s = self.split
        tput = s.throughput_tokens_per_s if rank_by == "total" else s.throughput_tokens_per_s_per_gpu
        return (not s.meets_targets, -round(tput, 6), round(s.ttft_s, 6), self.prefill.label, self.decode.label,
                self.engine, self.kv_dtype)


def pool_topology(topo: Topology, nodes: int) -> Topology:
    """The nodes one instance runs on: `nodes` hosts, inside one NVLink domain where the cluster's domain spans
    hosts and holds them (any trays of an NVL72 rack share its NVLink switches), whole domains where it takes
    several, else over the NICs."""
    domain = topo.nvlink_domain_nodes
    inside = domain if nodes % domain == 0 else (nodes if nodes < domain else 1)   # any trays of one rack: NVLink
    return replace(topo, nodes=nodes, nvlink_domain_nodes=inside)


def disaggregation_problem(topo: Topology) -> str:
    """Why this cluster cannot be split into pools ('' when it can)."""
    if topo.nodes < 2:
        return "one node: a prefill and a decode pool need a whole node each"
    if not rdma_between_nodes(topo):
        return ("the nodes are not joined by RDMA (InfiniBand or RoCE): the engines' KV transfer (Mooncake, NIXL) "
                "sends the prompt's cache over RDMA")
    return ""


def none_found_why(spec: ModelSpec, topo: Topology) -> str:
    """Why a cluster of several nodes lists no disaggregated deployment, in one line."""
    problem = disaggregation_problem(topo)
    if problem:
        return problem
    nodes = ceil(min_instance_gpus(spec, topo) / topo.gpus_per_node)
    if 2 * nodes > topo.nodes:
        return (f"an instance needs at least {nodes} of these nodes for the weights alone, so a prefill and a decode "
                f"pool need {2 * nodes}; the cluster has {topo.nodes}")
    share = weight_bytes_breakdown(spec)["total"] / (topo.gpus_per_node * topo.gpu.memory_bytes)
    return (f"no prefill and decode pool shapes of whole nodes both fit and hand the cache over on {topo.nodes} "
            f"nodes (the weights alone take {share:.0%} of one node's GPU memory)")


def _pool_layouts(spec: ModelSpec, sub: Topology, engine: str) -> list[Layout]:
    legal, _ = candidate_layouts(spec, sub)
    return [lay for lay in legal if not pool_layout_problem(lay) and lay.kv_layout == "replicated"
            and lay.instance_gpus == sub.total_gpus and not launch_problem(engine, lay, sub.gpus_per_node)]


def _options(spec, sub, engine, kv, workload, calib, pinned, role: str) -> list[tuple]:
    """(score, layout, knobs, rate) of every instance shape of `role` on `sub`, best first. Prefill: prompt tokens/s
    per GPU at full load, at each token budget the memory fraction allows (the split weighs its TTFT); decode:
    requests/s per GPU within the TPOT target."""
    out = []
    for layout in _pool_layouts(spec, sub, engine):
        for per_rank in dense_variants(layout, engine):
            try:
                knobs, _ = draft_knobs(spec, sub, layout, engine, kv, workload, pinned, per_rank)
            except Rejected:
                continue
            if role == "prefill":     # every budget the memory fraction allows: a larger one packs more prompts
                largest = largest_safe_chunk(spec, sub, layout, knobs)   # per forward, a smaller one cuts TTFT
                for budget in [c for c in chunk_candidates(engine, layout, sub.gpu) if c <= largest]:
                    pk = prefill_knobs(knobs, budget, workload)
                    rate = prefill_rate(spec, sub, layout, pk, workload, calib)
                    if rate.kv_fits:
                        out.append((rate.tokens_per_s / layout.instance_gpus, layout, pk, rate))
                continue
            rate = decode_rate(spec, sub, layout, knobs, workload, calib)
            if rate.batch_per_dp_rank:
                out.append((rate.requests_per_s / layout.instance_gpus, layout, knobs, rate))
    return sorted(out, key=lambda o: (-o[0], o[1].label, o[2].dense_per_rank, o[2].max_num_batched_tokens))


def _pairs_of(engine: str, prefills: list, decodes: list) -> list[tuple]:
    """The best decode shape that some prefill shape can hand a cache to (engines/disagg.pools_mismatch; it sets the
    rate where the decode pool binds), with every prefill shape that can: the split weighs their rate against
    their TTFT."""
    for d in decodes:
        matching = [p for p in prefills if not pools_mismatch(engine, p[2], d[2])]
        if matching:
            return [(p, d) for p in matching]
    return []


def search_disaggregated(spec: ModelSpec, topo: Topology, workload: Workload, calib: Calibration,
                         engines: tuple = ENGINES, kv_dtype: str | None = None,
                         pinned: Overrides = Overrides(), rank_by: str = "per-gpu") -> list[Disaggregated]:
    """The best disaggregated deployments of the cluster (at most KEEP), best first; [] where
    `disaggregation_problem` says it cannot be split."""
    if disaggregation_problem(topo):
        return []
    found = [x for pair in _pairs(spec, topo, workload, calib, engines, kv_dtype, pinned)
             for x in _splits(spec, topo, workload, calib, *pair)]
    found.sort(key=lambda x: x.key(rank_by))
    best, seen = [], set()
    for x in found:   # one per engine, KV dtype and pair of pools: their best token budget and dense-parts way
        shape = (x.engine, x.kv_dtype, x.prefill.layout, x.prefill.instances, x.prefill.nodes_per_instance,
                 x.decode.layout, x.decode.instances, x.decode.nodes_per_instance)
        if shape not in seen:
            seen.add(shape)
            best.append(x)
    return [with_bands(x, topo) for x in best[:KEEP]]


@lru_cache(maxsize=8)
def _pairs(spec: ModelSpec, topo: Topology, workload: Workload, calib: Calibration, engines: tuple,
           kv_dtype: str | None, pinned: Overrides) -> tuple:
    """(engine, KV dtype, prefill shape, decode shape) for every pair of instance sizes that fits the cluster, each
    shape (nodes, layout, knobs, rate): the best decode shape of its size, with each prefill shape that can hand it
    the cache (`_pairs_of`)."""
    sizes = range(1, topo.nodes)
    out = []
    for engine in engines:
        for kv in kv_dtypes_for(topo, kv_dtype, spec):
            subs = {s: pool_topology(topo, s) for s in sizes}
            prefills = {s: _options(spec, subs[s], engine, kv, workload, calib, pinned, "prefill") for s in sizes}
            decodes = {s: _options(spec, subs[s], engine, kv, workload, calib, pinned, "decode") for s in sizes}
            for sp in sizes:
                for sd in sizes:
                    if sp + sd <= topo.nodes:
                        out += [(engine, kv, (sp, *p[1:]), (sd, *d[1:]))
                                for p, d in _pairs_of(engine, prefills[sp], decodes[sd])]
    return tuple(out)


def crossover_nodes(spec: ModelSpec, topo: Topology, workload: Workload, calib: Calibration,
                    aggregated_per_gpu: float, engines: tuple = ENGINES, kv_dtype: str | None = None,
                    pinned: Overrides = Overrides()) -> int | None:
    """The fewest nodes of this kind (2 .. CROSSOVER_NODES x the cluster's) on which the best disaggregated deployment
    meeting the targets serves more output tokens/s per GPU than `aggregated_per_gpu` (the best aggregated candidate's,
    which replicas keep the same on any number of nodes), with the instance shapes found on this cluster; None
    when it never does in that range."""
    if disaggregation_problem(topo):
        return None
    pairs = _pairs(spec, topo, workload, calib, engines, kv_dtype, pinned)
    for nodes in range(2, CROSSOVER_NODES * topo.nodes + 1):
        more = replace(topo, nodes=nodes) if nodes % topo.nvlink_domain_nodes == 0 else None
        if more is None:
            continue
        for engine, kv, p, d in pairs:
            if p[0] + d[0] <= nodes and any(x.split.meets_targets and x.split.throughput_tokens_per_s_per_gpu >
                                            aggregated_per_gpu
                                            for x in _splits(spec, more, workload, calib, engine, kv, p, d)):
                return nodes
    return None


def _splits(spec, topo, workload, calib, engine, kv, p, d) -> list[Disaggregated]:
    """Every n_p x n_d of these two instance shapes that fits the cluster's nodes."""
    (sp, lay_p, knobs_p, rate_p), (sd, lay_d, knobs_d, rate_d) = p, d
    sub_d = pool_topology(topo, sd)
    t, t_longest = (transfer(spec, topo, lay_p, lay_d, knobs_d.kv_cache_dtype, tokens, calib, SENDS_PER_CHUNK[engine],
                             knobs_p.max_num_batched_tokens, rate_p.prompts_per_forward)
                    for tokens in (workload.input_len, workload.input_len_max or workload.input_len))
    out = []
    for n_p in range(1, (topo.nodes - sd) // sp + 1):
        for n_d in range(1, (topo.nodes - n_p * sp) // sd + 1):
            cap = closed_loop_cap(workload, lay_d, n_d)
            dr = decode_rate(spec, sub_d, lay_d, knobs_d, workload, calib, cap) if cap else rate_d
            s = split(workload, rate_p, lay_p, n_p, t, dr, lay_d, n_d, t_longest)
            decode_knobs = replace(knobs_d, max_num_seqs=max(dr.batch_per_dp_rank, 1))   # the batch planned
            out.append(Disaggregated(engine, kv, Pool("prefill", lay_p, knobs_p, n_p, sp),
                                     Pool("decode", lay_d, decode_knobs, n_d, sd), rate_p, t, dr, s))
    return out


def with_bands(x: Disaggregated, topo: Topology) -> Disaggregated:
    """The deployment's low/high bands (perf/bands.py): throughput and TPOT as the decode step errs (its decode pool
    sets them), TTFT as TTFT does."""
    tpot_err = tpot_errors(x.decode.layout, topo)
    s = x.split
    bands = {}
    for name, value, inverse in (("tpot_s", s.tpot_s, False),
                                 ("throughput_tokens_per_s", s.throughput_tokens_per_s, True),
                                 ("throughput_tokens_per_s_per_gpu", s.throughput_tokens_per_s_per_gpu, True)):
        bands[f"{name}_low"], bands[f"{name}_high"] = band(value, tpot_err, inverse)
    bands["ttft_s_low"], bands["ttft_s_high"] = band(s.ttft_s, error_range("ttft"))
    return replace(x, bands=bands)
