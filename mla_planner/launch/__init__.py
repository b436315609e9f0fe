"""Launch artefacts: per-node vLLM / SGLang commands for a plan candidate, rendered from `templates/`.

    build(launch_inputs(plan, cand), engine) -> list[NodeCommand]   the typed commands
    emit(plan, candidate, engine, out_dir, ...) -> Emitted           node-K.sh, bench.sh, README.md written
    emit_plan(plan, candidate, engine, out_dir, ...) -> list[Path]   the same, the files only
    single_node_command(plan, candidate, engine) -> str | None       the one-liner for the plan table
"""

from .command import LaunchInputs, NodeCommand, ShellRef
from .emit import Emitted, build, emit, emit_plan, launch_inputs, single_node_command

__all__ = ["Emitted", "LaunchInputs", "NodeCommand", "ShellRef", "build", "emit", "emit_plan", "launch_inputs",
           "single_node_command"]
