"""Knobs that lift a limit on the batch, tried only where that limit binds: the pipeline layer split
(when the KV pool binds: memory.pp_split.balance), the CUDA-graph capture range (when it binds: a larger
decode batch would run eagerly), and the sequence cap the KV pool is sized with (regain_kv_room). The
split and the range are kept only if the metrics say they serve more tokens/s, and each re-derives the
memory fraction for its knobs at the largest prefill chunk the tuning may still pick.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from mla_planner.engines.cuda_graphs import graph_batch_cap
from mla_planner.engines.profile import profile
from mla_planner.memory.accounting import evaluate as memory_evaluate, safe_memory_fraction, split_pools
from mla_planner.memory.pp_split import MIN_SPLIT_GAIN, balance, layer_split, partition_env_name
from mla_planner.perf.metrics import Metrics, batch_limit, evaluate, tokens_per_request
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs, Workload, decode_query_len

GRAPH_CAP_MAX = 2048      # the largest decode batch we ask an engine to capture (our bound: capture time and
                          # graph memory grow with every size)
GRAPH_CAP_STEP = 16       # vLLM captures every 16th size above 256 (SGLang adds the top itself)


def _better(m: Metrics, than: Metrics) -> bool:
    return (m.meets_targets, m.throughput_tokens_per_s) > (than.meets_targets, than.throughput_tokens_per_s)


def _safe(spec, topo, layout, knobs: Knobs, worst_chunk: int) -> float:
    """The safe fraction for `knobs` at the largest chunk still to be tried, never above the current one."""
    worst = replace(knobs, max_num_batched_tokens=max(worst_chunk, knobs.max_num_batched_tokens))
    return min(knobs.memory_fraction, safe_memory_fraction(spec, topo, layout, worst))


def kv_balanced(spec, topo, layout, knobs: Knobs, fraction) -> Knobs | None:
    """The knobs with the layer split that balances the stages' KV pools (memory.pp_split.balance) and the memory
    fraction `fraction(knobs with that split)` gives it; None where that is the engine's own split."""
    own = layer_split(spec, layout, knobs)
    split = balance(own, split_pools(spec, topo, layout, knobs))
    if split == own:
        return None
    alt = replace(knobs, pp_layer_partition=tuple(split))
    return replace(alt, memory_fraction=fraction(alt))


def choose_split(spec, topo, layout, knobs: Knobs, workload: Workload, calib: Calibration, first: Metrics,
                 worst_chunk: int) -> tuple[Knobs, Metrics, str]:
    """The pipeline split, and why ('' without PP). When the KV pool limits the batch, the split that
    balances the stages' pools (memory.pp_split.balance) is tried, and kept if it serves more tokens/s: it moves
    layers (and so step time) too, and the step model prices the split it is given."""
    if layout.pp == 1:
        return knobs, first, ""
    own = layer_split(spec, layout, knobs)
    words = ",".join(map(str, own)) + (": the engine's own split by layer count" if not knobs.pp_layer_partition
                                       else ": balanced by memory")
    if first.concurrency_limit != "kv":
        return knobs, first, words
    alt = kv_balanced(spec, topo, layout, knobs, lambda k: _safe(spec, topo, layout, k, worst_chunk))
    if alt is None:
        return knobs, first, words + "; no other split holds more KV"
    split = alt.pp_layer_partition
    m = evaluate(spec, topo, layout, alt, workload, calib, first.capacity_per_dp_rank)
    gain = m.memory.kv_capacity_tokens / max(first.memory.kv_capacity_tokens, 1) - 1
    if gain < MIN_SPLIT_GAIN or not _better(m, first):
        return knobs, first, words + f"; the KV-balanced split {','.join(map(str, split))} would add {gain:.0%} " \
                                     "KV room but not throughput"
    return alt, m, (f"{','.join(map(str, split))} ({partition_env_name(knobs.engine)}): the engine's own split "
                    f"{','.join(map(str, own))} leaves stage {first.memory.binding_stage} binding the KV pool (the "
                    f"engine sizes every stage's pool to the smallest); this split holds {gain:.0%} more tokens "
                    f"({first.memory.kv_capacity_tokens:,} -> {m.memory.kv_capacity_tokens:,})")


def fit_by_split(spec, topo, layout, knobs: Knobs, worst_chunk: int) -> tuple[Knobs, str]:
    """Where the engine's own layer split leaves a stage without room (a max-model-len request, or any KV),
    the split that balances the stages' pools (memory.pp_split.balance climbs out of not fitting), with the memory
    fraction re-derived for it; (knobs, why) or the knobs unchanged and ''."""
    if layout.pp == 1 or knobs.pp_layer_partition or memory_evaluate(spec, topo, layout, knobs).fits:
        return knobs, ""
    own = layer_split(spec, layout, knobs)
    if max(split_pools(spec, topo, layout, knobs)(own)) <= 0:   # no stage has KV room: moving layers cannot
        return knobs, ""                                        # make one for every stage

    def own_fraction(k: Knobs) -> float:   # the split's own, at the largest chunk still to be tried
        return safe_memory_fraction(spec, topo, layout, replace(k, max_num_batched_tokens=max(
            worst_chunk, k.max_num_batched_tokens)))
    alt = kv_balanced(spec, topo, layout, knobs, own_fraction)
    if alt is None or not memory_evaluate(spec, topo, layout, alt).fits:
        return knobs, ""
    split = alt.pp_layer_partition
    return alt, (f"{','.join(map(str, split))} ({partition_env_name(knobs.engine)}): with the engine's own split "
                 f"{','.join(map(str, own))} a stage has no room for the workload's requests; this one balances the "
                 "stages' pools")


def choose_graph_cap(spec, topo, layout, knobs: Knobs, workload: Workload, calib: Calibration, first: Metrics,
                     worst_chunk: int) -> tuple[Knobs, Metrics, str]:
    """Raise the CUDA-graph capture range when it is what limits the batch: to the batch the other limits
    allow, per micro-batch, in whole steps of 16, at most GRAPH_CAP_MAX; then, if another limit binds
    first, down to just above the batch reached (every captured size costs graph memory)."""
    if first.concurrency_limit != "cuda_graphs":
        return knobs, first, ""
    others, _ = batch_limit(layout, replace(knobs, cuda_graphs=False), first.memory, workload, topo.gpu)
    own = graph_batch_cap(knobs.engine, topo.gpu, layout, knobs)
    cap = min(GRAPH_CAP_MAX, _steps(others / layout.pp))
    if cap <= own:
        return knobs, first, ""
    alt, m = _with_graph_cap(spec, topo, layout, knobs, workload, calib, first, cap, worst_chunk)
    tight = max(own + GRAPH_CAP_STEP, _steps(m.capacity_per_dp_rank / layout.pp))
    if m.concurrency_limit != "cuda_graphs" and tight < cap:
        tighter, m2 = _with_graph_cap(spec, topo, layout, knobs, workload, calib, m, tight, worst_chunk)
        if not _better(m, m2):
            alt, m = tighter, m2
    engine = profile(knobs.engine)
    flag = engine.graph_flag
    if engine.graph_range_in_tokens and knobs.mtp:
        flag += f", in tokens: {decode_query_len(knobs)} per request with MTP"
    was = "the engine's own capture range" if not knobs.cuda_graph_max_bs else "the range fitted at the draft chunk"
    if not _better(m, first):
        return knobs, first, (f"{was} ({own} per micro-batch): capturing up to {cap} ({flag}) would not "
                              "serve more, its graphs taking KV memory")
    return alt, m, (f"{alt.cuda_graph_max_bs} ({flag}): {was} ({own} per micro-batch) would "
                    f"run larger decode batches eagerly; capturing more serves "
                    f"{m.throughput_tokens_per_s / first.throughput_tokens_per_s - 1:.0%} more tokens/s")


def _steps(batch: float) -> int:
    return ceil(ceil(batch) / GRAPH_CAP_STEP) * GRAPH_CAP_STEP


def _with_graph_cap(spec, topo, layout, knobs: Knobs, workload: Workload, calib: Calibration, hint: Metrics,
                    cap: int, worst_chunk: int) -> tuple[Knobs, Metrics]:
    per_request = decode_query_len(knobs) if profile(knobs.engine).graph_range_in_tokens else 1
    alt = replace(knobs, cuda_graph_max_bs=cap * per_request)
    alt = replace(alt, memory_fraction=_safe(spec, topo, layout, alt, worst_chunk))
    return alt, evaluate(spec, topo, layout, alt, workload, calib, hint.capacity_per_dp_rank)


def regain_kv_room(spec, topo, layout, knobs: Knobs, workload: Workload, calib: Calibration,
                    m: Metrics) -> tuple[Knobs, Metrics]:
    """Where the KV pool limits the batch, it was sized with the draft's sequence cap (up to 1,024), and
    vLLM captures CUDA graphs up to 2 x max-num-seqs: capped at the batch actually reached, the graphs
    shrink and the pool grows (Kimi-K2 at 64k prompts: 39 requests at the draft cap, 53 at 39). Raise
    the cap to what the pool then holds, and again, while the batch grows (at most 8 times)."""
    for _ in range(8):
        if m.concurrency_limit != "kv":
            break
        at = memory_evaluate(spec, topo, layout, replace(knobs, max_num_seqs=m.capacity_per_dp_rank))
        room = at.requests_fit(tokens_per_request(workload, knobs.block_size)) if at.fits else 0
        if room <= m.capacity_per_dp_rank:
            break
        more = evaluate(spec, topo, layout, replace(knobs, max_num_seqs=room), workload, calib,
                        m.capacity_per_dp_rank)
        if more.capacity_per_dp_rank <= m.capacity_per_dp_rank:
            break
        knobs, m = replace(knobs, max_num_seqs=room), more
    return knobs, m
