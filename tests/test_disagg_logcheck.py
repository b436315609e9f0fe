"""check-log learns the disaggregated deployment (issue 21): a pool's engine log against that pool (its KV pool, the
role the engine logged), bench.sh's output behind the router against the deployment's throughput and TPOT."""

import json

import pytest

ARGS = ("-m", "deepseek-v3", "-t", "4x8xh200-ib", "--input-len", "4096", "--output-len", "1024", "--tpot-ms", "30")


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    from click.testing import CliRunner

    from mla_planner.cli.app import app
    r = CliRunner().invoke(app, ["plan", *ARGS, "-e", "sglang", "--json"])
    assert r.exit_code == 0, r.output
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(r.stdout)
    return path, json.loads(r.stdout)["disaggregated"][0]


def _log(tmp_path, name, *lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _sglang(kv: int, mode: str, kv_dtype: str = "fp8_e4m3") -> list[str]:
    return [f"[2026-12-02 10:00:00] server_args={{'model_path': 'x', 'kv_cache_dtype': '{kv_dtype}', "
            f"'page_size': 1, 'disaggregation_mode': '{mode}'}}",
            f"[2026-12-02 10:01:00 DP0 TP0] max_total_num_tokens={kv}, chunked_prefill_size=2048, "
            "max_prefill_tokens=16384, max_running_requests=31, context_len=5120"]


def _checks(cli, plan_path, *args):
    r = cli("check-log", *args, "--plan", str(plan_path), "--disaggregated", "1", "--json")
    assert r.exit_code in (0, 1), r.output
    data = json.loads(r.stdout)
    return r.exit_code, data, {c["name"]: c for c in data["checks"]}


def test_a_decode_nodes_log_is_held_against_the_decode_pool(cli, plan, tmp_path):
    path, d = plan
    kv = d["performance"]["decode_kv_capacity_tokens"]
    code, data, checks = _checks(cli, path, _log(tmp_path, "d.log", *_sglang(kv, "decode")))
    assert code == 0 and data["pool"] == "decode"
    assert checks["pd_role"]["status"] == "ok" and checks["kv_cache"]["status"] == "ok"
    assert f"the plan {kv:,}" in checks["kv_cache"]["text"]
    code, _, checks = _checks(cli, path, _log(tmp_path, "d2.log", *_sglang(int(kv * 0.8), "decode")))
    assert code == 1 and checks["kv_cache"]["status"] == "fail"


def test_a_prefill_log_is_held_against_the_prefill_pool_and_a_wrong_role_fails(cli, plan, tmp_path):
    path, d = plan
    kv = d["performance"]["prefill_kv_capacity_tokens"]
    code, data, checks = _checks(cli, path, _log(tmp_path, "p.log", *_sglang(kv, "prefill")))
    assert code == 0 and data["pool"] == "prefill" and checks["kv_cache"]["status"] == "ok"
    code, _, checks = _checks(cli, path, _log(tmp_path, "x.log", *_sglang(kv, "null")), "--pool", "prefill")
    assert code == 1 and checks["pd_role"]["status"] == "fail" and "runs as none" in checks["pd_role"]["text"]


def test_bench_behind_the_router_against_the_deployment(cli, plan, tmp_path):
    path, d = plan
    planned = d["performance"]["throughput_tokens_per_s"]
    bench = ["============ Serving Benchmark Result ============",
             f"{'Output token throughput (tok/s):':<40} {0.9 * planned:<10.2f}", f"{'Mean TPOT (ms):':<40} 29.00"]
    code, data, checks = _checks(cli, path, _log(tmp_path, "b.log", *bench))
    assert code == 0 and data["pool"] is None and list(checks) == ["benchmark"]
    assert checks["benchmark"]["status"] == "ok"


def test_an_engine_log_that_does_not_say_its_role_needs_pool(cli, plan, tmp_path):
    path, d = plan
    line = "[2026-12-02 10:01:00 TP0] max_total_num_tokens=1000, chunked_prefill_size=2048"
    r = cli("check-log", _log(tmp_path, "n.log", line), "--plan", str(path), "--disaggregated", "1")
    assert r.exit_code == 2 and "give --pool prefill or --pool decode" in r.stderr
    r = cli("check-log", _log(tmp_path, "n2.log", line), "--pool", "decode")
    assert r.exit_code == 2 and "--disaggregated" in r.stderr


def test_a_pool_engine_that_refused_to_start_fails(cli, plan, tmp_path):
    """Found by QA: the start-up refusal that fails check-log without --plan passed with --disaggregated."""
    path, _ = plan
    refused = _sglang(1, "decode")[:1] + ["[2026-12-02 10:00:20 DP0 TP0] RuntimeError: Loaded weights leave no GPU "
                                          "memory for the KV cache. Increase --mem-fraction-static."]
    code, _, checks = _checks(cli, path, _log(tmp_path, "r.log", *refused))
    assert code == 1 and checks["startup"]["status"] == "fail"


def test_a_log_run_without_disaggregation_fails_its_role_without_being_told_the_pool(cli, plan, tmp_path):
    """SGLang's disaggregation_mode 'null' and vLLM's kv_role 'kv_both' say the engine is in no pool (QA: read as
    saying nothing)."""
    path, d = plan
    code, data, checks = _checks(cli, path, _log(tmp_path, "n.log", *_sglang(1000, "null")))
    assert code == 1 and list(checks) == ["pd_role"] and "runs as none, not as a prefill or decode pool" in \
        checks["pd_role"]["text"]


def test_logs_of_both_pools_together_are_refused_naming_each(cli, plan, tmp_path):
    """Held together against one pool, the other pool's KV pool and settings would fail or pass for the wrong reason
    (QA: a decode log listed first hid the prefill log's mismatch)."""
    path, d = plan
    dec, pre = _log(tmp_path, "dec.log", *_sglang(1000, "decode")), _log(tmp_path, "pre.log", *_sglang(1000, "prefill"))
    r = cli("check-log", dec, pre, "--plan", str(path), "--disaggregated", "1")
    assert r.exit_code == 2 and f"decode: {dec}; prefill: {pre}" in r.stderr


def test_sglangs_own_out_of_memory_refusal_fails_the_start(cli, plan, tmp_path):
    """SGLang 0.5.23 model_executor/pool_configurator.py: 'Not enough memory. Please try to increase
    --mem-fraction-static.' when no KV pool is left."""
    path, d = plan
    lines = _sglang(1000, "decode")[:1] + ["RuntimeError: Not enough memory. Please try to increase "
                                           "--mem-fraction-static. Current value: mem_fraction_static=0.95"]
    code, _, checks = _checks(cli, path, _log(tmp_path, "oom.log", *lines))
    assert code == 1 and checks["startup"]["status"] == "fail" and "Not enough memory" in checks["startup"]["text"]
