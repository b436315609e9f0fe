"""`mla-plan emit`: write the launch folder (node-K.sh per node, bench.sh, README.md) for a plan candidate, or for
a disaggregated deployment (its pools' node scripts, the router, the Kubernetes manifests)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from rich.markup import escape

from mla_planner.cli.params import Opt
from mla_planner.cli.common import JsonOpt, guard, lower_case, print_json, warn_weightless
from mla_planner.cli.console import console, stderr_console
from mla_planner.cli.options import checked_head_address
from mla_planner.core.errors import PlanError
from mla_planner.core.files import user_path
from mla_planner.launch.disagg_folder import emit_disaggregated
from mla_planner.launch.emit import Emitted, emit
from mla_planner.launch.outdir import FolderNotEmpty
from mla_planner.launch.shell import one_line
from mla_planner.search.planfile_read import read_plan
from mla_planner.search.pick import engine_candidate


@guard
def emit_cmd(plan: Annotated[Path, Opt("--plan", "-p", help="Plan file written by `mla-plan plan --json`.")],
             out: Annotated[str, Opt("--out", "-o", help="Folder to write (must be empty or new).")],
             candidate: Annotated[Optional[int], Opt("--candidate", "-c", help="Candidate number from "
                                                              "the plan table (default: 1, the best; with --engine, "
                                                              "the best for that engine).")] = None,
             engine: Annotated[Optional[str], Opt("--engine", "-e",
                 callback=lower_case, help="vllm or sglang: the best "
                                                           "candidate planned for it (a candidate's knobs are its "
                                                           "engine's own, so --candidate must be one of them).")]
             = None,
             mode: Annotated[str, Opt("--mode", help="vLLM multi-node form: native (--nnodes/--headless, "
                                               "no Ray) or ray (a Ray cluster, one serve on the head).")] = "native",
             model_path: Annotated[Optional[str], Opt("--model-path", help="Serve this path or HF id "
                                                               "instead of the plan's model.")] = None,
             head_address: Annotated[Optional[str], Opt("--head-address", help="Cluster IP or host name "
                                                                 "of node 0 (else each script reads HEAD_IP).")] = None,
             force: Annotated[bool, Opt("--force", help="Replace the files of an earlier emit in --out.")]
             = False,
             disaggregated: Annotated[Optional[int], Opt("--disaggregated", "-d", help=(
                 "Disaggregated deployment number from the plan's table (D1 = 1): per-pool node scripts, "
                 "router.sh, bench.sh and Kubernetes manifests (LeaderWorkerSet per pool)."))] = None,
             image: Annotated[Optional[str], Opt("--image", help="Container image for the Kubernetes manifests "
                                                 "(with --disaggregated; default: the engine release's).")] = None,
             rdma_resource: Annotated[Optional[str], Opt("--rdma-resource", help=(
                 "The RDMA device plugin's extended resource each engine pod requests once (e.g. rdma/ib, "
                 "rdma/hca_shared_devices_a; with --disaggregated). Default: none, /dev/infiniband from the "
                 "host as SGLang's own manifests do."))] = None,
             as_json: JsonOpt = False,
             ) -> None:
    """Write ready-to-run launch scripts for one plan candidate.

    A plan of 2+ nodes joined by RDMA also lists disaggregated deployments (D1, D2, ...): `--disaggregated 1`
    writes D1's prefill and decode node scripts, its router and its Kubernetes manifests (for instance on a plan of
    `mla-plan plan -t 4x8xh200-ib --json`).

    Exit status: 0 written (a warning on stderr when the candidate misses the plan's targets); 2 bad input.

    Examples:

      mla-plan emit --plan plan.json --out launch/

      mla-plan emit --plan plan.json --engine vllm --mode ray --out launch-ray/

      mla-plan emit --plan plan.json --engine sglang --out launch-sglang/
    """
    if not out.strip():
        raise PlanError("--out is empty; give the folder to write")
    head_address, out_dir = checked_head_address(head_address), user_path(out)   # `~/launch` quoted still means home
    loaded = read_plan(plan)
    if disaggregated is not None:
        _emit_disaggregated(loaded, disaggregated, out_dir, model_path, image, force, as_json,
                            candidate is not None or engine is not None or mode != "native" or head_address,
                            rdma_resource)
        return
    if image is not None or rdma_resource is not None:
        raise PlanError("--image and --rdma-resource are for the Kubernetes manifests of --disaggregated")
    candidate = engine_candidate(loaded, candidate, engine, "emit")
    try:
        done = emit(loaded, candidate, engine, out_dir, mode=mode, model_path=model_path,
                    head_address=head_address, force=force)
    except FolderNotEmpty as exc:
        raise PlanError(f"--out {exc}, or pass --force to replace an earlier emit's files") from None
    cand = loaded.candidates[candidate - 1]
    met = cand.performance is None or cand.performance.meets_targets is not False
    misses = [w for w in cand.warnings if "misses" in w] if not met else []
    warn = stderr_console()
    if misses:   # written as asked, but said where a person or a script sees it
        warn.print(f"[yellow]warning:[/yellow] candidate {candidate} does not meet the plan's targets: "
                   + escape("; ".join(misses)), soft_wrap=True)
    if model_path is None:
        warn_weightless(loaded.model_path)
    if as_json:
        print_json({**emitted_json(done, out_dir), "meets_targets": not misses})
        return
    con = console()
    con.print(f"wrote {len(done.paths)} files to {out}:", markup=False)
    for p in done.paths:
        con.print(f"  {p.name}", markup=False)
    con.print(f"next: read {out_dir / 'README.md'} (what to run where, in which order, and the health checks)",
              markup=False)


def _emit_disaggregated(loaded, index: int, out_dir: Path, model_path, image, force: bool, as_json: bool,
                        aggregated_options, rdma_resource=None) -> None:
    if aggregated_options:
        raise PlanError("--candidate, --engine, --mode and --head-address are for aggregated candidates; a "
                        "disaggregated deployment runs its pools' own engine and layouts (--disaggregated alone; for "
                        "another engine's deployments, plan with `mla-plan plan -e ENGINE`)")
    if image is not None and not image.strip():
        raise PlanError("--image is empty")
    try:
        paths = emit_disaggregated(loaded, index, out_dir, model_path, image, force, rdma_resource)
    except FolderNotEmpty as exc:
        raise PlanError(f"--out {exc}, or pass --force to replace an earlier emit's files") from None
    if model_path is None:
        warn_weightless(loaded.model_path)
    if as_json:
        print_json({"out": str(out_dir), "disaggregated": index, "files": [str(p) for p in paths]})
        return
    con = console()
    con.print(f"wrote {len(paths)} files to {out_dir}:", markup=False)
    for p in paths:
        con.print(f"  {p.name}", markup=False)
    con.print(f"next: read {out_dir / 'README.md'} (the pools, the router, the start order, Kubernetes)",
              markup=False)


def emitted_json(done: Emitted, out: Path) -> dict:
    """The files written and every node's commands: argv as the engine receives it (`${VAR}` where the
    script substitutes a variable), and `command`, the same as one shell line."""
    return {"out": str(out), "engine": done.engine, "candidate": done.candidate,
            "files": [str(p) for p in done.paths],
            "commands": [{"node": c.node_rank, "script": f"node-{c.node_rank}.sh", "replica": c.replica,
                          "role": c.role, "gpus": c.gpus, "port": c.port, "env": c.env,
                          "before": [[str(w) for w in b] for b in c.before], "argv": [str(w) for w in c.argv],
                          "command": str(one_line(c.argv))} for c in done.commands],
            "bench": {"script": "bench.sh", "argv": [str(w) for w in done.bench],
                      "command": str(one_line(done.bench))}}
