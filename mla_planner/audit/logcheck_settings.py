"""The settings an engine logged held against the candidate it was launched as: its parallel layout, then the knobs
that size its KV pool and batch (context length, block / page size, memory fraction, vLLM's max-num-seqs).

A different layout is another candidate (its memory and speed are not the plan's): a failure. A different knob
changes what the plan's figures assume, and says why the KV check disagrees: a warning.

What each engine logs for the flags the emitted commands pass (launch/vllm.py, launch/sglang.py sizing_flags), read by
logcheck_read._settings:
  vLLM 0.33    tensor_parallel_size = tp, pipeline_parallel_size = pp, data_parallel_size = dp (the config line);
               block_size, gpu_memory_utilization, max_num_seqs (non-default args); max_seq_len = --max-model-len.
  SGLang 0.5.23  tp_size = tp x dp (its --tp-size spans the attention-DP ranks), pp_size, attn_dp_size = dp
               (arg_groups/fields/parallel.py; before it, dp_size with enable_dp_attention: logcheck_read), ep_size,
               dcp_size,
               page_size, context_length, and mem_fraction_static as resolved: x 0.85 where its aiter reserve applies
               (engines.profile.static_fraction_scale). Its max_running_requests is not compared: the scheduler
               lowers it to what the pool holds (kv_cache_configurator.resolve_max_num_reqs).
"""

from __future__ import annotations

from mla_planner.audit.logcheck_read import LogCheck, LogFacts
from mla_planner.engines.profile import AITER_RESERVE_SCALE, static_fraction_scale
from mla_planner.search.planfile import Candidate, Plan

LAYOUT = ("tp", "pp", "dp", "dcp", "ep")
FRACTION_TOLERANCE = 0.0005     # the flag is written to 3 decimals; SGLang's aiter scaling is not rounded
WORDS = {"vllm": {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size",
                  "dcp": "decode_context_parallel_size", "max_model_len": "max_model_len", "block_size": "block_size",
                  "memory_fraction": "gpu_memory_utilization", "max_num_seqs": "max_num_seqs"},
         "sglang": {"tp": "tp_size", "pp": "pp_size", "dp": "attn_dp_size", "dcp": "dcp_size", "ep": "ep_size",
                    "max_model_len": "context_length", "block_size": "page_size",
                    "memory_fraction": "mem_fraction_static"}}


def planned_settings(plan: Plan, cand: Candidate) -> dict[str, object]:
    """What the engine logs when it runs the candidate's emitted command, by the reader's neutral names."""
    L, k = cand.layout, cand.knobs
    if k.engine == "vllm":
        return dict(tp=L.tp, pp=L.pp, dp=L.dp, dcp=L.dcp, max_model_len=k.max_model_len, block_size=k.block_size,
                    memory_fraction=k.memory_fraction, max_num_seqs=k.max_num_seqs)
    scale = static_fraction_scale(k, plan.topology.gpu, plan.spec, L)
    return dict(tp=L.tp * L.dp, pp=L.pp, dp=L.dp, dcp=L.dcp, ep=L.ep, max_model_len=k.max_model_len,
                block_size=k.block_size, memory_fraction=k.memory_fraction * scale)


def settings_check(facts: LogFacts, plan: Plan, cand: Candidate) -> LogCheck:
    """The logged layout and sizing knobs against the candidate's (absent when the log has none of them)."""
    engine = cand.knobs.engine
    if facts.engine != engine:
        return LogCheck("launch_settings", "absent", f"no {engine} settings line to compare with the plan's")
    planned, logged = planned_settings(plan, cand), facts.settings
    compared = [n for n in planned if n in logged]
    if not compared:
        return LogCheck("launch_settings", "absent", "the log names none of the layout and sizing settings")
    differ = [n for n in compared if not _same(n, logged[n], planned[n])]
    scaled = planned["memory_fraction"] != cand.knobs.memory_fraction    # SGLang's aiter reserve on ROCm
    words = "; ".join(f"{WORDS[engine][n]}={_fmt(logged[n])} where the plan has {_fmt(planned[n])}"
                      + (f" (its --mem-fraction-static {_fmt(cand.knobs.memory_fraction)} x {AITER_RESERVE_SCALE:g}, "
                         "SGLang's aiter reserve)" if n == "memory_fraction" and scaled else "") for n in differ)
    if any(n in LAYOUT for n in differ):
        return LogCheck("launch_settings", "fail", f"{words}: another layout than the candidate's, whose memory and "
                                                   "speed the plan did not price (check --candidate, or the flags)")
    if differ:
        return LogCheck("launch_settings", "warn", f"{words}: the plan's KV pool and batch assume its own values")
    return LogCheck("launch_settings", "ok", ", ".join(f"{WORDS[engine][n]}={_fmt(logged[n])}" for n in compared)
                    + ", as planned")


def _same(name: str, logged: object, planned: float) -> bool:
    if name == "memory_fraction":
        return isinstance(logged, float) and abs(logged - planned) <= FRACTION_TOLERANCE
    return logged == planned


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{value:,}" if isinstance(value, int) else str(value)
