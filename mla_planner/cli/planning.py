"""The plan search run from a command's options: load the model and cluster, check the options against
them, search, and word the notes. `plan` shows the result; `verify` takes a candidate from it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from mla_planner.cli.common import check_context, check_images, check_mtp
from mla_planner.cli.plannable import check_plannable
from mla_planner.core.errors import PlanError
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.compressed_pool import compressed_choice
from mla_planner.search.disagg import crossover_nodes, none_found_why, search_disaggregated
from mla_planner.search.mtp import MtpHint, mtp_hint
from mla_planner.search.plan import to_plan
from mla_planner.search.planfile import Plan
from mla_planner.search.run import SearchResult, search
from mla_planner.search.tuning import Overrides
from mla_planner.specs.calibration import (calibration_scope_note, int4_experts_note, load_calibration,
                                          plan_calibration)
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import ENGINES, Workload
from mla_planner.specs.layout import layout_problems, parse_layout
from mla_planner.specs.topology import load_topology


RANK_BY = ("per-gpu", "total")


def run_plan(model: str, topology: str, workload: Workload, engine: Optional[str], kv_cache_dtype: Optional[str],
             layouts: Optional[list[str]], calibration: Optional[Path],
             pinned: Overrides = Overrides(), rank_by: str = "per-gpu",
             disaggregate: bool = True) -> tuple[Plan, SearchResult, tuple, MtpHint | None]:
    loaded, topo = load_model(model), load_topology(topology)
    check_plannable(loaded.spec, "plan", topo.gpu)
    check_context(loaded.spec, workload)
    calib = load_calibration(calibration, topo)
    if engine and engine not in ENGINES:
        raise PlanError(f"--engine must be one of {', '.join(ENGINES)}, got '{engine}'")
    kv = {"auto": None, None: None, "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8"}.get(kv_cache_dtype, "bad")
    if kv == "bad":
        raise PlanError(f"--kv-cache-dtype must be auto, bf16 or fp8 (fp8_e4m3), got '{kv_cache_dtype}'")
    if is_compressed(loaded.spec) and kv is not None:
        compressed_choice(engine or "vllm", kv, kv_cache_dtype, None)     # bf16 rows refused as `memory` refuses them
    # a layout given twice (`-l tp=16 -l tp=16,pp=1`) is searched once
    chosen = list(dict.fromkeys(parse_layout(text, topo) for text in layouts)) if layouts else None
    if chosen:
        problems = [(lay, layout_problems(lay, loaded.spec, topo.gpus_per_node, topo.total_gpus)) for lay in chosen]
        if all(p for _, p in problems):   # nothing the user asked for can exist: bad input, not "no fit"
            raise PlanError("; ".join(f"layout {lay.label}: {', '.join(p)}" for lay, p in problems))
    if pinned.block_size is not None and pinned.block_size < 1:
        raise PlanError("--block-size must be a positive number of tokens")
    check_mtp(loaded.spec, pinned.mtp)
    check_images(loaded.spec, pinned.images)
    if rank_by not in RANK_BY:
        raise PlanError(f"--rank-by must be one of {', '.join(RANK_BY)}, got '{rank_by}'")
    result = search(loaded.spec, topo, workload, calib, (engine,) if engine else ENGINES, kv, chosen, pinned=pinned,
                    rank_by=rank_by, model_path=loaded.model_path or None)
    scope = calibration_scope_note(calib, loaded.spec.name, (engine,) if engine else ENGINES)
    notes = tuple(calib.notes) + tuple(n for n in [int4_experts_note(calib, loaded.spec.expert_dtype), scope] if n)
    if disaggregate and not chosen:   # pinned layouts: the aggregated search of those alone
        engines = (engine,) if engine else ENGINES
        found = search_disaggregated(loaded.spec, topo, workload, calib, engines, kv, pinned, rank_by)
        best = result.options[0].tuned.metrics if result.options else None
        crossover = (crossover_nodes(loaded.spec, topo, workload, calib, best.throughput_tokens_per_s_per_gpu,
                                     engines, kv, pinned)
                     if found and best is not None and best.meets_targets and rank_by == "per-gpu" else None)
        result = replace(result, disaggregated=found, crossover_nodes=crossover)
        if not found and topo.nodes > 1:
            notes += (f"no disaggregated deployment: {none_found_why(loaded.spec, topo)}",)
    hint = mtp_hint(loaded.spec, topo, result.options, workload, calib, pinned)
    notes += (hint.text,) if hint else ()
    plan = replace(to_plan(loaded.spec, loaded.model_path, topo, workload, result, rank_by=rank_by),
                   calibration=plan_calibration(calib, calibration))
    if plan.calibration:    # recorded in the plan file, which compare, verify and calibrate then apply too
        notes = (f"calibration {calibration} applied: " + ", ".join(
            f"{n} {v:.4g}" for n, v in plan.calibration["efficiency"].items()),) + notes
    return plan, result, notes, hint
