"""Launch artefacts: per-node vLLM / SGLang commands for a plan candidate, rendered from `templates/`.

    emit.build(launch_inputs(plan, cand), engine) -> list[NodeCommand]   the typed commands (command.py)
    emit.emit(plan, candidate, engine, out_dir, ...) -> Emitted           node-K.sh, bench.sh, README.md written
    emit.emit_plan(plan, candidate, engine, out_dir, ...) -> list[Path]   the same, the files only
    emit.single_node_command(plan, candidate, engine) -> str | None       the one-liner for the plan table
"""
