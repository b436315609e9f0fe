"""The emitted README's checks against the plan: what the engine should log and bench.sh should show, the
FP8 KV accuracy check, and the container line even on one node (vllm-project/vllm#18888, #51041, #6574;
sgl-project/sglang#3656)."""

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
    from mla_planner.search.planfile_read import read_plan
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-e", "vllm", "--json").stdout)
    out = tmp_path / "c2"
    assert cli("emit", "--plan", str(plan_file), "--candidate", "2", "--out", str(out)).exit_code == 0
    readme = (out / "README.md").read_text()
    assert "mla-plan check-log node-0.log bench.log --plan plan.json --candidate 2" in readme
    assert read_plan(out / "plan.json").candidates == read_plan(plan_file).candidates


def test_a_tp_group_across_nodes_gets_its_all_reduce_to_measure(cli, tmp_path):
    """The all-reduce the plan prices for a TP group spanning nodes, and how to measure it: nccl-tests at exactly
    that size with the node scripts' network variables, and verify's in-step timing. Not for TP inside a node."""
    import shlex
    from mla_planner.specs.calibration import load_calibration
    from mla_planner.perf.comm import collective
    from mla_planner.specs.topology import load_topology
    r = cli("plan", "-m", "deepseek-v2", "-t", "2x8xh100-ib", "-l", "tp=16", "-l", "tp=8,pp=2", "-e", "vllm",
            "--json")
    (tmp_path / "p.json").write_text(r.stdout)
    labels = [c["label"] for c in json.loads(r.stdout)["candidates"]]
    tp16, pp2 = labels.index("tp16") + 1, labels.index("tp8·pp2") + 1
    for n in (tp16, pp2):
        out = cli("emit", "--plan", str(tmp_path / "p.json"), "-c", str(n), "--out", str(tmp_path / str(n)))
        assert out.exit_code == 0
    text = (tmp_path / str(tp16) / "README.md").read_text()
    assert "## Is the cross-node all-reduce as fast as planned?" in text
    assert "cross-node all-reduce as fast" not in (tmp_path / str(pp2) / "README.md").read_text()
    line = next(x for x in text.splitlines() if "all_reduce_perf" in x)
    words = shlex.split(line.split("`")[1])
    size = int(words[words.index("-b") + 1])
    assert words[:3] == ["mpirun", "-np", "16"] and "NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6," \
                                                      "mlx5_7" in words and size % (5120 * 2) == 0
    topo = load_topology("2x8xh100-ib")
    us = collective("all_reduce", size, 16, topo, load_calibration(None, topo)).time_s * 1e6
    assert f"should be near {us:.0f} µs" in text and "121 all-reduces" in text
    assert f"--candidate {tp16} --print-launch" in text
