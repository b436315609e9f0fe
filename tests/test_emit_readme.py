"""The emitted README's checks against the plan: what the engine should log and bench.sh should show, the
FP8 KV accuracy check, and the container line even on one node (USER_PROBLEMS.md problems 10, 12, 20, 24)."""

from __future__ import annotations

import json


def _plan_and_emit(cli, tmp_path, *args):
    plan = json.loads(cli("plan", *args, "--json").stdout)
    out = tmp_path / "out"
    r = cli("plan", *args, "--emit", str(out))
    assert r.exit_code == 0, r.output
    return plan["candidates"][0], (out / "README.md").read_text()


def test_the_readme_says_what_the_engine_should_log_and_bench_should_show(cli, tmp_path):
    cand, readme = _plan_and_emit(cli, tmp_path, "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "vllm",
                                  "--kv-cache-dtype", "fp8")
    section = readme.split("## What the plan predicts")[1].split("\n## ")[0]
    assert f"{cand['memory']['kv_capacity_tokens']:,} tokens" in section and "GPU KV cache size" in section
    perf, replicas = cand["performance"], cand["layout"]["replicas"]
    assert f"about {perf['throughput_tokens_per_s'] / replicas:,.0f} output tokens/s" in section
    assert f"{perf['tpot_s'] * 1e3:.1f} ms per output token" in section
    assert "GSM8K" in section and "--kv-cache-dtype auto" in section      # fp8 KV: check accuracy against bf16
    assert "`--ipc=host`" in readme.split("## Before you start")[1].split("\n## ")[0]   # one node, still shm


def test_no_fp8_line_for_a_bf16_cache_and_sglang_words(cli, tmp_path):
    cand, readme = _plan_and_emit(cli, tmp_path, "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "sglang",
                                  "--kv-cache-dtype", "bf16")
    section = readme.split("## What the plan predicts")[1].split("\n## ")[0]
    assert "max_total_num_tokens=N" in section and "GSM8K" not in section


def test_the_folder_carries_its_plan_for_check_log(cli, tmp_path):
    """The README's check-log command names the plan written into the folder and the candidate it was emitted
    from (a review: with candidate 2 the bare command checked candidate 1's KV pool)."""
    from mla_planner.planfile import read_plan
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "vllm", "--json").stdout)
    out = tmp_path / "c2"
    assert cli("emit", "--plan", str(plan_file), "--candidate", "2", "--out", str(out)).exit_code == 0
    readme = (out / "README.md").read_text()
    assert "mla-plan check-log node-0.log bench.log --plan plan.json --candidate 2" in readme
    assert read_plan(out / "plan.json").candidates == read_plan(plan_file).candidates
