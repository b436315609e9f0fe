"""`mla-plan emit`: write the launch folder (node-K.sh per node, bench.sh, README.md) for a plan candidate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .cli_common import console, guard
from .launch import emit_plan
from .planfile import pick, read_plan


@guard
def emit_cmd(plan: Annotated[Path, typer.Option("--plan", "-p", help="Plan file written by `mla-plan plan --json`.")],
             out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write (must be empty or new).")],
             candidate: Annotated[int, typer.Option("--candidate", "-c", help="Candidate number from the plan "
                                                    "table (1 = best).")] = 1,
             engine: Annotated[Optional[str], typer.Option("--engine", "-e", help="vllm or sglang; default: the "
                                                           "engine the candidate was planned for.")] = None,
             mode: Annotated[str, typer.Option("--mode", help="vLLM multi-node form: native (--nnodes/--headless, "
                                               "no Ray) or ray (a Ray cluster, one serve on the head).")] = "native",
             model_path: Annotated[Optional[str], typer.Option("--model-path", help="Serve this path or HF id "
                                                               "instead of the plan's model.")] = None,
             head_address: Annotated[Optional[str], typer.Option("--head-address", help="Cluster IP or host name "
                                                                 "of node 0 (else each script reads HEAD_IP).")] = None,
             force: Annotated[bool, typer.Option("--force", help="Overwrite a non-empty --out folder.")] = False,
             ) -> None:
    """Write ready-to-run launch scripts for one plan candidate."""
    loaded = read_plan(plan)
    chosen = engine or pick(loaded, candidate, str(plan)).knobs.engine
    paths = emit_plan(loaded, candidate, chosen, out, mode=mode, model_path=model_path,
                      head_address=head_address, force=force)
    con = console()
    con.print(f"wrote {len(paths)} files to {out}:")
    for p in paths:
        con.print(f"  {p.name}")
    con.print(f"next: read {out / 'README.md'} (what to run where, in which order, and the health checks)")
