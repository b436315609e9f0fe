"""Ways out of a layout that does not fit: alternatives re-run through the memory model, cheapest first.

Each candidate changes one thing (a knob, the layout on the same GPUs, the checkpoint, or more nodes) and is
judged by `memory.evaluate` on the same engine accounting; only candidates that fit are offered, each with the
KV capacity it buys. Order = cost to the user: a flag, then a layout on the same GPUs, then a 4-bit checkpoint
(another download, with an accuracy and speed cost), then hardware.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Optional

from mla_planner.core.errors import PlanError
from mla_planner.engines.memory_rules import default_memory_fraction
from mla_planner.engines.profile import profile
from mla_planner.engines.layouts import engine_layout_problem
from mla_planner.engines.moe_configs import FOUR_BIT
from mla_planner.engines.sparse import is_sparse, kv_class, sparse_choice
from mla_planner.memory.accounting import evaluate, safe_memory_fraction, split_pools
from mla_planner.memory.pp_split import MIN_SPLIT_GAIN, balance, layer_split, partition_env_name
from mla_planner.memory.results import MemoryReport
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import InterNode, Topology

Candidate = tuple[str, ModelSpec, Topology, Layout, Knobs]


def ways_out(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs,
             engine_version: Optional[str] = None, limit: int = 4) -> list[str]:
    """Up to `limit` one-line alternatives that fit, cheapest first."""
    found: list[str] = []
    for label, sp, t, lay, kn in _candidates(spec, topo, layout, knobs, engine_version):
        costly = label.startswith(("a 4-bit", "more nodes"))
        if costly and any(not f.startswith(("a 4-bit", "more nodes")) for f in found):
            break       # another checkpoint or more hardware only when no flag or layout on these GPUs does
        report = evaluate(sp, t, lay, kn, engine_version)
        safe = safe_memory_fraction(sp, t, lay, kn, engine_version)
        if not report.fits and 0 < safe != kn.memory_fraction and "safe fraction" not in label:
            # the alternative may need another fraction (e.g. pp=4 on twice the nodes leaves less to the engine)
            report = evaluate(sp, t, lay, replace(kn, memory_fraction=safe), engine_version)
            label += f" with {_flag(kn)} {safe:.3f}"
        if report.fits:
            found.append(f"{label}: fits, KV capacity {report.kv_capacity_tokens:,} tokens per engine instance / "
                         f"DP rank ({report.kv_tokens_per_replica:,} per replica)")
        if len(found) >= limit:
            break
    awq = ", a 4-bit AWQ checkpoint" if awq_spec(spec) else ""
    return found or [f"none of: safe memory fraction, another KV dtype, shorter max-model-len, dcp, more pipeline "
                     f"stages, DP attention{awq}, or twice the nodes makes this fit"]


def balanced_split(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs,
                   engine_version: Optional[str] = None) -> Optional[tuple[int, ...]]:
    """The pipeline split that balances the stages' KV pools (memory.pp_split.balance), if it differs from the knobs'."""
    if layout.pp == 1:
        return None
    own = layer_split(spec, layout, knobs)
    split = balance(own, split_pools(spec, topo, layout, knobs, engine_version))
    return tuple(split) if split != own else None


def split_note(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, report: MemoryReport,
               engine_version: Optional[str] = None) -> str:
    """A note when another pipeline split would hold more KV (at least 1 %), '' otherwise."""
    split = balanced_split(spec, topo, layout, knobs, engine_version)
    if not split or not report.kv_capacity_tokens:
        return ""
    better = evaluate(spec, topo, layout, replace(knobs, pp_layer_partition=split), engine_version)
    gain = better.kv_capacity_tokens / report.kv_capacity_tokens - 1
    if gain < MIN_SPLIT_GAIN:
        return ""
    return (f"{partition_env_name(knobs.engine)}={','.join(map(str, split))} would hold {gain:.0%} more KV tokens "
            f"({better.kv_capacity_tokens:,}): stage {report.binding_stage} binds, and the engine sizes every stage's "
            "pool to the smallest (`memory --pp-layer-partition` sizes a split; `plan` adopts this one where the "
            "pool limits the batch)")


def _kv_dtypes(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs) -> Iterator[Candidate]:
    """The other KV dtypes: fp8 where the latent cache is bf16 (or FlashMLA's larger fp8_ds_mla row), bf16
    where it is not. A sparse-attention (DSA) cache is stored as the engine's backend stores each dtype on
    this GPU (engines/sparse.py: vLLM's FLASHMLA_SPARSE keeps fp8 as fp8_ds_mla)."""
    if is_sparse(spec):
        for wanted in ("fp8", "bf16") if topo.gpu.has_fp8 else ("bf16",):
            try:
                choice = sparse_choice(knobs.engine, spec, topo.gpu, wanted, spec.num_attention_heads // layout.tp,
                                       knobs.block_size, layout.dcp)
            except PlanError:       # no backend for that dtype here (e.g. bf16 under DCP on Hopper)
                continue
            if choice.kv_cache_dtype != knobs.kv_cache_dtype:
                yield (f"{wanted} KV cache (--kv-cache-dtype {wanted}: {choice.kv_cache_dtype} rows on "
                       f"{choice.backend})", spec, topo, layout,
                       replace(knobs, kv_cache_dtype=choice.kv_cache_dtype, attention_backend=choice.backend))
        return
    if knobs.kv_cache_dtype in ("bf16", "fp8_ds_mla") and attention_of(spec).latent:
        yield "fp8 KV cache (--kv-cache-dtype fp8)", spec, topo, layout, replace(knobs, kv_cache_dtype="fp8")
    if knobs.kv_cache_dtype != "bf16":     # e.g. a KV format no backend here runs
        yield "bf16 KV cache (--kv-cache-dtype auto)", spec, topo, layout, replace(knobs, kv_cache_dtype="bf16")


def _candidates(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs,
                engine_version: Optional[str]) -> Iterator[Candidate]:
    flag = _flag(knobs)
    safe = safe_memory_fraction(spec, topo, layout, knobs, engine_version)
    if 0 < safe != knobs.memory_fraction:
        yield f"{flag} {safe:.3f} (the safe fraction)", spec, topo, layout, replace(knobs, memory_fraction=safe)
    split = balanced_split(spec, topo, layout, knobs, engine_version)
    if split:
        yield f"{partition_env_name(knobs.engine)}={','.join(map(str, split))} (layers balanced by memory)", spec, \
            topo, layout, replace(knobs, pp_layer_partition=split)
    yield from _kv_dtypes(spec, topo, layout, knobs)
    fit_len = evaluate(spec, topo, layout, replace(knobs, max_model_len=1), engine_version).max_model_len_fit
    if not fit_len and 0 < safe != knobs.memory_fraction:     # at the safe fraction (ways_out retries with it)
        fit_len = evaluate(spec, topo, layout, replace(knobs, max_model_len=1, memory_fraction=safe),
                           engine_version).max_model_len_fit
    if 0 < fit_len < knobs.max_model_len:
        yield f"--max-model-len {fit_len:,}", spec, topo, layout, replace(knobs, max_model_len=fit_len)
    yield from _layouts(spec, topo, layout, knobs)
    awq = awq_spec(spec)
    if awq is not None:
        yield (f"a 4-bit AWQ checkpoint of {spec.name} (int4 weights, group {awq.int4_group_size}; speed and accuracy "
               "not validated here: plan its config.json with -m)", awq, topo, layout, knobs)
    if layout.total_gpus * 2 > topo.total_gpus:
        bigger = _more_nodes(topo)
        yield (f"more nodes: {bigger.nodes} x {bigger.gpus_per_node} {bigger.gpu.name} with pp={layout.pp * 2}",
               spec, bigger, replace(layout, pp=layout.pp * 2), knobs)


def awq_spec(spec: ModelSpec, group: int = 128) -> Optional[ModelSpec]:
    """The model as an AutoAWQ export stores it (every decoder-layer linear int4 with a 16-bit scale and a 4-bit
    zero per `group` values; embedding, lm_head, norms and router bf16: models._awq, weights.stored_bytes), or
    None when it is already 4-bit. Group 128 is AutoAWQ's default (q_group_size) and what the community
    DeepSeek-V3/R1 AWQ releases use; SGLang's DeepSeek page lists AWQ on 8 x H100/A100 as a known-good minimum
    (sgl-project/sglang docs/basic_usage/deepseek_v3.md)."""
    if set(FOUR_BIT) & {spec.weight_dtype, spec.expert_dtype}:    # already 4-bit
        return None
    return replace(spec, **{"name": f"{spec.name}-awq", "weight_dtype": "int4", "expert_weight_dtype": None,
                            "int4_group_size": group, "int4_zero_point": True, "unquantized_modules": ()})


def _flag(knobs: Knobs) -> str:
    return profile(knobs.engine).fraction_flag


def _layouts(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs) -> Iterator[Candidate]:
    """Same GPUs re-arranged: dcp over the TP group, PP inside the cluster, DP attention."""
    if layout.tp > 1 and layout.dcp == 1 and attention_of(spec).latent:
        dcp = replace(layout, dcp=layout.tp)
        if not is_sparse(spec) or _sparse_dcp_runs(spec, topo, dcp, knobs):
            yield f"decode context parallel -dcp {layout.tp}", spec, topo, dcp, knobs
    if layout.total_gpus * 2 <= topo.total_gpus:
        yield f"pipeline parallel pp={layout.pp * 2} ({layout.total_gpus * 2} GPUs)", spec, topo, \
            replace(layout, pp=layout.pp * 2), knobs
    if layout.dp == 1 and layout.tp > 1 and spec.is_moe:
        dp_layout = replace(layout, tp=1, dp=layout.tp, ep=layout.tp, dcp=1, kv_layout="replicated")
        yield f"DP attention (tp=1, dp={layout.tp}, ep={layout.tp})", spec, topo, dp_layout, knobs


def _sparse_dcp_runs(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs) -> bool:
    """Whether the engine runs this sparse-attention layout under DCP with the same cache (a sparse backend takes
    it: engines/sparse.py; the engine starts it: engines/layouts.py)."""
    try:
        choice = sparse_choice(knobs.engine, spec, topo.gpu, kv_class(knobs.kv_cache_dtype), spec.num_attention_heads // layout.tp,
                               knobs.block_size, layout.dcp)
    except PlanError:
        return False
    return choice.kv_cache_dtype == knobs.kv_cache_dtype and not engine_layout_problem(spec, topo, layout, knobs.engine)


def _more_nodes(topo: Topology) -> Topology:
    """The same cluster with twice the nodes (an inter-node fabric is assumed like the existing one, or
    400 Gb/s InfiniBand per GPU for a single node)."""
    update: dict = {"nodes": topo.nodes * 2, "name": f"{topo.name}-x2"}
    if topo.inter_node is None:
        update["inter_node"] = InterNode(fabric="infiniband", nics_per_node=topo.gpus_per_node, nic_gbit_per_s=400)
    return replace(topo, **update)



def fraction_knobs(spec: ModelSpec, topo: Topology, layout: Layout, base: Knobs,
                   fraction: Optional[float]) -> tuple[Knobs, str]:
    """The knobs one layout runs with (`compare`, `validate`): the given memory fraction, else the engine's default
    for the layout, lowered to the memory model's safe fraction when the default would run out of memory (with a
    note)."""
    if fraction is not None:
        return replace(base, memory_fraction=fraction), ""
    default = default_memory_fraction(base.engine, spec, topo, layout, base)
    knobs = replace(base, memory_fraction=default)
    report = evaluate(spec, topo, layout, knobs)
    if report.fits or not report.per_gpu or not 0 < report.safe_fraction < default:
        return knobs, ""
    return (replace(knobs, memory_fraction=report.safe_fraction),
            f"memory fraction {report.safe_fraction:.3f} used: the engine default {default:g} runs out of memory")
