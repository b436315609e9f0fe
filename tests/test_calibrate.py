"""`mla-plan calibrate` (issue 22): bench.sh's results at two or more concurrencies, fitted to the step model,
written as a calibration file; results from another model, GPU or engine refused."""

from __future__ import annotations

import errno
import json
import os
from dataclasses import replace

import pytest
import yaml

from mla_planner.core import files as core_files
from mla_planner.audit.bench_results import BenchRun
from mla_planner.audit.calibrate import predicted_tpot_s, predicted_ttft_s
from mla_planner.search.planfile_read import read_plan
from mla_planner.search.pick import pick
from mla_planner.specs.calibration import load_calibration

TRUE = {"moe_hbm_efficiency": 0.6, "graph_kernel_overhead_s": 4e-6}
CONCURRENCIES = (4, 16, 64)


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    from click.testing import CliRunner

    from mla_planner.cli.app import app
    path = tmp_path_factory.mktemp("cal") / "plan.json"
    path.write_text(CliRunner().invoke(app, ["plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "vllm",
                                             "--json"]).stdout)
    return path


def synthetic(plan_path, folder, engine="vllm", model=None, gpu=None, concurrencies=CONCURRENCIES,
              factors=TRUE, ttft=False) -> list[str]:
    """Benchmark results the model itself predicts with the TRUE factors, in the engine's own result format (with
    its mean TTFT where `ttft`)."""
    plan = read_plan(plan_path)
    cand = pick(plan, 1, "test")
    true = replace(load_calibration(None, plan.topology), **factors)
    files = []
    for c in concurrencies:
        run = BenchRun("x", engine, plan.model_path, plan.topology.gpu.name, c, 2048, 512, 0.0, 4 * c)
        record = {"max_concurrency": c, "completed": 4 * c, "total_input_tokens": 4 * c * 2048,
                  "total_output_tokens": 4 * c * 512, "mean_tpot_ms": predicted_tpot_s(plan, cand, run, true) * 1e3}
        if ttft:
            record["mean_ttft_ms"] = predicted_ttft_s(plan, cand, run, true) * 1e3
        if engine == "vllm":
            record |= {"endpoint_type": "openai", "backend": "openai", "model_id": model or plan.model_path,
                       "mla_plan_gpu": gpu or plan.topology.gpu.name}
            name = folder / f"bench-c{c}.json"
            name.write_text(json.dumps(record))
        else:
            record |= {"backend": "sglang", "tag": f"mla_plan_gpu={gpu or plan.topology.gpu.name}",
                       "server_info": {"model_path": model or plan.model_path}}
            name = folder / f"bench-c{c}.jsonl"
            name.write_text(json.dumps(record) + "\n")
        files.append(str(name))
    return files


def test_int4_experts_calibrate_their_own_streaming_factor(cli, tmp_path):
    """Kimi-K2.5's int4 experts run the Marlin W4A16 kernel, priced with int4_moe_hbm_efficiency: that is the factor
    calibrate fits for them (and the one a synthetic sweep made with it gives back)."""
    plan_path = tmp_path / "k25.json"
    plan_path.write_text(cli("plan", "-m", "kimi-k2.5", "-t", "8xh200", "-e", "vllm", "--json").stdout)
    true = {"int4_moe_hbm_efficiency": 0.45, "graph_kernel_overhead_s": 4e-6}
    files = synthetic(plan_path, tmp_path, factors=true)
    data = json.loads(cli("calibrate", "--plan", str(plan_path), *files, "-o", str(tmp_path / "c.yaml"),
                          "--json").stdout)
    assert set(data["factors"]) == set(true)
    for name, value in true.items():
        assert data["factors"][name] == pytest.approx(value, rel=0.05)


def test_calibrate_recovers_known_factors_and_the_plan_applies_them(cli, plan_path, tmp_path):
    files = synthetic(plan_path, tmp_path)
    out = tmp_path / "calibration.yaml"
    r = cli("calibrate", "--plan", str(plan_path), *files, "-o", str(out), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    for name, value in TRUE.items():
        assert data["factors"][name] == pytest.approx(value, rel=0.05)
    assert data["rms_log_error"] < 0.01
    assert all(abs(run["predicted_after_s"] / run["measured_tpot_s"] - 1) < 0.01 for run in data["runs"])
    plan = read_plan(plan_path)
    applied = load_calibration(str(out), plan.topology)
    assert applied.moe_hbm_efficiency == pytest.approx(TRUE["moe_hbm_efficiency"], rel=0.05) and not applied.notes
    assert cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "--calibration", str(out)).exit_code in (0, 1)


def test_calibrate_recovers_the_part_of_a_ttft_outside_the_forwards(cli, plan_path, tmp_path):
    """Results with a mean TTFT (both engines write mean_ttft_ms) also give ttft_host_s: each run's TTFT priced as the
    benchmark runs it (its first wave, then the steady state), the constant the rest is."""
    true = {**TRUE, "ttft_host_s": 0.2}
    files = synthetic(plan_path, tmp_path, factors=true, ttft=True)
    data = json.loads(cli("calibrate", "--plan", str(plan_path), *files, "-o", str(tmp_path / "c.yaml"),
                          "--json").stdout)
    assert set(data["factors"]) == set(true)
    for name, value in true.items():
        assert data["factors"][name] == pytest.approx(value, rel=0.05)
    assert load_calibration(str(tmp_path / "c.yaml"), read_plan(plan_path).topology).ttft_host_s == \
        pytest.approx(0.2, rel=0.05)


@pytest.mark.parametrize("kind, words", [
    ({"engine": "sglang"}, "a sglang benchmark, but the candidate runs vllm"),
    ({"model": "deepseek-ai/DeepSeek-R1"}, "benchmarks deepseek-ai/DeepSeek-R1, but the plan serves"),
    ({"gpu": "H200-SXM-141G"}, "measured on H200-SXM-141G, but the plan's GPU is H100-SXM-80G"),
    ({"concurrencies": (16, 16)}, "two or more concurrencies"),
])
def test_calibrate_refuses_another_model_gpu_or_engine(cli, plan_path, tmp_path, kind, words):
    files = synthetic(plan_path, tmp_path, **kind)
    r = cli("calibrate", "--plan", str(plan_path), *files)
    assert r.exit_code == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_bad_result_files_are_one_line(cli, plan_path, tmp_path):
    bad = tmp_path / "bench.json"
    base = '"endpoint_type": "openai", "completed": 16, "total_input_tokens": 160, "total_output_tokens": 160'
    for text, words in (("not json", "not a vLLM or SGLang benchmark result"),
                        ('{"endpoint_type": "openai", "max_concurrency": 4}', "completed is missing"),
                        ('{%s, "max_concurrency": null, "mean_tpot_ms": 9}' % base,
                         "max_concurrency is null (a run without --max-concurrency"),
                        ('{%s, "max_concurrency": 4, "mean_tpot_ms": 1e300}' % base, "below 1e+15"),
                        ("  \n", "empty: not a vLLM or SGLang benchmark result"),
                        ('{%s, "max_concurrency": 4, "mean_tpot_ms": 0}' % base, "mean_tpot_ms is 0"),
                        ('{%s, "max_concurrency": 4, "mean_tpot_ms": NaN}' % base, "mean_tpot_ms is nan"),
                        ('{%s, "max_concurrency": 0, "mean_tpot_ms": 9}' % base, "max_concurrency is 0"),
                        ('{%s, "max_concurrency": 4, "mean_tpot_ms": 9, "model_id": 5}' % base, "expected a string"),
                        ('{%s, "max_concurrency": 4, "mean_tpot_ms": 9, "mean_ttft_ms": -1}' % base,
                         "mean_ttft_ms is -1"),
                        ('{"backend": "trt"}', "neither vLLM's")):
        bad.write_text(text)
        r = cli("calibrate", "--plan", str(plan_path), str(bad), str(bad))
        assert r.exit_code == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
    lines = tmp_path / "bench.jsonl"
    lines.write_text('{"backend": "sglang", "max_concurrency": 4}\n\n{oops\n')
    r = cli("calibrate", "--plan", str(plan_path), str(lines))
    assert r.exit_code == 2 and f"{lines} line 3: not a vLLM or SGLang benchmark result" in r.stderr, r.stderr
    r = cli("calibrate", "--plan", str(plan_path), str(tmp_path / "none.json"))
    assert r.exit_code == 2 and "no such file" in r.stderr


def test_bench_sh_saves_what_calibrate_reads(cli, plan_path, tmp_path):
    """bench.sh runs at ${CONCURRENCY} (the plan's by default), saves bench-c<N>.json with its GPU, and the README
    says how to calibrate from two runs."""
    out = tmp_path / "launch"
    assert cli("emit", "--plan", str(plan_path), "--out", str(out)).exit_code == 0
    bench, readme = (out / "bench.sh").read_text(), (out / "README.md").read_text()
    assert "--save-result" in bench and "\"${RESULT}\".json" in bench and "mla_plan_gpu=H100-SXM-80G" in bench
    assert "--max-concurrency \"${CONCURRENCY}\"" in bench or "--max-concurrency ${CONCURRENCY}" in bench
    assert "mla-plan calibrate --plan plan.json bench-c*.json" in readme


@pytest.mark.parametrize("model, topology, engine, layouts", [
    ("deepseek-v3", "2x8xh200-ib", "sglang", ["-l", "tp=1,dp=16,ep=16", "-l", "tp=2,dp=8,ep=16"]),
    ("deepseek-v2-lite", "8xh100", "vllm", ["-l", "tp=1,dp=8,ep=8"]),
    ("deepseek-v2-lite", "8xh100", "vllm", [])])
def test_a_run_is_priced_as_the_server_runs_it(cli, tmp_path, model, topology, engine, layouts):
    """bench.sh keeps the plan's concurrency (one replica's share) in flight against the server, which spreads it over
    its DP ranks: priced that way, the run at the plan's own concurrency is the plan's own TPOT, whatever the layout."""
    from mla_planner.launch.folder import bench_concurrency
    from mla_planner.launch.build import launch_inputs
    path = tmp_path / "plan.json"
    path.write_text(cli("plan", "-m", model, "-t", topology, "-e", engine, *layouts, "--json").stdout)
    plan = read_plan(path)
    for number, cand in enumerate(plan.candidates[:4], 1):
        concurrency = bench_concurrency(launch_inputs(plan, cand, "native"))
        run = BenchRun("x", engine, plan.model_path, plan.topology.gpu.name, concurrency, plan.workload.input_len,
                       plan.workload.output_len, 0.0)
        predicted = predicted_tpot_s(plan, cand, run, load_calibration(None, plan.topology))
        assert predicted == pytest.approx(cand.performance.tpot_s, rel=0.02), (number, cand.layout.label)


def test_calibrate_fits_the_host_time_of_an_eager_candidate(cli, tmp_path):
    """Without CUDA graphs the per-step cost is the host's time per layer (eager_layer_host_s), which calibrate fits
    in place of the graph launch gap: a host half as slow as the default's is recovered from two concurrencies."""
    path = tmp_path / "eager.json"
    path.write_text(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "vllm", "--enforce-eager",
                        "--tpot-ms", "150", "--json").stdout)
    plan = read_plan(path)
    cand = pick(plan, 1, "test")
    assert not cand.knobs.cuda_graphs
    true = replace(load_calibration(None, plan.topology), eager_layer_host_s=1.2e-3)
    files = []
    for c in (4, 32):
        run = BenchRun("x", "vllm", plan.model_path, plan.topology.gpu.name, c, 2048, 512, 0.0)
        record = {"max_concurrency": c, "completed": 4 * c, "total_input_tokens": 4 * c * 2048,
                  "total_output_tokens": 4 * c * 512, "mean_tpot_ms": predicted_tpot_s(plan, cand, run, true) * 1e3,
                  "endpoint_type": "openai", "backend": "openai", "model_id": plan.model_path,
                  "mla_plan_gpu": plan.topology.gpu.name}
        (tmp_path / f"bench-c{c}.json").write_text(json.dumps(record))
        files.append(str(tmp_path / f"bench-c{c}.json"))
    r = cli("calibrate", "--plan", str(path), *files, "-o", str(tmp_path / "cal.yaml"), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert "graph_kernel_overhead_s" not in data["factors"]
    assert data["factors"]["eager_layer_host_s"] == pytest.approx(1.2e-3, rel=0.05)
    # the host-bound runs say nothing of the experts' weight streaming: not fitted, not written
    assert "moe_hbm_efficiency" not in data["factors"]
    assert any("moe_hbm_efficiency does not move" in n for n in data["notes"])
    assert "moe_hbm_efficiency" not in (tmp_path / "cal.yaml").read_text()


def test_a_calibrated_moe_factor_says_it_does_not_reach_int4_experts(cli, tmp_path):
    """A calibration file with moe_hbm_efficiency (e.g. from an FP8 model, or written before int4 experts had their
    own factor) leaves Kimi-K2.5's int4 experts at int4_moe_hbm_efficiency, and the output says so."""
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"format": "mla-plan-calibration/1", "efficiency": {"moe_hbm_efficiency": 0.3}}))
    args = ("compare", "-m", "kimi-k2.5", "-t", "8xh200", "-l", "tp=8", "--json")
    with_file = json.loads(cli(*args, "--calibration", str(cal)).stdout)["layouts"][0]
    without = json.loads(cli(*args).stdout)["layouts"][0]
    assert with_file["tpot_s"] == without["tpot_s"]
    assert any("does not apply to this model's int4 experts" in n for n in with_file["notes"])
    assert not any("int4 experts" in n for n in without["notes"])
    plan = json.loads(cli("plan", "-m", "kimi-k2.5", "-t", "8xh200", "-e", "vllm", "--calibration", str(cal),
                          "--json").stdout)
    assert any("does not apply to this model's int4 experts" in n for n in plan["notes"])


def test_an_amd_calibration_file_keeps_the_vendor_factors_it_was_fitted_against(cli, tmp_path):
    """On AMD the fit holds the vendor's kernel factors (data/efficiency_vendor.yaml) fixed; the file carries them
    beside the fitted ones, so it reads the same if those defaults change later."""
    plan_path = tmp_path / "r1.json"
    plan_path.write_text(cli("plan", "-m", "deepseek-r1", "-t", "8xmi355x", "-e", "vllm", "-l", "tp=8",
                             "--json").stdout)
    files = synthetic(plan_path, tmp_path, factors={"graph_kernel_overhead_s": 5e-6, "moe_hbm_efficiency": 0.6})
    out = tmp_path / "c.yaml"
    assert cli("calibrate", "--plan", str(plan_path), *files, "-o", str(out)).exit_code == 0
    written = yaml.safe_load(out.read_text())["efficiency"]
    assert written["attention_hbm_efficiency"] == 0.45          # held at AMD's value, not fitted
    assert written["graph_kernel_overhead_s"] == pytest.approx(5e-6, rel=0.05)


def test_an_output_that_cannot_be_written_is_one_line_and_leaves_nothing(cli, plan_path, tmp_path, monkeypatch):
    """Found by QA: `-o` where the write fails (a read-only place, a full disk, a file-size limit) printed the fit,
    then a traceback, and a write failing partway left a cut-off file; now one line, exit 2, and no file at all
    (core/files.atomic_write). The disk fills here at the write's fsync."""
    files = synthetic(plan_path, tmp_path)

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(core_files.os, "fsync", full_disk)
    r = cli("calibrate", "--plan", str(plan_path), *files, "-o", str(tmp_path / "out.yaml"))
    assert r.exit_code == 2 and r.stderr == (f"error: --output {tmp_path / 'out.yaml'}: cannot write (No space left on "
                                             "device); nothing written\n")
    assert [p.name for p in tmp_path.iterdir() if "out.yaml" in p.name] == []


def test_a_result_under_one_token_a_request_is_one_line(cli, plan_path, tmp_path):
    """Found by QA: 99 output tokens over 200 requests rounded the mean length to 0 and ended in ZeroDivisionError."""
    files = synthetic(plan_path, tmp_path)
    record = json.loads(open(files[0]).read()) | {"total_output_tokens": 99, "completed": 200}
    (tmp_path / "short.json").write_text(json.dumps(record))
    r = cli("calibrate", "--plan", str(plan_path), str(tmp_path / "short.json"), files[1])
    assert r.exit_code == 2 and "under one token a request" in r.stderr and r.stderr.count("\n") == 1


def test_the_calibration_file_keeps_the_usual_mode(cli, plan_path, tmp_path):
    """Found in review: the atomic write left mkstemp's 0600, so a calibration meant to be shared was unreadable to
    others; a new file gets 0666 less the umask, a replaced one keeps its mode."""
    files = synthetic(plan_path, tmp_path)
    out = tmp_path / "calibration.yaml"
    umask = os.umask(0o022)
    try:
        assert cli("calibrate", "--plan", str(plan_path), *files, "-o", str(out)).exit_code == 0
        assert out.stat().st_mode & 0o777 == 0o644
        out.chmod(0o640)
        assert cli("calibrate", "--plan", str(plan_path), *files, "-o", str(out)).exit_code == 0
        assert out.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(umask)
