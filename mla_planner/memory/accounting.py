"""Per-GPU memory of an MLA deployment, as the engine will count it: weights, activations, CUDA graphs,
communication buffers, runtime and the KV pool, for one representative GPU of every pipeline stage.

Each `RankMemory.terms` is an ordered set of named byte counts that sums to the GPU's memory
(nanoGPT-sizing style). Which terms an engine charges to its KV budget, and how it rounds the pool,
is `engines.memory_rules`'s business; the physics of each term is `memory.terms` and `memory.weights`.
The KV cost of a token on one GPU follows docs/memory.md section 1: layers on the stage x 576 x bytes,
NOT divided by TP (every TP rank stores every token's latent), / tp only for the latent-sharded
layout, / dcp when decode context parallelism splits the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from mla_planner.core.reason import Reason
from mla_planner.core.units import GiB
from mla_planner.engines.backends import fp8_checkpoint, startup_problems
from mla_planner.engines.compressed_kv import in_flight_batches, is_compressed
from mla_planner.engines.compressed_pool import CompressedPool, vllm_buffer_bytes
from mla_planner.engines.cuda_graphs import capture_plan, sglang_graph_buffer_bytes
from mla_planner.engines.parallel import deepep_dispatch_tokens, dense_tp, mori_tokens_per_rank
from mla_planner.engines.profile import profile, static_fraction_scale
from mla_planner.memory import terms as mt
from mla_planner.memory.results import MemoryReport, RankMemory
from mla_planner.engines.memory_rules import (EngineRules, StageCosts, activation_tokens, block_size_warning,
                                              engine_rules, fraction_ceiling, profile_run_creates_comm,
                                              kv_budget_bytes, kv_pool, sglang_req_to_token_bytes, sglang_rest_bytes)
from mla_planner.memory.pp_split import layer_split, split_problem
from mla_planner.memory.verdict import ALLOCATOR_MARGIN_BYTES, verdict
from mla_planner.memory.weights import stage_weight_terms
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.knobs import Knobs, decode_query_len
from mla_planner.specs.layout import Layout, layout_problems
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology
from mla_planner.specs.vision import vit_rope_bytes, vllm_profile_output_bytes



def split_pools(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs,
                engine_version: Optional[str] = None):
    """split -> the KV tokens each stage's pool would hold under it: what memory.pp_split.balance weighs. A stage
    with no room scores its budget in MB instead (negative or under a block: below any stage that has
    room, and higher the less it lacks), so a split can still climb out of not fitting."""
    rules, total, memo = engine_rules(knobs.engine, engine_version), float(topo.gpu.memory_bytes), {}

    def pools(split: list[int]) -> list[int]:
        stages, start = [], 0
        for i, n in enumerate(split):
            if (i, start, n) not in memo:
                memo[i, start, n] = _stage(spec, topo, layout, knobs, rules, i, range(start, start + n))
            stages.append(memo[i, start, n])
            start += n
        rest = min(sglang_rest_bytes(knobs, total, s.costs) for s in stages) if profile(rules.engine).pool_after_static_fraction else None
        tokens = [kv_pool(rules, knobs, total, s.costs, layout.dcp, rest)[1] for s in stages]   # as _rank's
        return [t or min(kv_budget_bytes(rules, knobs, total, s.costs, rest) / 1e6, 0.0)
                for t, s in zip(tokens, stages)]
    return pools


def stage_ranges(split: list[int]) -> list[range]:
    """The decoder layers each pipeline stage owns, from layers per stage."""
    out, start = [], 0
    for n in split:
        out.append(range(start, start + n))
        start += n
    return out


def kv_slot_bytes(spec: ModelSpec, layout: Layout, layers, kv_dtype: str, mtp_layers: int = 0) -> float:
    """Bytes one physical token slot costs one GPU over `layers` (a stage's range of decoder layers, or a
    count) and `mtp_layers` MTP layers: every KV group of the model's attention kind at its rank share
    (specs/attention: the MLA latent whole on every TP rank, /tp only when latent-sharded; GQA
    ceil(kv_heads/tp) heads per rank; DSA's index keys on the layers with an indexer)."""
    return attention_of(spec).gpu_bytes_per_token(spec, layout, kv_dtype, layers, mtp_layers)


@dataclass(frozen=True)
class _Stage:
    index: int
    layers: int
    weights: dict
    costs: StageCosts


def _stage(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, rules: EngineRules,
           index: int, rng: range) -> _Stage:
    """The engine-neutral costs of one GPU of stage `index` owning decoder layers `rng`."""
    first, last = index == 0, index == layout.pp - 1
    mtp = knobs.mtp and last
    fp8 = fp8_checkpoint(rules.engine, spec, topo.gpu)
    marlin = profile(rules.engine).fp8_marlin_fallback and bool(fp8 and fp8[0])   # weight-only FP8 Marlin
    weights = stage_weight_terms(spec, layout, rng, first, last, rules.engine, mtp, marlin, knobs.dense_per_rank,
                                 knobs.images, rocm_fp8_pad=rules.engine == "vllm" and topo.gpu.vendor == "amd")
    if knobs.redundant_experts and layout.ep > 1:
        # EPLB's copies: (E + R) / ep experts per EP rank where the checkpoint has E / ep
        weights["weights/redundant_experts"] = (weights.get("weights/routed_experts", 0.0) * knobs.redundant_experts
                                                / spec.n_routed_experts)
    profiled_images = 0.0
    if knobs.images and first and spec.vision_patch_size and not profile(rules.engine).text_only_keeps_vision:
        weights["vision_rope_table"] = vit_rope_bytes(spec.vision_hidden_size, spec.vision_heads)
        profiled_images = vllm_profile_output_bytes(spec.vision_patch_size, spec.vision_merge,
                                                    knobs.max_num_batched_tokens, spec.hidden_size)
    if is_compressed(spec) and rules.engine == "vllm":      # allocated with the weights, charged like them
        weights["model_buffers"] = vllm_buffer_bytes(spec, knobs.max_num_batched_tokens, last, knobs.mtp)
    mtp_layers = spec.draft_layers if mtp else 0
    kv_layers = len(rng) + mtp_layers
    tokens = activation_tokens(rules, knobs, layout)
    ffn_tp = dense_tp(layout, rules.engine, "dense_ffn", knobs.dense_per_rank)
    sizes, modes = capture_plan(rules, knobs, topo.gpu, layout)
    pool = CompressedPool(rules.engine, spec, rng, knobs.max_model_len, knobs.max_num_batched_tokens,
                          knobs.max_num_seqs, in_flight_batches(layout.pp, rules.reserves_in_flight), mtp_layers,
                          knobs.indexer_kv_dtype, decode_query_len(knobs)) if is_compressed(spec) else None
    a2a_name, a2a, heap = mt.a2a_memory_bytes(rules.engine, spec, layout, topo.gpu, deepep_dispatch_tokens(
        rules.engine, knobs.max_num_seqs, knobs.max_num_batched_tokens, decode_query_len(knobs)), mori_tokens_per_rank(
        rules.engine, knobs.max_num_seqs, knobs.max_num_batched_tokens, decode_query_len(knobs)))
    costs = StageCosts(
        weights_bytes=sum(weights.values()),
        activation_bytes=mt.activation_peak_bytes(spec, layout, tokens, min(knobs.max_num_seqs, tokens), last, ffn_tp,
                                                  rules.sampler_sorts) + profiled_images,
        cuda_graph_bytes=mt.cuda_graph_bytes(spec, layout, sizes, modes, last, ffn_tp)
        + sglang_graph_buffer_bytes(rules, spec, knobs, topo.gpu, layout.dcp, sizes, last),
        nccl_bytes=mt.nccl_buffer_bytes(layout, topo, rules.engine, spec.is_moe and rules.expert_group,
                                        rules.nvls_at_init_mib),
        runtime_bytes=mt.runtime_overhead_bytes(topo.gpu),
        slot_bytes=pool.marginal_bytes_per_token() if pool else kv_slot_bytes(spec, layout, rng, knobs.kv_cache_dtype,
                                                                              mtp_layers),
        pool=pool, a2a_bytes=a2a, heap_bytes=heap, a2a_name=a2a_name,
        profiled_comm_bytes=mt.profiled_communicator_bytes(layout, topo, rules.nvls_at_init_mib)   # only the last stage
        if last and profile_run_creates_comm(rules, topo.gpu) else 0.0,
        fraction_scale=static_fraction_scale(knobs, topo.gpu, spec, layout))
    return _Stage(index, kv_layers, weights, costs)


def _stages(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, rules: EngineRules) -> list[_Stage]:
    ranges = stage_ranges(layer_split(spec, layout, knobs))
    return [_stage(spec, topo, layout, knobs, rules, i, r) for i, r in enumerate(ranges)]


def _ranks(stages: list[_Stage], knobs: Knobs, rules: EngineRules, total: float, dcp: int) -> list[RankMemory]:
    """Every stage's GPU; SGLang's KV budget is the smallest over them (engines.memory_rules.sglang_rest_bytes)."""
    rest = min(sglang_rest_bytes(knobs, total, s.costs) for s in stages) if profile(rules.engine).pool_after_static_fraction else None
    return [_rank(s, knobs, rules, total, dcp, rest) for s in stages]


def _rank(stage: _Stage, knobs: Knobs, rules: EngineRules, total: float, dcp: int,
          rest: Optional[float]) -> RankMemory:
    c = stage.costs
    pool_bytes, tokens = kv_pool(rules, knobs, total, c, dcp, rest)
    terms = dict(stage.weights)
    if c.a2a_bytes:
        terms[c.a2a_name] = c.a2a_bytes
    if c.heap_bytes:
        terms["mori_heap"] = c.heap_bytes
    if c.profiled_comm_bytes:
        terms["nccl_profile_run"] = c.profiled_comm_bytes
    terms.update({"activation_peak": c.activation_bytes, "cuda_graph": c.cuda_graph_bytes,
                  "nccl_buffers": c.nccl_bytes, "runtime_overhead": c.runtime_bytes})
    if profile(rules.engine).pool_after_static_fraction:
        terms["req_to_token"] = sglang_req_to_token_bytes(knobs, tokens)
    terms["kv_pool"] = pool_bytes
    terms["free"] = total - sum(terms.values())
    return RankMemory(stage.index, stage.layers, terms, total, c.weights_bytes, pool_bytes,
                      c.slot_bytes / dcp, tokens)


@lru_cache(maxsize=4096)
def evaluate(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs,
             engine_version: Optional[str] = None) -> MemoryReport:
    """`memory_report` without the search for ways out (used by that search itself). Memoised: a plan
    search asks again for the same knobs (screen, tune, metrics); callers treat the report as read-only."""
    problems = layout_problems(layout, spec, topo.gpus_per_node, topo.total_gpus)
    problems += [p for p in [split_problem(spec, layout, knobs)] if p and not problems]
    rules = engine_rules(knobs.engine, engine_version)
    if problems:
        return MemoryReport(knobs.engine, layout, knobs, [], 0, 0, 0, False, [], 0.0, 0, rules.version, 0.0,
                            attention_of(spec).holding(spec, layout), findings=tuple(Reason("layout", p) for p in problems))
    stages, total = _stages(spec, topo, layout, knobs, rules), float(topo.gpu.memory_bytes)
    ranks = _ranks(stages, knobs, rules, total, layout.dcp)
    binding = min(ranks, key=lambda r: r.kv_tokens).pp_stage
    capacity = ranks[binding].kv_tokens
    ceiling, no_safe = _safe_fraction(stages, knobs, rules, total, fraction_ceiling(rules.engine, topo.gpu))
    safe = 0.0 if no_safe else ceiling
    reasons, notes = verdict(ranks, knobs, layout, capacity, safe, stages[0].costs.fraction_scale)
    block = block_size_warning(spec, topo.gpu, knobs, layout.dcp)
    reasons += [Reason("block_size", block, blocks=False)] if block else []
    refusals, engine_notes = startup_problems(knobs.engine, spec, topo.gpu, knobs, layout.dcp)
    reasons += [Reason("engine_refuses", r) for r in refusals]
    notes += engine_notes
    concurrency, longest = capacity / knobs.max_model_len, min(capacity, spec.max_position_embeddings)
    rule = {}
    if stages[binding].costs.pool is not None:   # DeepSeek-V4: capacity in requests, by the engine's own rule
        rule, longest, finding = _compressed_capacity(stages[binding], knobs, rules, total, spec)
        concurrency = rule["concurrent_requests"]
        if finding:    # the engine's own rule replaces the generic one in tokens (and names the real cause)
            reasons = [r for r in reasons if r.code not in ("pool_below_context", "no_kv_room")] + [finding]
    fits = not any(r.blocks for r in reasons)
    return MemoryReport(
        knobs.engine, layout, knobs, ranks, binding, capacity, capacity * layout.dp, fits, [],
        concurrency, longest, rules.version, safe,
        attention_of(spec).holding(spec, layout), notes, no_safe, tuple(reasons), rule)


def _compressed_capacity(stage: _Stage, knobs: Knobs, rules: EngineRules, total: float,
                         spec: ModelSpec) -> tuple[dict, int, Optional[Reason]]:
    """(the engine's capacity facts, the longest max-model-len one request can have, why vLLM refuses to start)
    for a DeepSeek-V4 stage: vLLM starts only when one request of max-model-len fits its blocks beside the null
    block (v1/core/kv_cache_planning.py, which names the longest length that would)."""
    pool, budget = stage.costs.pool, kv_budget_bytes(rules, knobs, total, stage.costs)
    facts = pool.facts(budget)
    longest = pool.longest_len(budget, spec.max_position_embeddings)
    if rules.engine == "sglang" and facts["fixed_state_bytes"] >= budget > 0:
        return facts, longest, Reason("kv_pool", (
            f"SGLang reserves {facts['fixed_state_bytes'] / GiB:,.2f} GiB of C128 state rings for "
            f"{facts['max_running_requests']:,} + 1 request slots before any token, more than its {budget / GiB:,.2f} "
            "GiB KV budget: lower --max-running-requests"))
    if rules.engine == "vllm" and facts["num_blocks"] and not facts["fits_one_request"]:
        return facts, longest, Reason("kv_pool", (
            f"one request of --max-model-len {knobs.max_model_len:,} reserves {facts['blocks_per_request']:,} blocks "
            f"of {facts['bytes_per_block']:,} B, but the pool holds {facts['num_blocks']:,}: vLLM refuses to start "
            f"(the longest that fits: {longest:,}); lower --max-model-len or --max-num-batched-tokens"))
    return facts, longest, None


@lru_cache(maxsize=8192)
def safe_memory_fraction(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs,
                         engine_version: Optional[str] = None, published_ceiling: bool = True) -> float:
    """The highest memory fraction that leaves room for every term the engine does not charge to its
    KV budget, plus ALLOCATOR_MARGIN_BYTES (see `_safe_fraction`); 0.0 for a layout that cannot exist.
    A ceiling for sizing knobs: where even it leaves no room for a KV block, `memory_report`'s
    `safe_fraction` is 0.0 and its `no_safe_fraction` says why, but this still returns the ceiling.
    `published_ceiling` False: vLLM's published 0.95 (fraction_ceiling) is lifted, the model's own limit kept."""
    if layout_problems(layout, spec, topo.gpus_per_node, topo.total_gpus) or split_problem(spec, layout, knobs):
        return 0.0
    rules = engine_rules(knobs.engine, engine_version)
    ceiling = fraction_ceiling(rules.engine, topo.gpu) if published_ceiling or rules.engine == "sglang" else 1.0
    return _safe_fraction(_stages(spec, topo, layout, knobs, rules), knobs, rules, float(topo.gpu.memory_bytes),
                          ceiling)[0]


def _stage_fraction_bytes(s: _Stage, knobs: Knobs, rules: EngineRules, total: float) -> tuple[float, float, float]:
    """(bytes inside the engine's fraction, bytes it must leave outside, the base the fraction is of).
    Inside: weights + one block of KV (+ what vLLM charges to the budget); outside: what the engine does
    not charge + the margin. vLLM: fraction of total; SGLang: of pre-load free (total - runtime - NCCL),
    its slack (1 - f) x pre-load holding activations, graphs and the req_to_token table."""
    c = s.costs
    block = knobs.block_size * c.slot_bytes
    if profile(rules.engine).pool_after_static_fraction:   # the pool at s x f of pre-load memory (s: its ROCm reserve)
        slack = c.activation_bytes + c.cuda_graph_bytes + sglang_req_to_token_bytes(knobs, knobs.max_num_seqs * 2)
        base, s = total - c.runtime_bytes - c.nccl_bytes, c.fraction_scale
        return c.weights_bytes + c.a2a_bytes + block, slack + c.heap_bytes + ALLOCATOR_MARGIN_BYTES - (1 - s) * base, \
            s * base
    charged = c.weights_bytes + c.a2a_bytes + c.activation_bytes + c.profiled_comm_bytes + block
    outside = ALLOCATOR_MARGIN_BYTES + c.heap_bytes
    for term, outside_budget in ((c.runtime_bytes, rules.context_outside_budget),
                                 (c.nccl_bytes, rules.comms_outside_budget)):
        charged, outside = (charged, outside + term) if outside_budget else (charged + term, outside)
    graphs = c.cuda_graph_bytes if knobs.cuda_graphs else 0.0
    charged, outside = (charged + graphs, outside) if rules.graphs_in_budget else (charged, outside + graphs)
    return charged, outside, total


def _safe_fraction(stages: list[_Stage], knobs: Knobs, rules: EngineRules, total: float,
                   engine_ceiling: float = 1.0) -> tuple[float, str]:
    """(ceiling, why none): the ceiling is 1 - outside / base, minimum over stages, and never above the
    engine's own (`engine_ceiling`), floored to 0.001; the reason is set when at the ceiling a stage has
    no room for one KV block (no fraction is both safe and leaves a KV cache)."""
    sized = [(s, *_stage_fraction_bytes(s, knobs, rules, total)) for s in stages]
    own = min(1 - outside / base for _, _, outside, base in sized)
    safe = max(int(min(own, engine_ceiling) * 1000) / 1000, 0.0)
    gib = GiB
    ceiling_binds = engine_ceiling < own and all(inside <= own * base for _, inside, _, base in sized)
    for s, inside, outside, base in sized:
        if s.costs.weights_bytes >= total:
            return safe, (f"no fraction fits: the weights alone ({s.costs.weights_bytes / gib:,.1f} GiB per GPU on "
                         f"stage {s.index}) exceed the GPU's {total / gib:,.1f} GiB")
        if inside > safe * base and ceiling_binds and rules.engine == "vllm":   # only the published ceiling
            return safe, (f"no fraction up to {safe:.3f}, the highest published vLLM deployments use, fits: on stage "
                          f"{s.index} the weights and one KV block need {inside / gib:,.1f} GiB of the budget; a "
                          "higher --gpu-memory-utilization may start, with less headroom than they keep")
        if inside > safe * base and ceiling_binds:   # only SGLang's own ceiling stands in the way
            return safe, (f"no fraction up to SGLang's own ceiling {safe:.3f} fits: on stage {s.index} the weights "
                          f"({s.costs.weights_bytes / gib:,.1f} GiB per GPU) and one KV block"
                          + (f" with {mt.A2A_WORDS[s.costs.a2a_name]} ({s.costs.a2a_bytes / gib:,.1f} GiB)"
                             if s.costs.a2a_bytes else "")
                          + f" need {inside / gib:,.1f} GiB of its static pool, more than {safe:.3f} x "
                          f"{base / gib:,.1f} GiB; SGLang keeps at least 10 GiB outside it when it picks the fraction "
                          "itself, so a higher --mem-fraction-static leaves less headroom than its own rule")
        if inside > safe * base:
            extra = "activations, CUDA graphs, runtime/NCCL buffers"
            extra += ", the req_to_token table" if profile(rules.engine).pool_after_static_fraction else ""
            return safe, (f"no fraction fits: on stage {s.index} the weights ({s.costs.weights_bytes / gib:,.1f} GiB "
                         f"per GPU), one KV block, {extra} and the {ALLOCATOR_MARGIN_BYTES / gib:.0f} GiB margin "
                         f"need {(inside + outside + total - base) / gib:,.1f} GiB, more than the GPU's "
                         f"{total / gib:,.1f} GiB")
    return safe, ""
