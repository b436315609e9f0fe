"""`mla-plan check-log`: an engine's log read by itself (audit/logcheck_read.py, logcheck_alone.py), or held
against a plan candidate (audit/logcheck.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from mla_planner.audit.logcheck import check_log
from mla_planner.audit.logcheck_alone import alone_checks, facts_dict, startup_check
from mla_planner.audit.logcheck_disagg import ROLES, one_pool, pool_candidate, pool_of, role_check
from mla_planner.audit.logcheck_nccl import nccl_tests_check, rows as nccl_rows, table_summary
from mla_planner.audit.logcheck_read import LogCheck, LogFacts, read_log
from mla_planner.cli.params import Opt, Arg
from mla_planner.cli.common import JsonOpt, guard, print_json
from mla_planner.cli.console import console
from mla_planner.core.errors import InputError
from mla_planner.core.files import read_text_file
from mla_planner.search.deployment import pick_disaggregated
from mla_planner.search.planfile_read import read_plan
from mla_planner.search.pick import engine_candidate, pick

MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "absent": "-"}


@guard
def check_log_cmd(logs: Annotated[list[str], Arg(help="The engine's log file(s): every node's, or the "
                                                             "head's (stdout and stderr as the node scripts ran).")],
                  plan: Annotated[Optional[Path], Opt("--plan", "-p", help="Plan file written by `mla-plan plan "
                                                      "--json`. Without it, the log is read by itself: what "
                                                      "the engine says it runs, nothing held against a plan.")] = None,
                  candidate: Annotated[Optional[int], Opt("--candidate", "-c", help="The candidate that "
                                                                   "was launched (default: 1; needs --plan).")] = None,
                  disaggregated: Annotated[Optional[int], Opt("--disaggregated", "-d", help=(
                      "The disaggregated deployment that was launched (D1 = 1; needs --plan): a pool's logs held "
                      "against that pool, bench.sh's behind the router against the deployment."))] = None,
                  pool: Annotated[Optional[str], Opt("--pool", help="prefill or decode: the pool the logs come "
                                                     "from (default: the role the engine logged).")] = None,
                  as_json: JsonOpt = False) -> None:
    """Read an engine's log: what it runs and sized; with --plan, held against the launched candidate.

    Without --plan (a server you launched yourself) it reports what the log shows: the engine and its release,
    the KV pool it sized, the settings it logged (tp/pp/dp, max_model_len, KV dtype, block size, memory
    fraction, attention backend), untuned fused-MoE kernels, the transports NCCL chose (start with
    NCCL_DEBUG=INFO), a start-up refusal, and bench.sh's tok/s and TPOT. With --plan, also: the KV pool
    within 5 % of the plan's, the logged layout and sizing settings as the candidate's, NCCL on IB where the plan
    needs it, eager mode and the KV dtype as planned, the
    vLLM release, bench.sh's result against the prediction, and nccl-tests' all_reduce_perf output against
    the all-reduce the plan prices. A line whose number does not parse is ignored with a note.

    Exit status: 0 nothing wrong found (warnings, notes and absent lines included); 1 a check failed: the log
    contradicts the plan, or the engine refused to start (the one failure without --plan); 2 bad input.

    Examples:

      ./node-0.sh 2>&1 | tee node-0.log;  mla-plan check-log node-0.log --plan plan.json

      ./bench.sh | tee bench.log;  mla-plan check-log node-0.log bench.log --plan plan.json

      mla-plan check-log node-*.log --plan plan.json --candidate 2 --json

      mla-plan check-log decode-node-0.log --plan plan.json --disaggregated 1

      vllm serve deepseek-ai/DeepSeek-V3 -tp 8 2>&1 | tee server.log;  mla-plan check-log server.log
    """
    if plan is None and (candidate is not None or disaggregated is not None):
        raise InputError("--candidate" if candidate is not None else "--disaggregated",
                         "names a candidate of a plan: give --plan too")
    if disaggregated is None and pool is not None:
        raise InputError("--pool", "names a pool of a disaggregated deployment: give --disaggregated too")
    if disaggregated is not None and candidate is not None:
        raise InputError("--disaggregated", "give --candidate (an aggregated candidate) or --disaggregated, not both")
    loaded = read_plan(plan) if plan is not None else None
    files = {name: read_text_file(name) for name in logs}
    if disaggregated is not None:
        _check_disaggregated(logs, files, loaded, disaggregated, pool, as_json)
    number = engine_candidate(loaded, candidate, None, "check-log") if loaded is not None else None
    cand = pick(loaded, number, "check-log") if loaded is not None else None
    text = "\n".join(files.values())
    facts = read_log(text)
    if not facts.recognised and not nccl_rows(text):
        raise InputError(", ".join(logs), "no vLLM, SGLang, NCCL, nccl-tests or bench.sh line this command reads: "
                         "pass the engine's own output (`./node-0.sh 2>&1 | tee node-0.log`) or bench.sh's")
    if cand is None:
        table = table_summary(text)
        checks = ([table] if table else []) + (alone_checks(facts) if facts.recognised else [])
    else:
        nccl, start = nccl_tests_check(text, loaded, cand), startup_check(facts)
        checks = ([nccl] if nccl else []) + (check_log(facts, loaded, cand, files) if facts.recognised else []) \
            + ([start] if start.status in ("fail", "warn") else [])   # else the kv_cache check says as much
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        head = ({"candidate": number, "layout": cand.layout.label, "engine": cand.knobs.engine,
                 "kv_cache_dtype": cand.knobs.kv_cache_dtype} if cand is not None else {})
        print_json({**head, "against_plan": cand is not None, "ok": not failed,
                    "checks": [{"name": c.name, "status": c.status, "text": c.text} for c in checks],
                    "facts": facts_dict(facts), "notes": facts.notes})
    else:
        _print(logs, facts, checks, f"candidate {number} ({cand.layout.label}, {cand.knobs.engine}, KV "
                                    f"{cand.knobs.kv_cache_dtype})" if cand is not None else None)
    raise SystemExit(1 if failed else 0)


def _check_disaggregated(logs: list[str], files: dict, loaded, index: int, pool: Optional[str], as_json: bool) -> None:
    """A pool's logs (or bench.sh's behind the router) against disaggregated deployment D`index`; exits."""
    d = pick_disaggregated(loaded, index, "check-log")
    text = "\n".join(files.values())
    facts = read_log(text)
    if not facts.recognised:
        raise InputError(", ".join(logs), "no vLLM, SGLang or bench.sh line this command reads: pass a pool node's "
                         "output (`./decode-node-0.sh 2>&1 | tee decode-node-0.log`) or bench.sh's")
    one_pool({name: read_log(body) for name, body in files.items()})
    role = pool_of(facts, pool)
    cand = pool_candidate(d, role if role in ROLES else "decode")
    checks = check_log(facts, loaded, cand, files) if role in ROLES or role is None else []   # none / both: no pool
    if role is not None and facts.engine:
        start = startup_check(facts)     # an engine that refused to start fails here as it does without --plan
        checks = [role_check(facts, role)] + checks + ([start] if start.status in ("fail", "warn") else [])
    else:   # bench.sh's output alone: only its result means anything here
        checks = [c for c in checks if c.name == "benchmark"]
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        print_json({"disaggregated": index, "label": d.label, "engine": d.engine, "pool": role,
                    "against_plan": True, "ok": not failed,
                    "checks": [{"name": c.name, "status": c.status, "text": c.text} for c in checks],
                    "facts": facts_dict(facts), "notes": facts.notes})
    else:
        _print(logs, facts, checks, f"disaggregated D{index} ({d.label}, {d.engine})"
                                    + (f", {role} pool" if role else ", behind its router"))
    raise SystemExit(1 if failed else 0)


def _print(logs: list[str], facts: LogFacts, checks: list[LogCheck], who: Optional[str]) -> None:
    out = console()
    engine = {"vllm": "vLLM", "sglang": "SGLang"}.get(facts.engine or "", "")
    read = f"{engine} {facts.version or ''}".strip() + " log" if engine else "log"
    out.print(f"{who}: {len(logs)} log file(s)" if who else
              f"{read}, read by itself (no --plan: nothing held against a plan): {len(logs)} file(s)", markup=False)
    for c in checks:
        out.print(f"  {MARK[c.status]:<4} {c.name}: {c.text}", markup=False)
    for n in facts.notes:
        out.print(f"  note {n}", markup=False)
