"""From a plan candidate to a launch folder: node-K.sh per node, bench.sh and README.md.

`build` maps the candidate to NodeCommands (vllm.py / sglang.py), checks the GPUs they claim against
the placement (claims.py), and `emit` renders (render.py, templates/) and writes them (outdir.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mla_planner.engines.backends import backend, backend_problems
from mla_planner.core.errors import PlanError
from mla_planner.specs.knobs import ENGINES
from mla_planner.search.planfile import Candidate, Plan, pick, pick_for_engine, plan_to_dict
from mla_planner.launch import sglang, vllm
from mla_planner.launch.claims import check_gpu_counts
from mla_planner.launch.command import LaunchInputs, NodeCommand
from mla_planner.launch.folder import bench_argv, folder_files
from mla_planner.launch.outdir import write_folder
from mla_planner.launch.placement import place
from mla_planner.launch.render import one_line


@dataclass(frozen=True)
class Emitted:
    """What `emit` wrote: the files, and the commands and benchmark they hold."""
    engine: str
    candidate: int
    paths: list[Path]
    commands: list[NodeCommand]
    bench: list[str]


def launch_inputs(plan: Plan, cand: Candidate, mode: str = "native", model_path: Optional[str] = None) -> LaunchInputs:
    partition = cand.knobs.pp_layer_partition or (cand.memory.pp_layer_partition if cand.memory else None)
    return LaunchInputs(plan.spec, plan.topology, plan.workload, cand.layout, cand.knobs,
                        model_path if model_path is not None else plan.model_path, mode,
                        tuple(partition) if partition else None)


def _check_backend(inp: LaunchInputs, engine: str) -> None:
    k = inp.knobs
    if k.attention_backend is None:
        return
    problems = backend_problems(backend(engine, k.attention_backend), inp.topology.gpu, k.kv_cache_dtype,
                                inp.layout.dcp, k.block_size)
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


def emit(plan: Plan, candidate: int, engine: Optional[str], out_dir: Path, mode: str = "native",
         model_path: Optional[str] = None, head_address: Optional[str] = None, force: bool = False) -> Emitted:
    """Write the launch folder for candidate `candidate` (1-based); `engine` None: the candidate's own."""
    cand = pick_for_engine(plan, candidate, engine, "emit")
    engine = cand.knobs.engine
    inp = launch_inputs(plan, cand, mode, model_path)
    commands = build(inp, engine)
    heads = {c.replica for c in commands if "HEAD_IP" in c.needs}
    if head_address is not None and len(heads) > 1:
        raise PlanError(f"--head-address names one head, but {len(heads)} multi-node replicas each have their own; "
                        "leave it out and export HEAD_IP on each replica's nodes")
    if head_address is not None and not head_address:
        raise PlanError("--head-address is empty")
    files = folder_files(inp, engine, commands, candidate, cand, head_address)
    # the plan itself, for `mla-plan check-log ... --plan plan.json --candidate N` (the README says so)
    files["plan.json"] = (json.dumps(plan_to_dict(plan), indent=1) + "\n", False)
    paths = write_folder(files, Path(out_dir), force)
    return Emitted(engine, candidate, paths, commands, bench_argv(inp, engine))


def emit_plan(plan: Plan, candidate: int, engine: Optional[str], out_dir: Path, mode: str = "native",
              model_path: Optional[str] = None, head_address: Optional[str] = None,
              force: bool = False) -> list[Path]:
    """`emit`, returning only the files written."""
    return emit(plan, candidate, engine, out_dir, mode, model_path, head_address, force).paths


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

