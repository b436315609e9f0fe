"""From a plan candidate to the typed commands every node runs (`build`), checked against the placement;
and the one-line command the plan table shows for a candidate that runs on one node. No files: emit.py
writes the folder."""

from __future__ import annotations

from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.engines.backends import backend, backend_problems
from mla_planner.engines.compressed_kv import VLLM_BLOCK_TOKENS, is_compressed
from mla_planner.engines.sparse import compressed_backend, is_sparse, kv_class, sparse_choice
from mla_planner.launch import sglang, vllm
from mla_planner.launch.claims import check_gpu_counts
from mla_planner.launch.command import LaunchInputs, NodeCommand
from mla_planner.launch.placement import place
from mla_planner.launch.shell import one_line
from mla_planner.search.planfile import Candidate, Plan
from mla_planner.search.pick import pick
from mla_planner.specs.knobs import ENGINES
from mla_planner.specs.layout import query_heads_per_rank


def launch_inputs(plan: Plan, cand: Candidate, mode: str = "native", model_path: Optional[str] = None) -> LaunchInputs:
    partition = cand.knobs.pp_layer_partition or (cand.memory.pp_layer_partition if cand.memory else None)
    return LaunchInputs(plan.spec, plan.topology, plan.workload, cand.layout, cand.knobs,
                        model_path if model_path is not None else plan.model_path, mode,
                        tuple(partition) if partition else None)


def _check_backend(inp: LaunchInputs, engine: str) -> None:
    """The candidate's attention backend runs its KV cache and block size on this GPU (a plan file may have
    been edited): the MLA backend table's rules, or for sparse attention the backend and storage the engine
    itself selects (engines/sparse.py)."""
    k = inp.knobs
    if k.attention_backend is None:
        return
    if is_compressed(inp.spec):
        entry = compressed_backend(engine, inp.topology.gpu)
        if (entry["backend"], k.kv_cache_dtype, k.block_size) != (k.attention_backend, "fp8_ds_mla", VLLM_BLOCK_TOKENS):
            raise PlanError(f"attention backend {k.attention_backend} with a {k.kv_cache_dtype} cache on {k.block_size}-"
                            f"token blocks: {engine} runs DeepSeek-V4 on {entry['backend']} with fp8_ds_mla rows on "
                            f"{VLLM_BLOCK_TOKENS}-token blocks; plan again")
        return
    if is_sparse(inp.spec):
        choice = sparse_choice(engine, inp.spec, inp.topology.gpu, kv_class(k.kv_cache_dtype),
                               inp.spec.num_attention_heads // inp.layout.tp, k.block_size, inp.layout.dcp)
        if (choice.backend, choice.kv_cache_dtype) != (k.attention_backend, k.kv_cache_dtype):
            raise PlanError(f"attention backend {k.attention_backend} with a {k.kv_cache_dtype} cache: {engine} runs "
                            f"{choice.backend} with {choice.kv_cache_dtype} here; plan again")
        return
    problems = backend_problems(backend(engine, k.attention_backend), inp.topology.gpu, k.kv_cache_dtype,
                                inp.layout.dcp, k.block_size, query_heads_per_rank(inp.spec, inp.layout))
    if problems:
        raise PlanError(f"attention backend {k.attention_backend}: " + "; ".join(problems))


def build(inp: LaunchInputs, engine: str) -> list[NodeCommand]:
    """Every node's commands for `engine`, GPU counts checked against the placement."""
    if engine not in ENGINES:
        raise PlanError(f"engine '{engine}' is not one of {', '.join(ENGINES)}")
    if inp.knobs.engine != engine:
        raise PlanError(f"this candidate's knobs were chosen for {inp.knobs.engine} (memory fraction, block size, "
                        f"attention backend mean different things in {engine}); plan again with --engine {engine}")
    _check_backend(inp, engine)
    commands = (vllm if engine == "vllm" else sglang).node_commands(inp)
    check_gpu_counts(engine, commands, place(inp.layout, inp.topology), inp.layout)
    return commands


def single_node_command(plan: Plan, candidate: int, engine: str) -> Optional[str]:
    """The one-line command (env assignments first) when the candidate is one command on one node,
    else None (multi-node, replicas, or a layout the engine cannot express)."""
    cand = pick(plan, candidate, "plan")
    if cand.layout.replicas > 1 or cand.layout.instance_gpus > plan.topology.gpus_per_node:
        return None                      # several commands: do not build them all to count them
    try:
        commands = build(launch_inputs(plan, cand), engine)
    except PlanError:
        return None
    if len(commands) != 1:
        return None
    c = commands[0]
    env = " ".join(f"{name}={one_line([value])}" for name, value in c.env.items())
    return (env + " " if env else "") + one_line(c.argv)
