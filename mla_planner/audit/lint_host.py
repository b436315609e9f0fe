"""A launch command that stops the engine overlapping its host work with the GPU (engines/scheduling.py), priced by the
step model (perf/host.py): every decode step then also waits for the scheduler.

What turns the overlap off, read as the engine's own parser reads the words (engines/parser: underscores, unique
prefixes, the later of two spellings): vLLM `--no-async-scheduling`, or `VLLM_USE_V2_MODEL_RUNNER=0` with pipeline
parallelism (vLLM 0.33 config/vllm.py: the V1 model runner does not run async scheduling with PP); SGLang
`--disable-overlap-schedule`, except under pipeline parallelism, which sets it itself and overlaps in its own loop.
"""

from __future__ import annotations

from dataclasses import replace

from mla_planner.audit.lint_command import KV, Command
from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.engines.parser.parsing import parse_args
from mla_planner.engines.parser.preprocess import vllm_preprocess
from mla_planner.engines.parser.values import ParseError
from mla_planner.engines.scheduling import OFF_FLAGS
from mla_planner.memory.report import memory_report
from mla_planner.perf.step import decode_step
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

V1_RUNNER = "VLLM_USE_V2_MODEL_RUNNER"
WHY_OVERLAP = {"vllm": "vLLM v0.14.0 release notes: async scheduling on by default, #27614",
               "sglang": "lmsys.org/blog/2024-12-04-sglang-v0-4: the zero-overhead batch scheduler",
               V1_RUNNER: "vLLM 0.33 config/vllm.py: the V1 model runner runs no async scheduling with pipeline "
                          "parallelism; the V2 runner, the default, does"}
CAP_FLAG = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests"}
DRAFT_FLAG = {"vllm": "--speculative-config", "sglang": "--speculative-algorithm"}
CONTEXT_TOKENS = 2048       # the context a running request is priced at


def parsed(cmd: Command) -> dict | None:
    """The command's flags as the engine's parser resolves them (None when the parser refuses the command: the
    engine's own finding says why)."""
    try:
        return parse_args(vllm_preprocess(cmd.args, []) if cmd.engine == "vllm" else cmd.args, cmd.engine)[0]
    except ParseError:
        return None


def host_overlap_off(cmd: Command, layout: Layout, given: dict | None) -> str:
    """The flag or variable that stops the overlap, '' when none does."""
    if given is None:
        return ""
    if cmd.engine == "sglang":
        return OFF_FLAGS["sglang"] if given.get(OFF_FLAGS["sglang"]) and layout.pp == 1 else ""
    if given.get("--async-scheduling") is False:
        return OFF_FLAGS["vllm"]
    return V1_RUNNER if layout.pp > 1 and cmd.env.get(V1_RUNNER, "").strip() == "0" else ""


def host_findings(cmd: Command, spec: ModelSpec, topo: Topology, layout: Layout, calib: Calibration,
                  cuda_graphs: bool) -> list[tuple]:
    """(level, flag, text): a decode step at 2k tokens of context with as many requests per DP rank as the command
    lets run (its cap, a given SGLang --max-running-requests split over the DP-attention ranks, else the engine's
    default with or without a drafter: engines.memory_rules.engine_default_knobs), no more than the KV pool holds
    at that context, with the host work overlapped and not; with a drafter, per token gained."""
    given = parsed(cmd)
    flag = host_overlap_off(cmd, layout, given)
    if not flag:
        return []
    mtp = bool(given.get(DRAFT_FLAG[cmd.engine])) and spec.drafter is not None and (spec.drafter != "mtp"
                                                                                    or spec.has_mtp_head)
    cap = given.get(CAP_FLAG[cmd.engine])
    knobs = engine_default_knobs(cmd.engine, spec, topo, layout.dp, mtp=mtp,
                                 kv_cache_dtype=KV.get(cmd.values.get("kv", "auto"), "bf16"),
                                 cuda_graphs=cuda_graphs)
    seqs = knobs.max_num_seqs
    if isinstance(cap, int) and cap > 0:
        seqs = max(1, cap // layout.dp) if cmd.engine == "sglang" else cap
    pool = memory_report(spec, topo, layout, replace(knobs, max_model_len=CONTEXT_TOKENS))
    seqs = min(seqs, max(1, pool.kv_capacity_tokens // CONTEXT_TOKENS)) if pool.fits else seqs
    ms = [decode_step(spec, topo, layout, replace(knobs, host_overlap=overlap), seqs, CONTEXT_TOKENS,
                      calib).tpot_s * 1e3 for overlap in (True, False)]
    if ms[1] - ms[0] < 0.05:
        return []
    running = f"{seqs:,} request{'s' if seqs > 1 else ''}"
    return [("warn", flag, f"host work not overlapped: with {running} running per DP rank every decode step "
                           f"also waits for the scheduler, {ms[1]:.1f} ms per token instead of {ms[0]:.1f} (the step "
                           f"model, {calib.host_per_request_s * 1e6:.0f} us of host work per request per step); "
                           f"drop it unless a feature needs it ({WHY_OVERLAP.get(flag, WHY_OVERLAP[cmd.engine])})")]
