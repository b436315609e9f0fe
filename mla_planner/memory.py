"""Per-GPU memory of an MLA deployment, as the engine will count it: weights, activations, CUDA graphs,
communication buffers, runtime and the KV pool, for one representative GPU of every pipeline stage.

Each `RankMemory.terms` is an ordered set of named byte counts that sums to the GPU's memory
(nanoGPT-sizing style). Which terms an engine charges to its KV budget, and how it rounds the pool,
is `engine_memory`'s business; the physics of each term is `memory_terms` and `memory_weights`.
The KV cost of a token on one GPU follows MLA_MATH.md section 8: layers on the stage x 576 x bytes,
NOT divided by TP (every TP rank stores every token's latent), / tp only for the latent-sharded
layout, / dcp when decode context parallelism splits the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import ceil
from typing import Optional

from . import memory_terms as mt
from .engine_memory import (EngineRules, StageCosts, activation_tokens, capture_plan, default_memory_fraction,
                            engine_rules, kv_pool, sglang_req_to_token_bytes)
from .knobs import Knobs
from .layout import Layout, layout_problems
from .memory_weights import dense_tp, stage_weight_terms
from .sizing import kv_bytes_per_token_layer
from .spec import ModelSpec
from .topology import Topology

__all__ = ["RankMemory", "MemoryReport", "memory_report", "stage_layers", "default_memory_fraction",
           "safe_memory_fraction", "kv_slot_bytes"]

ALLOCATOR_MARGIN_BYTES = 2 * mt.GiB  # headroom we keep for caching-allocator fragmentation and transient
                                     # library workspaces beyond the modelled terms (our choice, not an engine figure)


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
    safe_fraction: float = 0.0
    kv_holding: str = ""
    notes: list[str] = field(default_factory=list)


def stage_layers(num_layers: int, pp: int, engine: str = "vllm") -> list[int]:
    """Decoder layers per pipeline stage as the engine splits them (without VLLM_PP_LAYER_PARTITION /
    SGLANG_PP_LAYER_PARTITION). vLLM `distributed/utils.get_pp_indices`: even split, the remainder one
    each to the stages before the last, from the second-to-last backwards (61/4 -> [15, 15, 16, 15],
    USER_PROBLEMS.md #21); SGLang `distributed/utils.get_pp_indices`: the remainder to the last stages."""
    base, rem = divmod(num_layers, pp)
    parts = [base] * pp
    for i in range(rem):
        if engine == "sglang":
            parts[pp - 1 - i] += 1
        else:
            parts[(pp - 2 - i) % pp] += 1
    return parts


def _stage_ranges(num_layers: int, pp: int, engine: str) -> list[range]:
    out, start = [], 0
    for n in stage_layers(num_layers, pp, engine):
        out.append(range(start, start + n))
        start += n
    return out


def kv_slot_bytes(spec: ModelSpec, layout: Layout, layers: int, kv_dtype: str) -> float:
    """Bytes one physical token slot costs one GPU: layers x bytes/token/layer (sizing), the MLA latent
    whole on every TP rank (/tp only when latent-sharded); GQA keeps ceil(kv_heads/tp) heads per rank."""
    per_layer = kv_bytes_per_token_layer(spec, kv_dtype)
    if spec.attention == "gqa":
        per_layer *= ceil(spec.kv_heads / layout.tp) / spec.kv_heads
    elif layout.kv_layout == "latent-sharded":
        per_layer /= layout.tp
    return layers * per_layer


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
    weights = stage_weight_terms(spec, layout, rng, first, last, rules.engine, mtp)
    kv_layers = len(rng) + (spec.num_nextn_predict_layers if mtp else 0)
    tokens = activation_tokens(rules, knobs, layout)
    ffn_tp = dense_tp(layout, rules.engine, "dense_ffn")
    sizes, modes = capture_plan(rules, knobs, topo.gpu, layout)
    costs = StageCosts(
        weights_bytes=sum(weights.values()),
        activation_bytes=mt.activation_peak_bytes(spec, layout, tokens, min(knobs.max_num_seqs, tokens), last, ffn_tp),
        cuda_graph_bytes=mt.cuda_graph_bytes(spec, layout, sizes, modes, last, ffn_tp),
        nccl_bytes=mt.nccl_buffer_bytes(layout),
        runtime_bytes=mt.runtime_overhead_bytes(),
        slot_bytes=kv_slot_bytes(spec, layout, kv_layers, knobs.kv_cache_dtype))
    return _Stage(index, kv_layers, weights, costs)


def _rank(stage: _Stage, knobs: Knobs, rules: EngineRules, total: float, dcp: int) -> RankMemory:
    c = stage.costs
    pool_bytes, tokens = kv_pool(rules, knobs, total, c, dcp)
    terms = dict(stage.weights)
    terms.update({"activation_peak": c.activation_bytes, "cuda_graph": c.cuda_graph_bytes,
                  "nccl_buffers": c.nccl_bytes, "runtime_overhead": c.runtime_bytes})
    if rules.engine == "sglang":
        terms["req_to_token"] = sglang_req_to_token_bytes(knobs, tokens)
    terms["kv_pool"] = pool_bytes
    terms["free"] = total - sum(terms.values())
    return RankMemory(stage.index, stage.layers, terms, total, c.weights_bytes, pool_bytes,
                      c.slot_bytes / dcp, tokens)


def evaluate(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs,
             engine_version: Optional[str] = None) -> MemoryReport:
    """`memory_report` without the search for ways out (used by that search itself)."""
    problems = layout_problems(layout, spec, topo.gpus_per_node, topo.total_gpus)
    rules = engine_rules(knobs.engine, engine_version)
    if problems:
        return MemoryReport(knobs.engine, layout, knobs, [], 0, 0, 0, False, problems, [], 0.0, 0,
                            rules.version, 0.0, layout.kv_holding())
    ranges = _stage_ranges(spec.num_hidden_layers, layout.pp, rules.engine)
    stages = [_stage(spec, topo, layout, knobs, rules, i, r) for i, r in enumerate(ranges)]
    total = float(topo.gpu.memory_bytes)
    ranks = [_rank(s, knobs, rules, total, layout.dcp) for s in stages]
    binding = min(ranks, key=lambda r: r.kv_tokens).pp_stage
    capacity = ranks[binding].kv_tokens
    safe = _safe_fraction(stages, knobs, rules, total)
    reasons, notes = _verdict(ranks, knobs, layout, capacity, safe)
    if "fp8" in (spec.weight_dtype, spec.expert_dtype) and not topo.gpu.has_fp8:
        notes.append(f"{topo.gpu.name} has no FP8 tensor cores: the FP8 checkpoint needs a BF16/INT8 conversion "
                     f"there (USER_PROBLEMS.md section B), which changes the weight bytes")
    fits = not any(r.startswith("!") for r in reasons)
    return MemoryReport(
        knobs.engine, layout, knobs, ranks, binding, capacity, capacity * layout.dp, fits,
        [r.lstrip("!") for r in reasons], [], capacity / knobs.max_model_len,
        min(capacity, spec.max_position_embeddings), rules.version, safe, layout.kv_holding(), notes)


def memory_report(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs,
                  engine_version: Optional[str] = None) -> MemoryReport:
    """Per-GPU memory, the KV capacity the engine will report, a FITS verdict and, when it does not
    fit, the cheapest ways out found by re-running this model on the alternatives."""
    from .memory_ways_out import ways_out  # it re-runs `evaluate`, so it imports this module

    report = evaluate(spec, topo, layout, knobs, engine_version)
    if report.fits or not report.per_gpu:
        return report
    return replace(report, ways_out=ways_out(spec, topo, layout, knobs, engine_version))


def safe_memory_fraction(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs,
                         engine_version: Optional[str] = None) -> float:
    """The highest memory fraction that leaves room for every term the engine does not charge to its
    KV budget, plus ALLOCATOR_MARGIN_BYTES (see `_safe_fraction`)."""
    return evaluate(spec, topo, layout, knobs, engine_version).safe_fraction


def _safe_fraction(stages: list[_Stage], knobs: Knobs, rules: EngineRules, total: float) -> float:
    """vLLM: 1 - (baseline runtime + NCCL when measured before the budget, graphs when not charged,
    margin) / total. SGLang: the slack (1 - f) x pre-load free must hold activations, graphs, the
    req_to_token table and the margin. Minimum over stages, floored to 0.001."""
    out = 1.0
    for s in stages:
        c = s.costs
        if rules.engine == "sglang":
            pre_load = total - c.runtime_bytes - c.nccl_bytes
            slack = c.activation_bytes + c.cuda_graph_bytes + sglang_req_to_token_bytes(knobs, knobs.max_num_seqs * 2)
            frac = 1 - (slack + ALLOCATOR_MARGIN_BYTES) / pre_load
        else:
            outside = ALLOCATOR_MARGIN_BYTES
            outside += c.runtime_bytes + c.nccl_bytes if rules.baseline_outside_budget else 0.0
            outside += c.cuda_graph_bytes if not rules.graphs_in_budget and knobs.cuda_graphs else 0.0
            frac = 1 - outside / total
        out = min(out, frac)
    return max(int(out * 1000) / 1000, 0.0)


def _stage_reasons(r: RankMemory, knobs: Knobs, safe: float) -> list[str]:
    """Why one stage does not fit (leading '!'), or its risk."""
    gib, free = mt.GiB, r.terms["free"]
    if r.weights_bytes >= r.total_bytes:
        return [f"!stage {r.pp_stage}: the weights alone ({r.weights_bytes / gib:,.1f} GiB per GPU) exceed the "
                f"GPU's {r.total_bytes / gib:,.1f} GiB"]
    if r.kv_tokens == 0:
        budget = r.total_bytes * knobs.memory_fraction
        return [f"!stage {r.pp_stage}: no room for a KV cache: weights {r.weights_bytes / gib:,.1f} GiB per GPU plus "
                f"activations and runtime use up the engine's budget ({knobs.memory_fraction:g} x "
                f"{r.total_bytes / gib:,.1f} GiB = {budget / gib:,.1f} GiB)"]
    if free < 0:
        return [f"!stage {r.pp_stage}: {-free / gib:,.1f} GiB short once the KV pool, activations and CUDA graphs "
                f"are in place (out of memory at graph capture or the first long prefill); use a memory fraction "
                f"of at most {safe:.3f}"]
    if free < ALLOCATOR_MARGIN_BYTES:
        return [f"stage {r.pp_stage}: only {free / gib:,.1f} GiB left free; a memory fraction of {safe:.3f} keeps "
                f"{ALLOCATOR_MARGIN_BYTES / gib:.0f} GiB"]
    return []


def _verdict(ranks: list[RankMemory], knobs: Knobs, layout: Layout, capacity: int,
             safe: float) -> tuple[list[str], list[str]]:
    """Reasons (a leading '!' marks one that makes it not fit) and notes."""
    reasons, notes = [], []
    for r in ranks:
        reasons += _stage_reasons(r, knobs, safe)
    if 0 < capacity < knobs.max_model_len:
        reasons.append(f"!the KV pool holds {capacity:,} tokens, fewer than --max-model-len {knobs.max_model_len:,} "
                       f"(the engine refuses to start); the longest that fits is {capacity:,}")
    if len(ranks) > 1 and len({r.kv_tokens for r in ranks}) > 1:
        notes.append(f"stage {min(ranks, key=lambda r: r.kv_tokens).pp_stage} binds: the engine sizes every stage's "
                     f"pool to the minimum, {capacity:,} tokens")
    if layout.kv_layout == "latent-sharded":
        notes.append("latent-sharded KV (the seed's Route B) is not implemented by vLLM or SGLang; a planning figure")
    if knobs.memory_fraction > safe:
        notes.append(f"memory fraction {knobs.memory_fraction:g} is above the safe {safe:.3f} predicted here")
    return reasons, notes
