"""`mla-plan calibrate`: bench.sh's results fitted to the step model, written as a calibration file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import click

from mla_planner.audit.bench_results import read_bench
from mla_planner.audit.calibrate import MAX_FIT_LOG_ERROR, fit
from mla_planner.cli.common import JsonOpt, check_output_file, columns, guard, print_json
from mla_planner.cli.params import Arg, Opt
from mla_planner.core.files import atomic_write, read_text_file
from mla_planner.specs.calibration import VENDOR_ORIGIN, dump_calibration, load_calibration
from mla_planner.search.planfile_read import read_plan
from mla_planner.search.pick import pick


def run_keys(runs) -> list[str]:
    """A name for each run: its file, and `#2`, `#3`... for the further runs of one SGLang JSONL file (bench.sh
    appends each run to the file of its concurrency)."""
    seen: dict[str, int] = {}
    keys = []
    for r in runs:
        seen[r.path] = seen.get(r.path, 0) + 1
        keys.append(r.path if seen[r.path] == 1 else f"{r.path}#{seen[r.path]}")
    return keys


@guard
def calibrate_cmd(results: Annotated[list[str], Arg(help="bench.sh's result files (bench-c<N>.json / .jsonl), two "
                                                         "or more concurrencies.")],
                  plan: Annotated[Path, Opt("--plan", "-p", help="The plan file the deployment was launched from.")],
                  candidate: Annotated[int, Opt("--candidate", "-c", help="The candidate that was launched.")] = 1,
                  output: Annotated[Optional[Path], Opt(
                      "--output", "-o", help="Write the calibration file here (for `plan --calibration`).")] = None,
                  as_json: JsonOpt = False) -> None:
    """Fit the planner to bench.sh's results at two or more concurrencies and write a calibration file.

    The two factors that set how mean TPOT grows with the batch are fitted to the measured TPOTs: the per-step
    fixed cost (the kernel launch gap, standing in for the engine's host overhead) and the routed experts'
    weight streaming (moe_hbm_efficiency; int4_moe_hbm_efficiency for int4 experts), each within its physical
    bounds; the fitted error is reported. Where the results give a mean TTFT, the part of it outside the forward
    passes (ttft_host_s: the server's and the client's per-request work) is fitted too. Results from another model,
    GPU or engine than the candidate's are refused.

    Exit status: 0 fitted; 1 the fit does not explain the results (typical error, the rms of log(predicted /
    measured), above 0.35, about 42 % off: nothing written);
    2 bad input.

    Examples:

      CONCURRENCY=8 ./bench.sh; ./bench.sh;  mla-plan calibrate --plan plan.json bench-c*.json -o calibration.yaml

      mla-plan plan --calibration calibration.yaml
    """
    if output is not None:
        check_output_file(output, "--output")
    loaded = read_plan(plan)
    cand = pick(loaded, candidate, "calibrate")
    runs = sorted((run for name in results for run in read_bench(name, read_text_file(name))),
                  key=lambda r: r.concurrency)
    calib = load_calibration(None, loaded.topology, loaded.calibration)   # the factors the plan was made with
    result = fit(loaded, cand, runs, calib)
    # the vendor defaults the fit held fixed go into the file too, so it means the same if those defaults move
    held = {n: getattr(calib, n) for n, where in calib.origin.items()   # and the plan's own calibration's
            if where.startswith((VENDOR_ORIGIN, "calibration ")) and n not in result.factors}
    text = dump_calibration({**held, **result.factors}, gpu=loaded.topology.gpu.name, topology=loaded.topology.name,
                            tool="mla-plan calibrate", model=loaded.spec.name, engine=cand.knobs.engine,
                            measurements={key: {"concurrency": r.concurrency, "measured_tpot_s": r.mean_tpot_s,
                                                "predicted_tpot_s": a}
                                          for key, r, a in zip(run_keys(result.runs), result.runs, result.after_s)})
    explained = result.rms_log_error <= MAX_FIT_LOG_ERROR
    if output is not None and explained:
        atomic_write(output, text, "--output")
    if as_json:
        print_json({"factors": result.factors, "rms_log_error": result.rms_log_error, "notes": result.notes,
                           "runs": [{"file": r.path, "concurrency": r.concurrency, "measured_tpot_s": r.mean_tpot_s,
                                     "predicted_before_s": b, "predicted_after_s": a,
                                     "measured_ttft_s": r.mean_ttft_s, "predicted_ttft_after_s": t}
                                    for r, b, a, t in zip(result.runs, result.before_s, result.after_s,
                                                          result.ttft_after_s)],
                           "explained": explained, "output": str(output) if output and explained else None})
        raise SystemExit(0 if explained else 1)
    rows = [[r.path, str(r.concurrency), f"{r.mean_tpot_s * 1e3:.2f}", f"{b * 1e3:.2f}", f"{a * 1e3:.2f}"]
            for r, b, a in zip(result.runs, result.before_s, result.after_s)]
    click.echo(columns(["result", "in flight", "measured ms", "planned ms", "fitted ms"], rows,
                       title=f"Mean TPOT of candidate {candidate} ({cand.layout.label}, {cand.knobs.engine}):\n"))
    timed = [[r.path, str(r.concurrency), f"{r.mean_ttft_s * 1e3:.0f}", f"{t * 1e3:.0f}"]
             for r, t in zip(result.runs, result.ttft_after_s) if t is not None]
    if timed:
        click.echo(columns(["result", "in flight", "measured ms", "fitted ms"], timed, title="\nMean TTFT:\n"))
    click.echo("\nfitted: " + ", ".join(f"{n} = {v:.4g} (was {getattr(calib, n):.4g})"
                                       for n, v in result.factors.items())
               + f"; typical error after the fit {result.rms_log_error:.1%}")
    for note in result.notes:
        click.echo(f"note: {note}")
    if not explained:
        click.echo(f"not written: the step model does not explain these results (typical error "
                   f"{result.rms_log_error:.0%} after the fit, more than {MAX_FIT_LOG_ERROR:.0%}); check the notes "
                   "above and the server's log (`mla-plan check-log`) before calibrating on them")
        raise SystemExit(1)
    click.echo(f"written: {output} (plan with --calibration {output})" if output else
               "not written: give -o FILE to keep it\n" + text)
