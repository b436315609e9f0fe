"""From a plan candidate to a launch folder: node-K.sh per node, bench.sh and README.md.

build.py maps the candidate to NodeCommands (vllm.py / sglang.py) and checks the GPUs they claim against
the placement (claims.py); `emit` renders them (render.py, templates/) and writes the folder (outdir.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.core.jsonout import dumps
from mla_planner.launch.build import build, launch_inputs
from mla_planner.launch.command import NodeCommand
from mla_planner.launch.folder import bench_argv, folder_files
from mla_planner.launch.outdir import write_folder
from mla_planner.search.planfile import Plan, plan_to_dict
from mla_planner.search.pick import pick_for_engine


@dataclass(frozen=True)
class Emitted:
    """What `emit` wrote: the files, and the commands and benchmark they hold."""
    engine: str
    candidate: int
    paths: list[Path]
    commands: list[NodeCommand]
    bench: list[str]


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
    # the plan itself, for `mla-plan check-log ... --plan plan.json --candidate N` (the README says so), naming the
    # model the folder serves (--model-path), which calibrate holds bench.sh's results against
    files["plan.json"] = (dumps(plan_to_dict(replace(plan, model_path=inp.model_path)), indent=1) + "\n", False)
    paths = write_folder(files, Path(out_dir), force)
    return Emitted(engine, candidate, paths, commands, bench_argv(inp, engine))


def emit_plan(plan: Plan, candidate: int, engine: Optional[str], out_dir: Path, mode: str = "native",
              model_path: Optional[str] = None, head_address: Optional[str] = None,
              force: bool = False) -> list[Path]:
    """`emit`, returning only the files written."""
    return emit(plan, candidate, engine, out_dir, mode, model_path, head_address, force).paths


