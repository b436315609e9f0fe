"""`mla-plan validate`: every published measurement of data/validation.yaml through the planner's own code."""

from __future__ import annotations

from typing import Annotated, Optional

import click

from mla_planner.audit.validate import CATEGORIES, Result, Summary, bands, loo_coverage, run_points, summarise
from mla_planner.cli.common import JsonOpt, columns, guard, print_json
from mla_planner.cli.params import Opt
from mla_planner.core.errors import PlanError
from mla_planner.core.files import dump_yaml

BANDS_HEADER = ("# How far the planner's predictions fall from published measurements, per category and regime: "
                "the range of\n# (predicted - published) / published over the HELD-OUT points of "
                "mla_planner/data/validation.yaml (a collective's\n# in its time: a bus bandwidth's error inverted). "
                "Written by `mla-plan validate --bands` (tests/test_validate.py\n# holds this file equal to its "
                "output); read by perf/bands.py.\n")
TITLES = {"kv_capacity": "KV capacity (tokens the engine logs)",
          "cuda_graph_memory": "CUDA-graph memory (GiB per GPU the engine logs)",
          "collective": "Collectives (nccl-tests / rccl-tests)",
          "decode_tpot": "Decode TPOT (mean ms per output token)",
          "eager_tpot": "Decode without CUDA graphs (ms per output token)", "ttft": "Time to first token (mean ms)",
          "decode_throughput": "Wide-EP decode throughput (tokens/s per node)",
          "prefill_throughput": "Disaggregated prefill throughput (prompt tokens/s per node)"}


def _value(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:,.1f}"


def _rows(results: list[Result]) -> list[list[str]]:
    return [[r.point.id, r.point.regime, _value(r.point.published), _value(r.predicted), f"{r.error:+.1%}",
             "held out" if r.point.held_out else r.point.role] for r in results]


def _summary_rows(summary: list[Summary]) -> list[list[str]]:
    return [[s.category, "held out" if s.role == "held_out" else "fit", str(s.points), f"{s.median_abs_error:.1%}",
             f"{s.max_abs_error:.1%}", f"{s.median_error:+.1%}"] for s in summary]


def markdown(results: list[Result], summary: list[Summary], coverage: dict) -> str:
    """The README's validation tables: the summary, then every point."""
    lines = ["| category | points | n | median abs error | max abs error | median error |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in _summary_rows(summary)]
    lines += ["", _coverage_line(coverage) + "."]
    lines += ["", "| point | regime | published | mla-plan | error | role |", "|---|---|---|---|---|---|"]
    lines += [f"| [{row[0]}]({r.point.source}) | " + " | ".join(row[1:]) + " |"
              for r, row in zip(results, _rows(results))]
    return "\n".join(lines)


@guard
def validate_cmd(category: Annotated[Optional[str], Opt(
                     "--category", help=f"Only one category: {', '.join(CATEGORIES)}.")] = None,
                 points: Annotated[Optional[str], Opt(
                     "--points", help="A points file in the format of mla_planner/data/validation.yaml (default: the "
                     "repository's own).")] = None,
                 as_markdown: Annotated[bool, Opt("--markdown", help="Print the README's tables (Markdown).")] = False,
                 as_bands: Annotated[bool, Opt("--bands", help="Print mla_planner/data/bands.yaml: the held-out "
                                               "residual ranges the plan's bands come from.")] = False,
                 as_json: JsonOpt = False) -> None:
    """Run every published measurement the project holds through the planner's own code: predicted vs published.

    Each point (mla_planner/data/validation.yaml) has its source, configuration and role: `fit: FACTOR` points
    set that efficiency factor, so they validate nothing; `held out` points were never used to set anything and
    are the honest figure. The summary keeps the two apart, per category.

    Exit status: 0 (the errors are reported, not judged); 2 bad input.

    Examples:

      mla-plan validate

      mla-plan validate --category decode_tpot --json
    """
    if sum((as_markdown, as_bands, as_json)) > 1:
        raise PlanError("--markdown, --bands and --json each choose the output: give one of them")
    if category is not None and category not in CATEGORIES:
        raise PlanError(f"--category must be one of {', '.join(CATEGORIES)}, got '{category}'")
    results = run_points(points, category)
    summary = summarise(results)
    if as_bands:
        return click.echo(BANDS_HEADER + dump_yaml(bands(results), sort_keys=True), nl=False)
    coverage = loo_coverage(results)
    if as_json:
        return print_json({"points": [{"id": r.point.id, "category": r.point.category, "role": r.point.role,
                                       "regime": r.point.regime, "source": r.point.source, "unit": r.point.unit,
                                       "published": r.point.published, "predicted": r.predicted, "error": r.error}
                                      for r in results],
                           "summary": [vars(s) for s in summary],
                           "band_coverage": {c: {"covered": k, "points": n} for c, (k, n) in coverage.items()}})
    if as_markdown:
        return click.echo(markdown(results, summary, coverage))
    header = ["point", "regime", "published", "mla-plan", "error", "role"]
    for cat in CATEGORIES:
        chosen = [r for r in results if r.point.category == cat]
        if chosen:
            click.echo(columns(header, _rows(chosen), title=f"{TITLES[cat]}:\n") + "\n")
    click.echo(columns(["category", "points", "n", "median |error|", "max |error|", "median error"],
                       _summary_rows(summary), title="Summary (held-out points are the honest figure):\n"))
    click.echo("\n" + _coverage_line(coverage))


def _coverage_line(coverage: dict) -> str:
    if not coverage:
        return "Bands: no held-out point of a banded category was run."
    return ("Bands (plan's low-high, data/bands.yaml), each held-out point against the band of the others "
            "(leave-one-out): " + "; ".join(f"{c} {k}/{n} ({k / n:.0%})" for c, (k, n) in coverage.items()))
