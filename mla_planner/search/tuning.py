"""Launch knobs for one layout, each chosen from the models with its reason.

Order matters and mirrors how the engines fail: the attention backend first (the GPU architecture,
the KV dtype and DCP decide which ones run), then the block size that backend accepts, then the
memory fraction the memory model says is safe, then the concurrency the KV pool and the TPOT target
allow, then the prefill chunk that keeps decode steps within the TPOT target.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from math import ceil

from mla_planner.engines.layouts import engine_layout_problem
from mla_planner.engines.multimodal import images_reason
from mla_planner.engines.profile import profile, static_fraction_scale
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.engines.backends import fp8_checkpoint
from mla_planner.engines.parallel import dense_per_rank_applies, redundant_experts_problem, uses_deepep
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.compressed_pool import indexer_choice, indexer_reason
from mla_planner.memory.accounting import evaluate as memory_evaluate, safe_memory_fraction
from mla_planner.perf.metrics import Metrics, evaluate, tokens_per_request
from mla_planner.perf.request_times import mean_tpot_s
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs, Workload, tokens_per_step
from mla_planner.specs.layout import Layout
from mla_planner.search.attention_backend import Rejected, attention_choice
from mla_planner.search.reasons import (MAX_NUM_SEQS_CAP, chunk_reason, dense_reason, fraction_reason, limit_words,
                                        stall_words)
from mla_planner.search.limits import choose_graph_cap, choose_split, fit_by_split, regain_kv_room
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

CHUNK_CANDIDATES = (2048, 4096, 8192, 16384)   # max-num-batched-tokens / chunked-prefill-size tried
DEEPEP_CHUNKS = (256, 512, 1024)                # vLLM sizes its DeepEP low-latency buffer for this many tokens
                                                # (memory.terms.deepep_buffer_bytes: 3.6 GiB per 256 for V3)


@dataclass(frozen=True)
class Tuned:
    knobs: Knobs
    metrics: Metrics
    reasons: dict
    draft_batch: int = 0     # the largest batch at the draft chunk (a hint for a sibling's tuning)


@dataclass(frozen=True)
class Overrides:
    """Knobs the user pins on the command line; the planner works around them and says what they cost."""
    block_size: int | None = None
    cuda_graphs: bool = True
    mtp: bool = False             # speculative decoding with the model's MTP layer (--mtp; search.mtp.mtp_hint)
    mtp_draft_tokens: int | None = None   # tokens it drafts per step (--mtp-draft-tokens; None: the drafter's own)
    images: bool = False          # serve image inputs on a multimodal checkpoint (--images; else text-only)
    redundant_experts: int = 0    # EPLB's redundant experts on layouts with EP (--redundant-experts)


def dense_variants(layout: Layout, engine: str) -> tuple[bool, ...]:
    """The `dense_per_rank` settings worth tuning: both for SGLang under DP attention at tp = 1 (its default
    splits the dense MLP and lm_head over every GPU of the stage and gathers every rank's tokens; the large-scale
    EP recipe runs them per rank, at the cost of holding them whole), else only the engine's own way."""
    return (False, True) if dense_per_rank_applies(layout, engine) else (False,)


def draft_knobs(spec: ModelSpec, topo: Topology, layout: Layout, engine: str, kv_dtype: str,
                workload: Workload, pinned: Overrides = Overrides(),
                dense_per_rank: bool = False) -> tuple[Knobs, dict]:
    """Backend, block size, max-model-len and the safe memory fraction; sizing knobs at their caps.
    Memoised (screening and tuning ask for the same draft); the reasons are a fresh dict each call."""
    knobs, reasons = _draft_knobs(spec, topo, layout, engine, kv_dtype, workload, pinned, dense_per_rank)
    return knobs, dict(reasons)


@lru_cache(maxsize=4096)
def _draft_knobs(spec: ModelSpec, topo: Topology, layout: Layout, engine: str, kv_dtype: str,
                 workload: Workload, pinned: Overrides, dense_per_rank: bool = False) -> tuple[Knobs, dict]:
    gpu = topo.gpu
    fp8 = fp8_checkpoint(engine, spec, gpu)
    if fp8 and not fp8[0]:
        raise Rejected(fp8[1])
    problem = engine_layout_problem(spec, topo, layout, engine, dense_per_rank)
    if problem:
        raise Rejected(problem)
    backend_name, kv_dtype, block, why_backend, why_block = attention_choice(spec, gpu, layout, engine, kv_dtype,
                                                                              pinned.block_size, pinned.mtp)
    context = workload.max_context_len
    if context > spec.max_position_embeddings:
        raise Rejected(f"the workload's {context:,}-token context exceeds the model's "
                       f"max_position_embeddings {spec.max_position_embeddings:,}")
    max_len = ceil(context / max(block, 1)) * max(block, 1)
    cap = _seq_cap(layout, workload)
    if pinned.mtp and spec.drafter is None:
        raise Rejected(f"{spec.name} has no MTP layer to draft tokens with{spec.no_mtp_head_why}")
    redundant = pinned.redundant_experts if layout.ep > 1 else 0
    if redundant_experts_problem(spec, layout, redundant):
        raise Rejected(redundant_experts_problem(spec, layout, redundant))
    knobs = Knobs(engine=engine, block_size=block, kv_cache_dtype=kv_dtype, memory_fraction=0.9,
                  max_num_seqs=cap, max_num_batched_tokens=chunk_candidates(engine, layout, topo.gpu)[0],
                  max_model_len=min(max_len, spec.max_position_embeddings),
                  attention_backend=backend_name, prefix_caching=True, cuda_graphs=pinned.cuda_graphs,
                  mtp=bool(pinned.mtp), mtp_draft_tokens=pinned.mtp_draft_tokens or spec.default_draft_tokens,
                  dense_per_rank=dense_per_rank,
                  indexer_kv_dtype=indexer_choice(engine, spec, topo.gpu), images=pinned.images,
                  redundant_experts=redundant)
    # the fraction is sized for the largest chunk and sequence cap tried, so the final (smaller) knobs stay safe;
    # where that leaves no KV room, for the largest chunk that does (choose_chunk then stays at or below it)
    chunks = chunk_candidates(engine, layout, topo.gpu)
    for worst in reversed(chunks):
        fraction = safe_memory_fraction(spec, topo, layout, replace(knobs, max_num_batched_tokens=worst))
        if worst == chunks[0] or memory_evaluate(spec, topo, layout, replace(knobs, memory_fraction=fraction)).fits:
            break
    if engine == "vllm" and not memory_evaluate(spec, topo, layout, replace(knobs, memory_fraction=fraction)).fits:
        own = safe_memory_fraction(spec, topo, layout, replace(knobs, max_num_batched_tokens=worst),
                                   published_ceiling=False)     # vLLM's published 0.95 lifted where nothing fits under it
        if own > fraction and memory_evaluate(spec, topo, layout, replace(knobs, memory_fraction=own)).fits:
            fraction = own
    knobs = replace(knobs, memory_fraction=fraction)  # already floored to 0.001
    knobs, why_split = fit_by_split(spec, topo, layout, knobs, worst)
    kind = attention_of(spec)
    reasons = {
        "attention_backend": why_backend,
        "block_size": why_block,
        "max_model_len": f"{knobs.max_model_len:,}: the workload's longest request ({context:,} tokens) rounded "
                         f"to whole blocks; never the model's {spec.max_position_embeddings:,} default. The engine "
                         "refuses longer requests (prompt + max_tokens, chat template included): give the p99 "
                         "lengths with that headroom",
        "memory_fraction": fraction_reason(engine, gpu, knobs.memory_fraction),
        "kv_cache_dtype": "fp8_ds_mla: both engines keep DeepSeek-V4's rows in FlashMLA's 584-byte fp8 layout "
                          "(auto and fp8 become it; bf16 rows are not modelled)" if is_compressed(spec) else
                          ((f"fp8 halves the latent cache ({kind.bytes_per_token_layer(spec, 'fp8'):.0f} B/token/layer) "
                            "on a backend that supports it" if kind.latent else "fp8 halves the K/V cache")
                           + "; its accuracy varies by backend and model: score a small eval against bf16 before "
                             "serving (the emitted README says how)")
                          if kv_dtype == "fp8" else
                          "fp8_ds_mla: the sparse MLA backend this GPU runs stores fp8 rows with their scales whatever "
                          "the cache was asked for (attention_backend says which and why)"
                          if knobs.kv_cache_dtype == "fp8_ds_mla" else "bf16 (the engine's `auto` for this checkpoint)",
        "prefix_caching": "on: hits skip prefill, and a miss costs only the hash of each full block"
                          + (f"; expected hit rate {workload.prefix_hit_rate:.0%}" if workload.prefix_hit_rate else ""),
        "cuda_graphs": "on: decode without CUDA graphs waits for the host to dispatch every layer (see "
                       "--enforce-eager's cost)" if pinned.cuda_graphs else
                       "off, as pinned by --enforce-eager: the host dispatches every layer of every step",
    }
    if knobs.images:
        reasons["images"] = images_reason(engine, spec, knobs.max_num_batched_tokens)
    if redundant:
        reasons["redundant_experts"] = (f"{redundant} per MoE layer, as asked by --redundant-experts: EPLB keeps "
                                        f"{(spec.n_routed_experts + redundant) // layout.ep} experts on each EP rank "
                                        f"where the checkpoint needs {spec.n_routed_experts // layout.ep}, and moves "
                                        "them to balance the load (their weights are counted; the step model prices "
                                        "the experts' load as balanced either way)")
    if why_split:
        reasons["pp_layer_partition"] = why_split
    if dense_per_rank_applies(layout, engine):
        reasons["dense_per_rank"] = dense_reason(spec, layout, dense_per_rank)
    if knobs.indexer_kv_dtype != "fp8":
        reasons["indexer_kv_dtype"] = indexer_reason(topo.gpu)
    if knobs.mtp:
        drafts = f"{knobs.mtp_draft_tokens} token" + ("s" if knobs.mtp_draft_tokens > 1 else "")
        who = "the DSpark draft (its layers once per step)" if spec.drafter == "dspark" else "the MTP layer"
        reasons["mtp"] = (f"on, as asked by --mtp: {who} drafts {drafts} per step, "
                          f"{tokens_per_step(knobs, workload.mtp_acceptance):.2f} tokens per step at "
                          f"{workload.mtp_acceptance:.0%} acceptance")
    return knobs, reasons


def _seq_cap(layout: Layout, workload: Workload) -> int:
    """Per DP rank: the offered concurrency spread over DP ranks and replicas, or the engine's cap."""
    if workload.concurrency:
        return max(1, min(MAX_NUM_SEQS_CAP, ceil(workload.concurrency / (layout.dp * layout.replicas))))
    return MAX_NUM_SEQS_CAP


def chunk_candidates(engine: str, layout: Layout, gpu) -> tuple[int, ...]:
    """Prefill chunks worth trying. vLLM with DeepEP sizes the all-to-all buffer for the whole token budget
    (4 x experts x tokens x ~2 x hidden bytes), so there the budget stays small; MoRI's heap (AMD) is outside the
    budget and sized by the scripts, so it does not."""
    return DEEPEP_CHUNKS if profile(engine).deepep_buffer_by_budget and uses_deepep(layout, gpu) else CHUNK_CANDIDATES


def largest_safe_chunk(spec, topo, layout, knobs: Knobs) -> int:
    """The largest chunk tried at which the knobs' memory fraction is still safe (the draft sizes it for the
    largest chunk, or a smaller one where the largest leaves no KV room)."""
    chunks = chunk_candidates(knobs.engine, layout, topo.gpu)
    for c in reversed(chunks):   # the safe fraction only falls as the chunk grows: the first safe one is the largest
        if safe_memory_fraction(spec, topo, layout, replace(knobs, max_num_batched_tokens=c)) >= \
                knobs.memory_fraction - 1e-9:
            return c
    return chunks[0]


def choose_chunk(spec, topo, layout, knobs: Knobs, workload: Workload, calib: Calibration,
                 batch: int) -> tuple[int, str]:
    """The largest prefill chunk whose stalls keep mean TPOT within target at `batch`, and why in a few
    words (the numbers are added once the batch is final, `chunk_reason`); bigger chunks cut TTFT (fewer
    rounds) but stretch the decode steps that carry them (vllm-project/vllm#25290)."""
    target = workload.tpot_ms / 1e3
    chunks = chunk_candidates(knobs.engine, layout, topo.gpu)
    best, top, room = chunks[0], largest_safe_chunk(spec, topo, layout, knobs), True
    for chunk in (c for c in chunks if c <= top):
        k = replace(knobs, max_num_batched_tokens=chunk)
        # vLLM charges the chunk's activations (and the DeepEP buffer, sized for it) to its KV budget: a
        # chunk must leave the KV room for `batch`
        charged = not profile(k.engine).pool_after_static_fraction   # SGLang keeps it outside its static pool
        mem = memory_evaluate(spec, topo, layout, k) if charged else None
        if mem and (not mem.fits or mem.requests_fit(tokens_per_request(workload, k.block_size)) < batch):
            room = False
            continue
        tpot = mean_tpot_s(spec, topo, layout, k, workload, calib, max(batch, 1))[0]
        if tpot <= target or not workload.tpot_applies:
            best = chunk
    if chunks is DEEPEP_CHUNKS:
        return best, "vLLM sizes the DeepEP buffer for this token budget, so larger budgets cost KV memory"
    if best == chunks[-1]:
        return best, ""
    return best, ("larger chunks would take the KV room of the batch (vLLM charges their activations to its "
                  "budget)" if not room else "larger chunks would push decode steps past the TPOT target"
                  if best < top else "the memory fraction leaves no room for larger chunks' activations")


def tune(spec: ModelSpec, topo: Topology, layout: Layout, engine: str, kv_dtype: str, workload: Workload,
         calib: Calibration, pinned: Overrides = Overrides(), over_target: int = 0, batch_hint: int = 0,
         dense_per_rank: bool = False) -> Tuned:
    """Every knob for this layout, engine and KV dtype, and the metrics they give; Rejected if it can't serve.
    `over_target` (a batch whose decode step alone misses the TPOT target, so whatever the chunk) and
    `batch_hint` (a sibling's `draft_batch`: the same layout under another engine or KV dtype) only speed
    up the search for the largest batch. `dense_per_rank`: which way SGLang runs its dense parts
    (Knobs.dense_per_rank; search.py tunes both where `dense_variants` offers both)."""
    knobs, reasons = draft_knobs(spec, topo, layout, engine, kv_dtype, workload, pinned, dense_per_rank)
    mem = memory_evaluate(spec, topo, layout, knobs)
    if not mem.fits:
        raise Rejected(mem.reasons[0] if mem.reasons else "does not fit")
    first = evaluate(spec, topo, layout, knobs, workload, calib, batch_hint, over_target)
    worst = largest_safe_chunk(spec, topo, layout, knobs)
    fitted = knobs.pp_layer_partition, reasons.get("pp_layer_partition")   # a split the draft needed to fit
    knobs, first, reasons["pp_layer_partition"] = choose_split(spec, topo, layout, knobs, workload, calib, first, worst)
    if fitted[1] and knobs.pp_layer_partition == fitted[0]:
        reasons["pp_layer_partition"] = fitted[1]
    knobs, first, reasons["cuda_graph_max_bs"] = choose_graph_cap(spec, topo, layout, knobs, workload, calib, first,
                                                                  worst)
    if reasons["cuda_graph_max_bs"] and knobs.cuda_graph_max_bs and not knobs.pp_layer_partition:
        # more graphs may have made the KV pool the limit: the split may now help
        knobs, first, reasons["pp_layer_partition"] = choose_split(spec, topo, layout, knobs, workload, calib, first,
                                                                   worst)
    reasons = {k: v for k, v in reasons.items() if v}
    if not first.capacity_per_dp_rank:
        raise Rejected("; ".join(first.notes[-1:]) or "cannot serve one request within the targets")
    chunk, chunk_why = choose_chunk(spec, topo, layout, knobs, workload, calib, first.capacity_per_dp_rank)
    knobs = replace(knobs, max_num_batched_tokens=chunk)
    m = evaluate(spec, topo, layout, knobs, workload, calib, first.capacity_per_dp_rank, over_target) \
        if chunk != knobs_chunk(first) else first
    if not m.capacity_per_dp_rank:   # the chunk cost the batch its room: keep the draft chunk
        knobs, m = replace(knobs, max_num_batched_tokens=knobs_chunk(first)), first
        chunk, chunk_why = knobs_chunk(first), "a larger chunk leaves no KV room for the batch"
    knobs, m = regain_kv_room(spec, topo, layout, knobs, workload, calib, m)
    # the range was fitted at the draft chunk; the chosen chunk may stall less, and the batch grow into it
    knobs, m, wider = choose_graph_cap(spec, topo, layout, knobs, workload, calib, m, chunk)
    if wider:
        reasons["cuda_graph_max_bs"] = wider
    knobs, m = settle_fraction(spec, topo, layout, knobs, workload, calib, m, over_target)
    seqs = max(1, m.capacity_per_dp_rank)
    knobs = replace(knobs, max_num_seqs=seqs)
    # SGLang keeps the chosen (smaller) chunk's activations and the smaller request table outside its static
    # pool: the fraction safe at the final knobs is higher; the batch keeps its size, the pool gains headroom
    if profile(engine).pool_after_static_fraction:   # (vLLM charges both to its budget: its fraction stays)
        knobs = replace(knobs, memory_fraction=max(knobs.memory_fraction,
                                                   safe_memory_fraction(spec, topo, layout, knobs)))
    # fewer sequences mean fewer CUDA graphs to capture: re-count memory for the final knobs (the metrics
    # were computed at the larger cap, so they stay a slight underestimate of the KV room)
    m = replace(m, memory=memory_evaluate(spec, topo, layout, knobs))
    reasons["max_num_batched_tokens"] = chunk_reason(chunk, m, workload, chunk_why)
    held = (f"{m.memory.requests_fit(tokens_per_request(workload, knobs.block_size)):,} such requests by the engine's "
            f"own rule (its log's {m.memory.kv_capacity_tokens:,} tokens count every request's worst-case reserve)"
            if m.memory.capacity_rule else f"{m.memory.kv_capacity_tokens:,} tokens")
    reasons["max_num_seqs"] = (f"{seqs} per DP rank: limited by {limit_words(m, workload)}; the pool holds "
                               f"{held}") + stall_words(m, spec, layout)
    reasons["memory_fraction"] = fraction_reason(engine, topo.gpu, knobs.memory_fraction,
                                                 static_fraction_scale(knobs, topo.gpu, spec, layout))
    return Tuned(knobs, m, reasons, first.capacity_per_dp_rank)


def settle_fraction(spec, topo, layout, knobs: Knobs, workload: Workload, calib: Calibration, m: Metrics,
                    over_target: int) -> tuple[Knobs, Metrics]:
    """A fraction the draft lifted above vLLM's published ceiling (the longest request did not fit under it with
    the largest chunk tried) comes back to the ceiling where the chosen, smaller chunk fits under it, and the batch
    is found again there: the lift is only for a workload that needs it (fraction_reason says so). SGLang's fraction
    is never lifted past its ceiling, so for it this changes nothing."""
    ceiling = safe_memory_fraction(spec, topo, layout, knobs)
    if knobs.memory_fraction <= ceiling + 1e-9 or \
            not memory_evaluate(spec, topo, layout, replace(knobs, memory_fraction=ceiling)).fits:
        return knobs, m
    settled = replace(knobs, memory_fraction=ceiling)
    again = evaluate(spec, topo, layout, settled, workload, calib, m.capacity_per_dp_rank, over_target)
    return (settled, again) if again.capacity_per_dp_rank else (knobs, m)


def knobs_chunk(m: Metrics) -> int:
    return m.memory.knobs.max_num_batched_tokens
