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
from mla_planner.perf.step import decode_step
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

WHY_OVERLAP = {"vllm": "vLLM v0.14.0 release notes: async scheduling on by default, #27614",
               "sglang": "lmsys.org/blog/2024-12-04-sglang-v0-4: the zero-overhead batch scheduler"}
V1_RUNNER = "VLLM_USE_V2_MODEL_RUNNER"


def host_overlap_off(cmd: Command, layout: Layout) -> str:
    """The flag or variable that stops the overlap ('' when none does, or when the engine's parser refuses the
    command: its own finding says why)."""
    try:
        given = parse_args(vllm_preprocess(cmd.args, []) if cmd.engine == "vllm" else cmd.args, cmd.engine)[0]
    except ParseError:
        return ""
    if cmd.engine == "sglang":
        return OFF_FLAGS["sglang"] if given.get(OFF_FLAGS["sglang"]) and layout.pp == 1 else ""
    if given.get("--async-scheduling") is False:
        return OFF_FLAGS["vllm"]
    return V1_RUNNER if layout.pp > 1 and cmd.env.get(V1_RUNNER, "").strip() == "0" else ""


def host_findings(cmd: Command, spec: ModelSpec, topo: Topology, layout: Layout, calib: Calibration,
                  cuda_graphs: bool) -> list[tuple]:
    """(level, flag, text): a decode step at 2k tokens of context with the command's running-request cap per DP rank
    (given: SGLang's --max-running-requests is the server's, split over its DP-attention ranks; else the engine's
    default, engines.memory_rules.engine_default_knobs), with the host work overlapped and not, with or without
    `cuda_graphs` as the command runs."""
    flag = host_overlap_off(cmd, layout)
    given = cmd.values.get("max_seqs")
    if not flag or (given is not None and not given.isdigit()) or given == "0":
        return []     # a cap that is not a count: the engine's parser reports it
    kv = KV.get(cmd.values.get("kv", "auto"), "bf16")
    seqs = (max(1, int(given) // (layout.dp if cmd.engine == "sglang" else 1)) if given
            else engine_default_knobs(cmd.engine, spec, topo, layout.dp).max_num_seqs)
    knobs = Knobs(engine=cmd.engine, kv_cache_dtype=kv, cuda_graphs=cuda_graphs)
    ms = [decode_step(spec, topo, layout, replace(knobs, host_overlap=overlap), seqs, 2048, calib).tpot_s * 1e3
          for overlap in (True, False)]
    return [("warn", flag, f"host work not overlapped: with {seqs:,} requests running per DP rank every decode step "
                           f"also waits for the scheduler, {ms[1]:.1f} ms per token instead of {ms[0]:.1f} (the step "
                           f"model, {calib.host_per_request_s * 1e6:.0f} us of host work per request per step); "
                           f"drop it unless a feature needs it ({WHY_OVERLAP[cmd.engine]})")]
