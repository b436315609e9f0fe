"""`mla-plan check-log`: an engine's start-up log held against a plan candidate (logcheck.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional


from mla_planner.audit.logcheck import check_log, recognised
from mla_planner.audit.logcheck_nccl import nccl_tests_check, rows as nccl_rows
from mla_planner.cli.params import Opt, Arg
from mla_planner.cli.common import JsonOpt, guard, print_json
from mla_planner.cli.console import console
from mla_planner.core.errors import InputError
from mla_planner.core.files import read_text_file
from mla_planner.search.planfile import engine_candidate, pick, read_plan

MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "absent": "-"}


@guard
def check_log_cmd(logs: Annotated[list[str], Arg(help="The engine's log file(s): every node's, or the "
                                                             "head's (stdout and stderr as the node scripts ran).")],
                  plan: Annotated[Path, Opt("--plan", "-p", help="Plan file written by "
                                                     "`mla-plan plan --json`.")],
                  candidate: Annotated[Optional[int], Opt("--candidate", "-c", help="The candidate that "
                                                                   "was launched (default: 1).")] = None,
                  as_json: JsonOpt = False) -> None:
    """Hold an engine's log and bench.sh's output against the plan candidate that was launched.

    Checked: the KV pool the engine sized (within 5 % of the plan), the network NCCL chose between nodes (start
    with NCCL_DEBUG=INFO), untuned fused-MoE kernels, eager mode and the KV cache dtype, the vLLM release, and
    bench.sh's output tok/s and TPOT (pass its output too) against the prediction; and nccl-tests'
    all_reduce_perf output (the command the emitted README gives for TP across nodes) against the all-reduce
    the plan prices.

    Exit status: 0 nothing contradicts the plan (warnings and absent lines included); 1 a check failed;
    2 bad input.

    Examples:

      ./node-0.sh 2>&1 | tee node-0.log;  mla-plan check-log node-0.log --plan plan.json

      ./bench.sh | tee bench.log;  mla-plan check-log node-0.log bench.log --plan plan.json

      mla-plan check-log node-*.log --plan plan.json --candidate 2 --json
    """
    loaded = read_plan(plan)
    number = engine_candidate(loaded, candidate, None, "check-log")
    cand = pick(loaded, number, "check-log")
    files = {name: read_text_file(name) for name in logs}
    text = "\n".join(files.values())
    if not recognised(text) and not nccl_rows(text):
        raise InputError(", ".join(logs), "no vLLM, SGLang, NCCL, nccl-tests or bench.sh line this command reads: "
                         "pass the engine's own output (`./node-0.sh 2>&1 | tee node-0.log`) or bench.sh's")
    nccl = nccl_tests_check(text, loaded, cand)
    checks = ([nccl] if nccl else []) + (check_log(text, loaded, cand, files) if recognised(text) else [])
    failed = any(c.status == "fail" for c in checks)
    who = f"candidate {number} ({cand.layout.label}, {cand.knobs.engine}, KV {cand.knobs.kv_cache_dtype})"
    if as_json:
        print_json({"candidate": number, "layout": cand.layout.label, "engine": cand.knobs.engine,
                    "kv_cache_dtype": cand.knobs.kv_cache_dtype, "ok": not failed,
                    "checks": [{"name": c.name, "status": c.status, "text": c.text} for c in checks]})
    else:
        out = console()
        out.print(f"{who}: {len(logs)} log file(s)", markup=False)
        for c in checks:
            out.print(f"  {MARK[c.status]:<4} {c.name}: {c.text}", markup=False)
    raise SystemExit(1 if failed else 0)
