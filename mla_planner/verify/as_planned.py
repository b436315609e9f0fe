"""A `verify --layout` candidate's knobs completed as `plan` would set them, torch-free: every knob the user did
not pin is the one `plan` emits for that layout, engine and KV dtype (search.tuning.tune with the user's pins:
the attention backend and its block size, the memory fraction, max-num-seqs, the prefill chunk, max-model-len, the
CUDA-graph range, the pipeline split), so the attention check times the kernel and block `plan` would run and
`memory.fit` holds the GPU to the plan's budget rather than the engine's default (vLLM's 0.92). The user's
--block-size, --max-num-seqs, --max-num-batched-tokens, --max-model-len and fraction stay as given. Where `plan`
would not serve the layout (tune raises Rejected), the engine's backend for the user's block (attention_choice)
and the memory model's safe fraction stand in, and the notes say so.
"""

from __future__ import annotations

from dataclasses import replace

from mla_planner.memory.accounting import safe_memory_fraction
from mla_planner.search.attention_backend import Rejected, attention_choice
from mla_planner.search.tuning import Overrides, tune
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

SIZING = ("max_num_seqs", "max_num_batched_tokens", "max_model_len")   # pins that change the memory a fraction holds


def as_planned(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, workload: Workload,
               calib: Calibration, pinned: dict) -> tuple[Knobs, tuple[str, ...]]:
    """(the knobs `plan` emits for this layout with the user's `pinned` knobs over them, a note for each choice).
    `pinned`: the knobs the user gave (Knobs field -> value; `memory_fraction` when a fraction flag was given)."""
    pins = Overrides(block_size=pinned.get("block_size"), cuda_graphs=knobs.cuda_graphs, mtp=knobs.mtp,
                     mtp_draft_tokens=knobs.mtp_draft_tokens if knobs.mtp else None)
    try:
        planned = tune(spec, topo, layout, knobs.engine, knobs.kv_cache_dtype, workload, calib, pins,
                       dense_per_rank=knobs.dense_per_rank).knobs
    except Rejected as exc:
        return _unplanned(spec, topo, layout, knobs, pinned, str(exc))
    out = replace(planned, **pinned)
    given = ", ".join(f"--{k.replace('_', '-')}" for k in pinned if k != "memory_fraction")
    notes = [f"knobs as `plan` sets them for {layout.label} ({knobs.engine}, {planned.kv_cache_dtype} KV): "
             f"{planned.attention_backend or 'the engine default'} backend, block {planned.block_size}, "
             f"max-num-seqs {planned.max_num_seqs}, max-num-batched-tokens {planned.max_num_batched_tokens}"
             + (f"; {given} as given" if given else "")]
    if "memory_fraction" in pinned:
        return out, tuple(notes)
    fraction, why = planned.memory_fraction, "the one `plan` picks for this layout"
    if any(k in pinned for k in SIZING):
        safe = safe_memory_fraction(spec, topo, layout, out)
        if 0 < safe < fraction:
            fraction, why = safe, "the memory model's safe fraction for the pinned sizes (below the one `plan` picks)"
    notes.append(f"memory fraction {fraction:.3g}: {why}; --gpu-memory-utilization or --mem-fraction-static "
                 "checks another")
    return replace(out, memory_fraction=fraction), tuple(notes)


def _unplanned(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, pinned: dict,
               why_not: str) -> tuple[Knobs, tuple[str, ...]]:
    """`plan` would not serve this layout: the engine's backend and block for the user's pins, and the memory
    model's safe fraction (or the engine's default), each noted."""
    notes = [f"`plan` would not serve this layout ({why_not}): the knobs are the engine's defaults"]
    if knobs.attention_backend is None:
        try:
            backend, _, block = attention_choice(spec, topo.gpu, layout, knobs.engine, knobs.kv_cache_dtype,
                                                 pinned.get("block_size"), knobs.mtp)[:3]
            knobs = replace(knobs, attention_backend=backend, block_size=block)
        except Rejected as exc:
            notes.append(f"no {knobs.engine} attention backend takes these knobs ({exc}); the attention check "
                         "times the project's kernel")
    if "memory_fraction" in pinned:
        return knobs, tuple(notes)
    fraction, why = safe_memory_fraction(spec, topo, layout, knobs), "the memory model's safe fraction for these knobs"
    if fraction <= 0:
        fraction, why = knobs.memory_fraction, f"{knobs.engine}'s default (no safe fraction exists here)"
    notes.append(f"memory fraction {fraction:.3g}: {why}; --gpu-memory-utilization or --mem-fraction-static "
                 "checks another")
    return replace(knobs, memory_fraction=fraction), tuple(notes)
