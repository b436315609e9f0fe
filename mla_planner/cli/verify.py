"""`mla-plan verify`: check a plan candidate on the GPUs it is meant for. Parse, call, render.

torch is imported inside the command only (the planner never needs it); without it the command ends
with one line. Exit status: 0 every judged check passed and nothing the plan depends on is missing (or a
rehearsal), 1 a check failed or could not run or the plan is not verified, 2 bad input.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import Annotated, Optional

import click
from rich.markup import escape

from mla_planner.specs.calibration import load_calibration
from mla_planner.cli.params import Opt, typed_options
from mla_planner.cli.common import (DEFAULT_MODEL, DEFAULT_TOPOLOGY, JsonOpt, ModelOpt, TopologyOpt, check_context,
                                    check_mtp, check_output_file, guard, print_json, lower_case)
from mla_planner.cli.console import console, stderr_console
from mla_planner.cli.plannable import check_plannable
from mla_planner.cli.options import workload_from, knob_args_of, knobs_from_flags as memory_knobs, kv_knobs, positive
from mla_planner.cli.planning import run_plan
from mla_planner.core.errors import PlanError
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.sparse import is_sparse
from mla_planner.core.files import path_kind, user_path
from mla_planner.engines.layouts import engine_layout_problem
from mla_planner.search.planfile_read import read_plan
from mla_planner.search.pick import pick
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import layout_problems, parse_layout
from mla_planner.specs.topology import load_topology
from mla_planner.verify.as_planned import as_planned
from mla_planner.verify.calibrate import write_calibration
from mla_planner.verify.check import Options
from mla_planner.verify.report import progress, rank_line, render, report_dict, verdict_of
from mla_planner.verify.target import Chosen, make_target, rank_info_from_env
from mla_planner.verify.torchrun import launch_lines

SECTIONS = ("env", "fit", "attention", "gemms", "collectives")
LAUNCH_ONLY = {"print_launch", "head", "port"}
KNOB_OPTIONS = ("gpu_memory_utilization", "mem_fraction_static", "kv_cache_dtype", "block_size", "max_model_len",
                "max_num_seqs", "max_num_batched_tokens", "mtp", "enforce_eager")   # a --layout's knobs
PLAN_SETS = KNOB_OPTIONS + ("model", "topology", "engine", "input_len", "output_len", "tpot_ms")   # what --plan fixes
PINNABLE = ("block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens")   # else as `plan` sets them
IntOpt = Optional[int]


def candidate_from_options(plan: Optional[str], candidate: int, model: str, topology: str, layout: Optional[str],
                           knob_args: dict, workload_args: dict, calibration: Optional[str],
                           batch: IntOpt = None, context: IntOpt = None) -> Chosen:
    """The candidate to verify: candidate N of a plan file, candidate N of a fresh plan (plan's own search on
    --model/--topology and the workload options), or a layout given with memory's knob options."""
    if plan and layout:
        raise PlanError("give --plan (and --candidate) or --layout, not both")
    if plan or not layout:
        if plan:
            p, where = read_plan(plan), f"{plan} candidate {candidate}"
            check_plannable(p.spec, "verify", p.topology.gpu)
        else:
            check_plannable(load_model(model).spec, "verify", load_topology(topology).gpu)
            p = run_plan(model, topology, Workload(**workload_args), knob_args.get("plan_engine"), None, None,
                         Path(calibration) if calibration else None)[0]
            where = f"candidate {candidate} of the plan for {p.spec.name} on {p.topology.name}"
        cand = pick(p, candidate, where)
        perf = cand.performance.concurrency_per_dp_rank if cand.performance else None
        planned_batch = perf if isinstance(perf, int) and perf > 0 else None
        return Chosen(p.spec, p.topology, cand.layout, cand.knobs, p.workload,
                      load_calibration(calibration, p.topology, p.calibration), where, batch or planned_batch, context)
    spec, topo = load_model(model).spec, load_topology(topology)
    check_plannable(spec, "verify", topo.gpu)
    lay = parse_layout(layout, topo)
    problems = layout_problems(lay, spec, topo.gpus_per_node, topo.total_gpus)
    if problems:
        raise PlanError(f"layout {lay.label} cannot exist on {topo.name}: {'; '.join(problems)}")
    workload = Workload(**workload_args)
    check_context(spec, workload)
    check_mtp(spec, knob_args["mtp"])
    given = dict(knob_args)
    given["max_model_len"] = given.get("max_model_len") or workload.max_context_len
    given.pop("plan_engine", None)
    util, static, engine, kv_text = given.pop("util"), given.pop("static"), given.pop("engine"), given.pop("kv_text")
    if is_sparse(spec) or is_compressed(spec):   # the engine's sparse backend, KV storage and blocks (DSA: engines/
                                                 # sparse.py; DeepSeek-V4: 584-B rows on 256-token blocks)
        given.update(kv_knobs(spec, topo, lay, engine, kv_text, given.get("block_size"))[0])
    knobs = memory_knobs(spec, topo, lay, engine, util, static, given)
    if problem := engine_layout_problem(spec, topo, lay, engine, knobs.dense_per_rank):
        raise PlanError(f"layout {lay.label} cannot start on {engine}: {problem}")
    calib = load_calibration(calibration, topo)
    pinned = {k: knob_args[k] for k in PINNABLE if knob_args.get(k) is not None}   # what the user gave
    if util is not None or static is not None:
        pinned["memory_fraction"] = knobs.memory_fraction
    knobs, notes = as_planned(spec, topo, lay, knobs, workload, calib, pinned)
    return Chosen(spec, topo, lay, knobs, workload, calib, f"--layout {layout}", batch, context, notes)


def _sections(only: Optional[list[str]]) -> frozenset:
    chosen = [s.strip() for item in (only or []) for s in item.split(",") if s.strip()]
    for s in chosen:
        if s not in SECTIONS:
            raise PlanError(f"--only: unknown check '{s}'; choose from {', '.join(SECTIONS)}")
    return frozenset(chosen or SECTIONS)


def _passthrough(ctx: click.Context) -> list[str]:
    """This command's options as given (defaults left out), for the torchrun commands to repeat."""
    words: list[str] = []
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if param.name in LAUNCH_ONLY or param.param_type_name != "option" or value in (None, [], ()):
            continue
        if value == param.default:
            continue
        flag = next(o for o in param.opts if o.startswith("--"))
        if param.is_flag:
            words += [flag] if value else list(param.secondary_opts[:1])
            continue
        for v in (value if param.multiple else [value]):
            words += [flag, f"{v:g}" if isinstance(v, float) else _absolute(param.name, str(v))]
    return words


PATH_OPTIONS = ("plan", "calibration", "write_cal", "model", "topology")


def _absolute(name: str, value: str) -> str:
    """A file the other nodes must read, as an absolute path (they start in other folders, as emit's
    scripts do); built-in names and values that are not paths here stay as given."""
    if name not in PATH_OPTIONS:
        return value
    path = user_path(value)
    return str(path.resolve()) if name == "write_cal" or path_kind(path) != "missing" else value


def _need_torch(distributed: bool = False) -> None:
    """torch, and under torchrun numpy too: torch.distributed's object collectives, which gather every rank's
    results to rank 0, need it ("Numpy is not available" otherwise, after minutes of checks)."""
    try:
        import torch
    except ImportError:
        raise PlanError("verify needs torch: pip install 'mla-plan[verify]'") from None
    del torch                     # only whether it imports matters here
    if distributed and find_spec("numpy") is None:
        raise PlanError("verify under torchrun needs numpy (torch.distributed gathers the ranks' results with it): "
                        "pip install 'mla-plan[verify]'")


def _calibrate(path: str, checks: list, dev, chosen: Chosen) -> tuple[dict, int]:
    """({path, written, efficiency | reason}, exit status floor)."""
    from mla_planner.verify.env import describe, gpu_mismatches

    gpu = chosen.topo.gpu.name if dev.type == "cuda" and not gpu_mismatches(dev, chosen.topo.gpu) else dev.type
    try:
        info = write_calibration(path, checks, gpu, chosen.topo.name, describe(dev))
    except PlanError as exc:
        failed = any(c.status in ("error", "fail") for c in checks)    # a check's fault, not the input's
        return {"path": path, "written": False, "reason": str(exc)}, 1 if failed else 2
    return info | {"written": True}, 0


@guard
def verify_cmd(
    ctx: click.Context,
    plan: Annotated[Optional[str], Opt("--plan", help="Plan file written by `mla-plan plan --json`.")] = None,
    candidate: Annotated[int, Opt("--candidate", "-c", help="Which candidate of --plan (1 = best).")] = 1,
    model: ModelOpt = DEFAULT_MODEL,
    topology: TopologyOpt = DEFAULT_TOPOLOGY,
    layout: Annotated[Optional[str], Opt("--layout", "-l",
                                                  help='Layout without a plan, e.g. "tp=8,pp=2".')] = None,
    engine: Annotated[Optional[str], Opt("--engine", "-e",
        callback=lower_case, help="vllm or sglang (with --layout: default vllm; "
                                                  "without --plan or --layout: restricts the fresh plan).")] = None,
    gpu_memory_utilization: Annotated[Optional[float], Opt("--gpu-memory-utilization",
                                                                    help="vLLM's memory fraction.")] = None,
    mem_fraction_static: Annotated[Optional[float], Opt("--mem-fraction-static",
                                                                 help="SGLang's memory fraction.")] = None,
    kv_cache_dtype: Annotated[str, Opt("--kv-cache-dtype",
                                                help="auto (= bf16; sparse attention: the engine's default), bf16, fp8 or fp8_ds_mla.")] = "auto",
    block_size: Annotated[IntOpt, Opt("--block-size", help="Tokens per KV block (engine default).")] = None,
    max_model_len: Annotated[IntOpt, Opt("--max-model-len", help="Default: the workload's longest.")] = None,
    max_num_seqs: Annotated[IntOpt, Opt("--max-num-seqs", help="Running requests per DP rank.")] = None,
    max_num_batched_tokens: Annotated[IntOpt, Opt("--max-num-batched-tokens", help="Prefill chunk.")] = None,
    mtp: Annotated[bool, Opt("--mtp", help="Serve with the MTP draft layer.")] = False,
    enforce_eager: Annotated[bool, Opt("--enforce-eager", help="No CUDA graphs.")] = False,
    input_len: Annotated[str, Opt("--input-len", help="Prompt tokens: '2048' or 'p50=1024,p99=8192' "
                                           "(as plan takes it).")] = "2048",
    output_len: Annotated[str, Opt("--output-len", help="Output tokens: '512' or "
                                            "'p50=256,p99=2048'.")] = "512",
    tpot_ms: Annotated[float, Opt("--tpot-ms", help="Target time per output token.")] = 50.0,
    batch: Annotated[IntOpt, Opt("--batch", help="Decode sequences per DP rank to check (default: the "
                                          "plan's concurrency).")] = None,
    context: Annotated[IntOpt, Opt("--context", help="Tokens per sequence to check (default: input + "
                                            "output / 2).")] = None,
    calibration: Annotated[Optional[str], Opt("--calibration", help="Calibration file for the "
                                                       "predictions (default: the one a --plan file recorded, "
                                                       "if any).")] = None,
    device: Annotated[str, Opt("--device", help="cuda (the GPUs the plan is for) or cpu (a rehearsal at "
                                        "small shapes).")] = "cuda",
    as_json: JsonOpt = False,
    write_cal: Annotated[Optional[str], Opt("--write-calibration", help="Write the measured efficiencies "
                                                     "here (for --calibration of plan / compare).")] = None,
    print_launch: Annotated[bool, Opt("--print-launch", help="Print the per-node torchrun commands "
                                               "that run verify over the plan's GPUs, then exit.")] = False,
    head: Annotated[Optional[str], Opt("--head", help="Node 0's address for --print-launch "
                                                "(default: $HEAD_IP).")] = None,
    port: Annotated[int, Opt("--port", help="Rendezvous port for --print-launch.")] = 29500,
    quick: Annotated[bool, Opt("--quick", help="Fewer timed repeats (and smaller CPU shapes).")] = False,
    only: Annotated[Optional[list[str]], Opt("--only", help="Run only these checks: " + ", ".join(SECTIONS)
                                                      + " (repeat or comma-separate; env always runs).")] = None,
    timeout_s: Annotated[float, Opt("--timeout", help="Seconds a collective may take before it counts "
                                             "as hung.")] = 120.0,
    memory_limit_gib: Annotated[Optional[float], Opt("--memory-limit-gib", help="Use at most this much "
                                                              "device memory in the fit check.")] = None,
) -> None:
    """Check a plan on the real GPUs: environment, memory fit, MLA attention, dense GEMMs and (under torchrun)
    collectives, each measured against the planner's prediction, with --write-calibration to feed it back.

    Exit status: 0 every judged check passed and attention and the layout's collectives were measured (or a CPU
    rehearsal, which judges no timing); 1 a check failed or could not run (on CPU too: a footprint the memory model
    says does not fit the GPU is a simulated out-of-memory, failed as the GPU's would be), or NOT VERIFIED
    (something the plan depends on was not measured); 2 bad input (also --device cuda where torch sees no GPU).

    Examples:

      mla-plan verify --plan plan.json --write-calibration cal.yaml

      mla-plan verify --plan plan.json --print-launch --head 10.0.0.1

      mla-plan verify --device cpu --quick    (a rehearsal of every check at small shapes)
    """
    if ignored := typed_options(ctx, PLAN_SETS if plan else () if layout else KNOB_OPTIONS):
        raise PlanError(f"{', '.join(ignored)}: " + ("the plan file sets these" if plan else "these are a --layout's "
                        "knobs; a fresh plan chooses its own") + ": give one or the other")
    if device not in ("cuda", "cpu"):      # before torch's import (seconds), not after
        raise PlanError(f"--device must be cuda or cpu, got '{device}'")
    for flag, value in (("--candidate", candidate), ("--batch", batch), ("--context", context), ("--port", port)):
        positive(flag, value)
    for flag, value in (("--timeout", timeout_s), ("--memory-limit-gib", memory_limit_gib)):
        if value is not None and not 0 < value < 1e6:
            raise PlanError(f"{flag} must be above 0 and below a million, got {value:g}")
    knob_args = knob_args_of(engine or "vllm", gpu_memory_utilization, mem_fraction_static, kv_cache_dtype, block_size,
                           max_model_len, max_num_seqs, max_num_batched_tokens, mtp, enforce_eager)
    checked = workload_from(input_len, output_len, None, None, 3000.0, tpot_ms, 0.0)  # plan's checks
    workload_args = dict(input_len=checked.input_len, output_len=checked.output_len, tpot_ms=checked.tpot_ms,
                         input_len_max=checked.input_len_max, output_len_max=checked.output_len_max)
    if not 1 <= port <= 65535:
        raise PlanError(f"--port {port}: expected 1..65535")
    if write_cal is not None:      # before minutes of checks, not after
        check_output_file(Path(write_cal).expanduser(), "--write-calibration")
    chosen = candidate_from_options(plan, candidate, model, topology, layout, knob_args | {"plan_engine": engine},
                                    workload_args, calibration, batch, context)
    if print_launch:
        for line in launch_lines(chosen.layout, chosen.topo, _passthrough(ctx), head, port):
            click.echo(line)
        return
    sections, ranks = _sections(only), rank_info_from_env()
    target = make_target(chosen, ranks)
    _need_torch(ranks.distributed)
    from mla_planner.verify.checks import run_checks
    from mla_planner.verify.collectives import leave_gathered_rank, share_results

    limit = int(memory_limit_gib * 2**30) if memory_limit_gib else None
    with progress(enabled=not as_json and ranks.rank == 0) as step:
        dev, own = run_checks(target, Options(device, quick, sections, timeout_s, limit), step)
    checks = share_results(own, ranks.rank, ranks.world, timeout_s)
    if checks is None:   # a non-zero rank whose results went to rank 0, which reports and carries the verdict
        leave_gathered_rank()
    if ranks.rank != 0:  # results not gathered (a collective or the gather failed): one line, rank 0 reports its own
        text, status = rank_line(ranks.rank, ranks.world, checks)
        stderr_console().print(escape(text), soft_wrap=True)
        raise SystemExit(status)
    raise SystemExit(_report(target, dev, checks, write_cal, as_json))


def _report(target, dev, checks: list, write_cal: Optional[str], as_json: bool) -> int:
    """Write the calibration (if asked), print the report; the exit status."""
    from mla_planner.verify.env import describe

    status, calib = verdict_of(target, checks)[1], None
    if write_cal:
        calib, floor = _calibrate(write_cal, checks, dev, target.chosen)
        status = max(status, floor)
    if as_json:
        print_json(report_dict(target, dev, checks, calib) | {"exit_status": status})
        if calib and not calib["written"]:   # scripts read the JSON; a person still sees why on stderr
            stderr_console().print(f"[red]error:[/red] {escape(calib['reason'])}", soft_wrap=True)
        return status
    render(target, describe(dev), checks, calib if calib and calib["written"] else None, console())
    if calib and not calib["written"]:
        stderr_console().print(f"[red]error:[/red] {escape(calib['reason'])}", soft_wrap=True)
    return status
