"""check-log for a disaggregated deployment: a pool's engine logs held against that pool (its layout, knobs and KV
pool, through the same checks as a candidate's: logcheck.check_log), the role the engine says it runs, and bench.sh's
result behind the router against the deployment's figures.

The role is read from the engine's own settings line: SGLang's server_args `disaggregation_mode` ('prefill' |
'decode' | 'null', sglang/srt/server_args.py), vLLM's KVTransferConfig `kv_role` ('kv_producer' | 'kv_consumer' |
'kv_both', vllm/config/kv_transfer.py) in its non-default args.
"""

from __future__ import annotations

from typing import Optional

from mla_planner.audit.logcheck_read import LogCheck, LogFacts
from mla_planner.core.errors import PlanError
from mla_planner.search.candidate import CandidateMemory, DisaggCandidate, Performance
from mla_planner.search.planfile import Candidate

ROLES = ("prefill", "decode")
LOGGED_ROLE = {"prefill": "prefill", "decode": "decode", "kv_producer": "prefill", "kv_consumer": "decode",
               "kv_both": "both", "null": "none"}


def logged_role(facts: LogFacts) -> Optional[str]:
    """prefill, decode, both (vLLM kv_both), none (SGLang without disaggregation), or None when not logged."""
    raw = facts.settings.get("pd_role")
    return LOGGED_ROLE.get(str(raw), str(raw)) if raw is not None else None


def pool_of(facts: LogFacts, given: Optional[str]) -> Optional[str]:
    """The pool the logs belong to: `given` (--pool), else the role the engine logged (`none` or `both` too, which
    role_check fails); None for a log with no engine lines (bench.sh's or nccl-tests' alone)."""
    if given is not None:
        if given not in ROLES:
            raise PlanError(f"--pool must be prefill or decode, got '{given}'")
        return given
    role = logged_role(facts)
    if role is not None:
        return role
    if facts.engine:
        raise PlanError("the log does not say which pool it ran in (SGLang's disaggregation_mode, vLLM's kv_role): "
                        "give --pool prefill or --pool decode")
    return None


def one_pool(files: dict[str, LogFacts]) -> None:
    """Refuse logs of both pools given together (each would be held against one pool's layout and pool): name which
    file logged which role."""
    roles: dict[str, list[str]] = {}
    for name, facts in files.items():
        if (role := logged_role(facts)) is not None:
            roles.setdefault(role, []).append(name)
    if len(roles) > 1:
        said = "; ".join(f"{role}: {', '.join(names)}" for role, names in sorted(roles.items()))
        raise PlanError(f"the logs come from more than one pool ({said}): check one pool's logs at a time")


def pool_candidate(d: DisaggCandidate, role: str) -> Candidate:
    """The pool as a candidate the checks read: its instance's layout and knobs, the KV pool a DP rank of it holds,
    and the deployment's throughput and TPOT (what bench.sh behind the router measures)."""
    pool = d.prefill if role == "prefill" else d.decode
    p = d.performance
    kv = (p.prefill_kv_capacity_tokens if role == "prefill" else p.decode_kv_capacity_tokens) if p else None
    perf = Performance(throughput_tokens_per_s=p.throughput_tokens_per_s, tpot_s=p.tpot_s,
                       meets_targets=p.meets_targets) if p else None
    return Candidate(pool.layout, pool.knobs, CandidateMemory(kv_capacity_tokens=kv), perf)


def role_check(facts: LogFacts, role: str) -> LogCheck:
    """The engine runs the pool's role (a decode server started as prefill, or without disaggregation, never takes
    part in the deployment)."""
    logged = logged_role(facts)
    if logged is None:
        return LogCheck("pd_role", "absent", "no disaggregation_mode (SGLang) or kv_role (vLLM) in the logged "
                                             "settings")
    if role not in ROLES:     # the log's own role, not a pool's: no pool given to hold it against
        return LogCheck("pd_role", "fail", f"the engine runs as {logged}, not as a prefill or decode pool: check its "
                                           "--disaggregation-mode / --kv-transfer-config")
    if logged != role:
        return LogCheck("pd_role", "fail", f"the engine runs as {logged}, where this is the plan's {role} pool: "
                                           "check its --disaggregation-mode / --kv-transfer-config")
    return LogCheck("pd_role", "ok", f"the engine runs as the {role} pool")
