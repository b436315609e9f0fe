"""A plan made with `--calibration` records it (the file, the factors applied, the model and engine they were fitted
on), and the commands that read the plan file price its candidates with them, as the plan did; a calibration fitted on
another model or engine is applied with a note saying so (QA: `compare --plan` priced a calibrated plan with the
defaults, and a DeepSeek-V3 calibration changed a Kimi-K2 plan silently)."""

from __future__ import annotations

import json

import pytest
import yaml

from test_calibrate import synthetic  # noqa: F401

from mla_planner.cli.calibrate import run_keys
from mla_planner.audit.bench_results import BenchRun


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """(plan file made with a calibration file that calibrate wrote, that calibration file)."""
    from click.testing import CliRunner

    from mla_planner.cli.app import app
    run = CliRunner().invoke
    folder = tmp_path_factory.mktemp("recorded")
    plan = folder / "plan.json"
    plan.write_text(run(app, ["plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "vllm", "--json"]).stdout)
    files = synthetic(plan, folder, factors={"moe_hbm_efficiency": 0.5, "graph_kernel_overhead_s": 6e-6})
    cal = folder / "cal.yaml"
    assert run(app, ["calibrate", "--plan", str(plan), *files, "-o", str(cal)]).exit_code == 0
    made = folder / "calibrated.json"
    made.write_text(run(app, ["plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "vllm", "--calibration",
                              str(cal), "--json"]).stdout)
    return made, cal


def test_calibrate_writes_the_model_and_engine_it_fitted(calibrated):
    doc = yaml.safe_load(calibrated[1].read_text())
    assert doc["model"] == "deepseek-v2-lite" and doc["engine"] == "vllm"


def test_the_plan_file_records_the_calibration_and_compare_prices_with_it(cli, calibrated):
    plan, cal = calibrated
    data = json.loads(plan.read_text())
    assert data["calibration"]["source"] == str(cal) and data["calibration"]["model"] == "deepseek-v2-lite"
    assert data["calibration"]["efficiency"]["moe_hbm_efficiency"] == pytest.approx(0.5, rel=0.05)
    assert any(n.startswith(f"calibration {cal} applied: ") for n in data["notes"])
    planned = data["candidates"][0]["performance"]["tpot_s"]
    compared = json.loads(cli("compare", "--plan", str(plan), "-c", "1", "--json").stdout)["layouts"][0]["tpot_s"]
    assert compared == pytest.approx(planned, rel=1e-9)
    assert json.loads(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "vllm", "--json").stdout)[
        "calibration"] == {}


def test_a_calibration_from_another_model_or_engine_is_applied_with_a_note(cli, calibrated):
    _, cal = calibrated
    data = json.loads(cli("plan", "-m", "kimi-k2", "-t", "8xh100", "-e", "vllm", "--calibration", str(cal),
                          "--json").stdout)
    assert any(n.startswith("the calibration was fitted on deepseek-v2-lite with vllm; kimi-k2's candidates use its "
                            "factors as they are") for n in data["notes"])
    data = json.loads(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "sglang", "--calibration",
                          str(cal), "--json").stdout)
    assert any(n.startswith("the calibration was fitted with vllm; the sglang candidates use its factors")
               for n in data["notes"])


def test_a_recorded_factor_out_of_range_is_one_error_line(cli, calibrated, tmp_path):
    data = json.loads(calibrated[0].read_text())
    data["calibration"]["efficiency"]["moe_hbm_efficiency"] = 5.0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    r = cli("compare", "--plan", str(bad))
    assert r.exit_code == 2 and "calibration.efficiency.moe_hbm_efficiency" in r.output
    assert "Traceback" not in r.output


def test_each_run_of_one_jsonl_file_keeps_its_own_measurement():
    runs = [BenchRun("bench.jsonl", "sglang", None, None, c, 2048, 512, 0.01) for c in (8, 194)] + \
        [BenchRun("other.jsonl", "sglang", None, None, 64, 2048, 512, 0.01)]
    assert run_keys(runs) == ["bench.jsonl", "bench.jsonl#2", "other.jsonl"]


def test_calibrate_on_a_calibrated_plan_keeps_the_factors_it_held_fixed(cli, tmp_path):
    """A plan made with hbm_efficiency 0.6 prices the runs with it; the calibration calibrate writes from that plan
    carries it beside what it fitted, so the file reproduces its own fit (review finding)."""
    given = tmp_path / "given.yaml"
    given.write_text("format: mla-plan-calibration/1\ngpu: H100-SXM-80G\nefficiency:\n  hbm_efficiency: 0.6\n")
    plan = tmp_path / "plan.json"
    plan.write_text(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "vllm", "--calibration", str(given),
                        "--json").stdout)
    files = synthetic(plan, tmp_path)
    out = tmp_path / "cal.yaml"
    assert cli("calibrate", "--plan", str(plan), *files, "-o", str(out)).exit_code == 0
    assert yaml.safe_load(out.read_text())["efficiency"]["hbm_efficiency"] == 0.6
