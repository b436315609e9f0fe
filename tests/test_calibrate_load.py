"""What `mla-plan calibrate` makes of how a benchmark was loaded: through a balancer in front of several replicas
(bench.sh's REPLICAS, recorded in the result), with failed requests, and results no factor within its bounds explains
(a TPOT that falls as the load rises): refused, noted, or fitted but not written."""

from __future__ import annotations

import json

import pytest

from test_calibrate import TRUE, plan_path, synthetic  # noqa: F401  (the module's fixture and generator)


def through_balancer(files: list[str], replicas: int, engine: str = "vllm") -> list[str]:
    """The same per-replica results as bench.sh writes them when BENCH_HOST is a balancer in front of `replicas`
    replicas: REPLICAS times the load and the requests, the same TPOT (each replica runs its share)."""
    for name in files:
        records = [json.loads(line) for line in open(name).read().splitlines() if line.strip()]
        for r in records:
            for key in ("max_concurrency", "completed", "total_input_tokens", "total_output_tokens"):
                r[key] *= replicas
            if engine == "vllm":
                r["mla_plan_replicas"] = str(replicas)
            else:
                r["tag"] += f",mla_plan_replicas={replicas}"
        open(name, "w").write("\n".join(json.dumps(r) for r in records) + "\n")
    return files


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_balancer_run_is_split_among_the_replicas_it_names(cli, plan_path, tmp_path, engine):
    """Candidate 1 (DeepSeek-V2-Lite on 8 x H100) is 8 replicas on either engine; results taken through a balancer at
    8x the load recover the factors as one replica's results do, because each replica ran its share."""
    plan = plan_path
    if engine == "sglang":
        plan = tmp_path / "sglang.json"
        plan.write_text(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "sglang", "--json").stdout)
        assert json.loads(plan.read_text())["candidates"][0]["layout"]["replicas"] == 8
    files = through_balancer(synthetic(plan, tmp_path, engine=engine), 8, engine)
    r = cli("calibrate", "--plan", str(plan), *files, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    for name, value in TRUE.items():
        assert data["factors"][name] == pytest.approx(value, rel=0.05)
    assert [run["concurrency"] for run in data["runs"]] == [4, 16, 64]
    assert any("ran through a balancer in front of 8 replicas: priced as 4 in flight on each" in n
               for n in data["notes"])


def test_a_result_naming_more_replicas_than_the_candidate_runs_is_refused(cli, plan_path, tmp_path):
    files = through_balancer(synthetic(plan_path, tmp_path), 16)
    r = cli("calibrate", "--plan", str(plan_path), *files)
    assert r.exit_code == 2 and "ran through 16 replicas (mla_plan_replicas), but the candidate runs 8" in r.output


def test_a_result_that_does_not_say_is_one_replica_with_a_note(cli, plan_path, tmp_path):
    files = synthetic(plan_path, tmp_path)
    data = json.loads(cli("calibrate", "--plan", str(plan_path), *files, "--json").stdout)
    assert any("is taken as one replica's load" in n and "REPLICAS=8" in n for n in data["notes"])


def test_failed_requests_are_noted_and_a_run_that_mostly_failed_is_refused(cli, plan_path, tmp_path):
    files = synthetic(plan_path, tmp_path)
    record = json.loads(open(files[0]).read())
    open(files[0], "w").write(json.dumps(record | {"failed": 3}))
    data = json.loads(cli("calibrate", "--plan", str(plan_path), *files, "--json").stdout)
    assert any(n.endswith("3 requests failed; the TPOT is the completed ones'") for n in data["notes"])
    open(files[0], "w").write(json.dumps(record | {"failed": 810, "completed": 10}))
    r = cli("calibrate", "--plan", str(plan_path), *files)
    assert r.exit_code == 2 and "810 of its requests failed and 10 completed" in r.output


def test_results_no_factor_explains_are_not_written(cli, plan_path, tmp_path):
    """A TPOT that falls as the load rises (60 ms at 4 in flight, 12 ms at 64) fits no batch-cost factor: the fit is
    shown with the reason, nothing is written, exit 1."""
    files = synthetic(plan_path, tmp_path)
    for name, tpot in zip(files, (60.0, 30.0, 12.0)):
        record = json.loads(open(name).read())
        open(name, "w").write(json.dumps(record | {"mean_tpot_ms": tpot}))
    out = tmp_path / "cal.yaml"
    r = cli("calibrate", "--plan", str(plan_path), *files, "-o", str(out))
    assert r.exit_code == 1 and not out.exists()
    assert "mean TPOT falls as the load rises (60.0 ms at 4 in flight, 30.0 ms at 16)" in r.output
    assert "not written: the step model does not explain these results" in r.output
    r = cli("calibrate", "--plan", str(plan_path), *files, "--json")
    assert r.exit_code == 1, r.output
    data = json.loads(r.stdout)
    assert data["explained"] is False and data["output"] is None


def test_bench_sh_records_the_replicas_behind_its_endpoint(cli, plan_path, tmp_path):
    out = tmp_path / "launch"
    assert cli("emit", "--plan", str(plan_path), "--out", str(out)).exit_code == 0
    bench = (out / "bench.sh").read_text()
    assert 'REPLICAS="${REPLICAS:-1}"' in bench and "run it with CONCURRENCY=" in bench and "REPLICAS=8" in bench
    assert "--metadata mla_plan_gpu=H100-SXM-80G mla_plan_replicas=\"${REPLICAS}\"" in bench
    sglang = tmp_path / "sglang"
    plan = tmp_path / "sglang.json"
    plan.write_text(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "sglang", "--json").stdout)
    assert cli("emit", "--plan", str(plan), "--out", str(sglang)).exit_code == 0
    assert "--tag mla_plan_gpu=H100-SXM-80G,mla_plan_replicas=\"${REPLICAS}\"" in (sglang / "bench.sh").read_text()


def test_a_local_copy_of_the_planned_model_is_the_same_model():
    from mla_planner.audit.calibrate import same_model
    assert same_model("/models/DeepSeek-V3", "deepseek-ai/DeepSeek-V3")
    assert same_model("deepseek-ai/DeepSeek-V3/", "deepseek-ai/deepseek-v3")
    assert not same_model("/models/DeepSeek-V3-0324", "deepseek-ai/DeepSeek-V3")
    assert not same_model("someone/DeepSeek-V3", "deepseek-ai/DeepSeek-V3")   # another hub id is another model


def test_the_emitted_plan_names_the_model_path_its_scripts_serve(cli, plan_path, tmp_path):
    """emit --model-path /data/x serves /data/x, and bench.sh benchmarks it: the folder's plan.json names it too, so
    calibrate holds those results against the folder's plan (review: refused as another model)."""
    out = tmp_path / "launch"
    assert cli("emit", "--plan", str(plan_path), "--out", str(out), "--model-path", "/data/dsv2lite").exit_code == 0
    assert json.loads((out / "plan.json").read_text())["model"]["model_path"] == "/data/dsv2lite"
    files = synthetic(plan_path, tmp_path, model="/data/dsv2lite")
    assert cli("calibrate", "--plan", str(out / "plan.json"), *files).exit_code == 0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_results_measured_behind_a_disaggregated_router_are_refused(cli, plan_path, tmp_path, engine):
    files = synthetic(plan_path, tmp_path, engine=engine)
    for name in files:
        record = json.loads(open(name).read().splitlines()[0])
        if engine == "vllm":
            record["mla_plan_deployment"] = "D1"
        else:
            record["tag"] += ",mla_plan_deployment=D1"
        open(name, "w").write(json.dumps(record) + "\n")
    r = cli("calibrate", "--plan", str(plan_path), *files)
    assert r.exit_code == 2 and "measured behind the router of disaggregated deployment D1" in r.stderr
