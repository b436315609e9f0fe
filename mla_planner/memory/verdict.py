"""What a memory report concludes from its stages: why a stage does not fit (or is at risk), and the notes a
reader needs (which stage binds the pool, a fraction above the safe one)."""

from __future__ import annotations

from mla_planner.core.reason import Reason
from mla_planner.core.units import GiB, MiB
from mla_planner.engines.memory_rules import VLLM_PUBLISHED_CEILING
from mla_planner.engines.profile import profile
from mla_planner.memory.results import RankMemory
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout

ALLOCATOR_MARGIN_BYTES = 2 * GiB  # headroom we keep for caching-allocator fragmentation and transient
                                     # library workspaces beyond the modelled terms (our choice, not an engine figure)


def _stage_reasons(r: RankMemory, knobs: Knobs, safe: float) -> list[Reason]:
    """Why one stage does not fit, or its risk."""
    gib, free = GiB, r.terms["free"]
    if r.weights_bytes >= r.total_bytes:
        return [Reason("weights_exceed_gpu", f"stage {r.pp_stage}: the weights alone ({r.weights_bytes / gib:,.1f} GiB per GPU) exceed the "
                f"GPU's {r.total_bytes / gib:,.1f} GiB")]
    if r.kv_tokens == 0:
        budget = r.total_bytes * knobs.memory_fraction
        return [Reason("no_kv_room", f"stage {r.pp_stage}: no room for a KV cache: weights {r.weights_bytes / gib:,.1f} GiB per GPU plus "
                f"activations and runtime use up the engine's budget ({knobs.memory_fraction:g} x "
                f"{r.total_bytes / gib:,.1f} GiB = {budget / gib:,.1f} GiB)")]
    if free < 0:
        short = f"{-free / gib:,.1f} GiB" if -free >= 0.1 * gib else f"{-free / MiB:,.0f} MiB"
        return [Reason("out_of_memory", f"stage {r.pp_stage}: {short} short once the KV pool, activations and CUDA graphs "
                f"are in place (out of memory at graph capture or the first long prefill)" + _use(safe, "at most "))]
    if free < ALLOCATOR_MARGIN_BYTES:
        return [Reason("below_margin", f"stage {r.pp_stage}: only {free / gib:,.1f} GiB left free (below the "
                       f"{ALLOCATOR_MARGIN_BYTES / gib:.0f} GiB margin)" + _use(safe, ""), blocks=False)]
    return []


def _use(safe: float, bound: str) -> str:
    if safe:
        return f"; use a memory fraction of {bound}{safe:.3f}"
    return "; no memory fraction leaves both a KV cache and the margin"


def verdict(ranks: list[RankMemory], knobs: Knobs, layout: Layout, capacity: int,
            safe: float, fraction_scale: float = 1.0) -> tuple[list[Reason], list[str]]:
    """Why it does not fit or is at risk (Reason.blocks tells which), and notes; `fraction_scale`: the factor the
    engine applies to the fraction itself (SGLang's aiter reserve on ROCm: engines.profile.static_fraction_scale)."""
    reasons, notes = [], []
    if fraction_scale != 1.0:
        notes.append(f"SGLang's aiter backend sizes its static pool at {fraction_scale:g} x --mem-fraction-static "
                     f"({knobs.memory_fraction:g} -> {knobs.memory_fraction * fraction_scale:.3f}) above 8,192 tokens "
                     "of context, keeping AITER's workspace outside it (arg_groups/attention_hook.py); priced here")
    for r in ranks:
        reasons += _stage_reasons(r, knobs, safe)
    if 0 < capacity < knobs.max_model_len:
        if not profile(knobs.engine).short_pool_refuses_start:   # SGLang managers/tp_worker.py: max_req_len
            reasons.append(Reason("pool_below_context", f"the KV pool holds {capacity:,} tokens, fewer than "
                                  f"--context-length {knobs.max_model_len:,}: SGLang starts but caps every request at "
                                  f"{capacity - 1:,} tokens (prompt + output) and turns longer ones away"))
        else:
            reasons.append(Reason("pool_below_context", f"the KV pool holds {capacity:,} tokens, fewer than "
                                  f"--max-model-len {knobs.max_model_len:,} (the engine refuses to start); the longest "
                                  f"that fits is {capacity:,}"))
    if len(ranks) > 1 and len({r.kv_tokens for r in ranks}) > 1:
        notes.append(f"stage {min(ranks, key=lambda r: r.kv_tokens).pp_stage} binds: the engine sizes every stage's "
                     f"pool to the minimum, {capacity:,} tokens")
    if layout.kv_layout == "latent-sharded":
        notes.append("latent-sharded KV (the seed's Route B) is not implemented by vLLM or SGLang; a planning figure")
    if 0 < safe < knobs.memory_fraction:
        published = knobs.engine == "vllm" and safe == VLLM_PUBLISHED_CEILING   # the ceiling, not the model, binds
        notes.append(f"memory fraction {knobs.memory_fraction:g} is above " + (
            f"the {safe:.2f} published vLLM deployments use (the memory model's own margin may still hold: the plan "
            "goes above it only where a request needs it)" if published else f"the safe {safe:.3f} predicted here"))
    return reasons, notes
