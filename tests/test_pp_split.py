"""The pipeline layer split: each engine's own, one given by the user or chosen by the plan, the split that
balances the stages' KV pools, and SGLang's one budget for all ranks."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pytest

from mla_planner.memory.accounting import evaluate, split_pools
from mla_planner.memory.pp_split import balance, layer_split
from mla_planner.perf.step import decode_step
from mla_planner.search.tuning import draft_knobs, tune
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology


def _setup(model, topo_name, layout, engine, kv="fp8"):
    """The knobs a plan starts from (backend, block, the safe memory fraction) for the default workload."""
    spec, topo = load_model(model).spec, load_topology(topo_name)
    return spec, topo, draft_knobs(spec, topo, layout, engine, kv, Workload())[0]


def _splits(layers: int, pp: int):
    """Every way to cut `layers` into `pp` non-empty contiguous stages."""
    for cuts in combinations(range(1, layers), pp - 1):
        bounds = (0, *cuts, layers)
        yield [b - a for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("model, topo_name, layout, engine", [
    ("deepseek-v3", "2x8xh100-ib", Layout(tp=8, pp=2), "vllm"),
    ("deepseek-v3", "2x8xh100-ib", Layout(tp=8, pp=2), "sglang"),
    ("deepseek-v2", "2x8xl40s-eth", Layout(tp=8, pp=2), "vllm"),
    ("deepseek-v2-lite", "2x8xl40s-eth", Layout(tp=1, pp=4), "vllm"),
    ("deepseek-v2-lite", "2x8xl40s-eth", Layout(tp=1, pp=4), "sglang"),
    ("deepseek-v2-lite", "2x8xl40s-eth", Layout(tp=2, pp=3), "sglang"),
    # a layer must pass through a middle stage: single-boundary moves stopped at the engine's 15,15,16,15
    ("deepseek-v3", "2x8xh200-ib", Layout(tp=4, pp=4), "vllm"),
    ("deepseek-v2", "2x8xl40s-eth", Layout(tp=4, pp=4), "vllm"),
])
def test_balance_finds_the_best_split_of_all(model, topo_name, layout, engine):
    spec, topo, knobs = _setup(model, topo_name, layout, engine)
    pools = split_pools(spec, topo, layout, knobs)
    best = max(min(pools(s)) for s in _splits(spec.num_hidden_layers, layout.pp))
    found = balance(layer_split(spec, layout, knobs), pools)
    assert min(pools(found)) == best
    assert best >= min(pools(layer_split(spec, layout, knobs)))


def test_the_balanced_split_is_what_the_memory_model_then_reports():
    layout = Layout(tp=8, pp=2)
    spec, topo, knobs = _setup("deepseek-v2", "2x8xl40s-eth", layout, "vllm")
    own = evaluate(spec, topo, layout, knobs)
    split = balance([30, 30], split_pools(spec, topo, layout, knobs))
    moved = evaluate(spec, topo, layout, replace(knobs, pp_layer_partition=tuple(split)))
    assert split == [31, 29]        # stage 1 carries the LM head, so it gives a layer to stage 0
    assert [g.layers for g in moved.per_gpu] == split
    assert moved.kv_capacity_tokens > 1.08 * own.kv_capacity_tokens   # 8.9 % with these knobs


def test_sglang_sizes_every_rank_from_the_smallest_budget():
    """SGLang reads free memory as the minimum over all GPUs, then each rank divides it by its own bytes per
    token; vLLM lets each worker profile its own memory. So with SGLang the lighter stage's pool is the
    heavier stage's budget at its own cell size, while under vLLM it is larger."""
    layout = Layout(tp=8, pp=2)
    for engine in ("sglang", "vllm"):
        spec, topo, knobs = _setup("deepseek-v3", "2x8xh100-ib", layout, engine)
        light, heavy = sorted(evaluate(spec, topo, layout, knobs).per_gpu, key=lambda g: g.weights_bytes)
        same_budget = light.kv_tokens * light.kv_bytes_per_token / (heavy.kv_tokens * heavy.kv_bytes_per_token)
        if engine == "sglang":
            assert same_budget == pytest.approx(1.0, abs=0.001)
        else:
            assert same_budget > 1.02


def test_the_plan_moves_layers_when_the_kv_pool_binds(cli, tmp_path):
    """SGLang's own split of DeepSeek-V3 over 2 stages, 30,31, puts the LM head and the extra MoE layer on
    one stage; with 8k prompts and a relaxed TPOT target the KV pool limits the batch, and 32,29 holds more."""
    data = json.loads(cli("plan", "-m", "deepseek-v3", "-t", "2x8xh100-ib", "-e", "sglang", "--tpot-ms", "150",
                          "--input-len", "8192", "--json").stdout)
    best = data["candidates"][0]
    assert best["label"] == "tp8·pp2" and best["performance"]["concurrency_limit"] == "kv"
    assert best["knobs"]["pp_layer_partition"] == [32, 29] == best["memory"]["pp_layer_partition"]
    reason = next(r for r in best["reasons"] if r.startswith("pp_layer_partition:"))
    assert "SGLANG_PP_LAYER_PARTITION" in reason and "30,31" in reason
    out = tmp_path / "out"
    assert cli("emit", "--plan", _save(tmp_path, data), "--out", str(out)).exit_code == 0
    for node in ("node-0.sh", "node-1.sh"):
        assert "export SGLANG_PP_LAYER_PARTITION=32,29" in (out / node).read_text()


def test_the_split_is_kept_only_when_it_serves_more():
    spec, topo = load_model("deepseek-v3").spec, load_topology("2x8xh100-ib")
    layout, calib = Layout(tp=8, pp=2), load_calibration(None, topo)
    relaxed = tune(spec, topo, layout, "sglang", "fp8", Workload(tpot_ms=150, input_len=8192), calib)
    own = tune(spec, topo, layout, "sglang", "fp8", Workload(tpot_ms=50), calib)
    assert relaxed.knobs.pp_layer_partition == (32, 29)
    assert own.metrics.concurrency_limit != "kv" and own.knobs.pp_layer_partition is None
    assert own.reasons["pp_layer_partition"].startswith("30,31: the engine's own split")
    # the step model runs the split it is given
    step = decode_step(spec, topo, layout, relaxed.knobs, 64, 2048, calib)
    assert [s.layers for s in step.stages] == [32, 29]


def test_memory_takes_a_partition_and_suggests_a_better_one(cli):
    base = ("memory", "-m", "deepseek-v3", "-t", "2x8xh100-ib", "--tp", "8", "--pp", "2", "-e", "sglang",
            "--kv-cache-dtype", "fp8", "--max-model-len", "4096", "--json")
    own = json.loads(cli(*base).stdout)
    assert any(n.startswith("SGLANG_PP_LAYER_PARTITION=32,29 would hold") for n in own["notes"])
    given = json.loads(cli(*base, "--pp-layer-partition", "32,29").stdout)
    assert [g["layers"] for g in given["per_gpu"]] == [32, 29]
    assert given["kv_capacity_tokens"] > own["kv_capacity_tokens"]
    assert not any("would hold" in n for n in given["notes"])
    for bad, words in (("32,30", "summing to 61"), ("61,0", "at least one"), ("31", "names 1 stage(s), the layout has 2"),
                       ("31;30", "comma-separated")):
        r = cli(*base, "--pp-layer-partition", bad)
        assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output


def _save(tmp_path, data) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_compare_names_the_split_plan_would_adopt(cli):
    """compare runs the engine's own split; it says when another would hold more (plan and compare then
    differ for a reason the user can see)."""
    r = cli("compare", "-m", "deepseek-v3", "-t", "2x8xh100-ib", "-e", "sglang", "--kv-cache-dtype", "fp8",
            "-l", "tp=8,pp=2", "--json")
    notes = json.loads(r.stdout)["layouts"][0]["notes"]
    assert any(n.startswith("SGLANG_PP_LAYER_PARTITION=32,29 would hold") for n in notes), notes


def test_a_split_that_does_not_fit_is_told_the_balanced_one(cli):
    """1,60 puts 60 layers on one H100 (79.2 GiB of weights): the balancing climbs out of 'no room' too
    (a stage without room scores what it lacks), and the way out names the split that fits."""
    r = cli("memory", "-m", "deepseek-v3", "-t", "2x8xh100-ib", "--tp", "8", "--pp", "2",
            "--pp-layer-partition", "1,60", "--json")
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and not data["fits"]
    assert data["ways_out"][0].startswith("VLLM_PP_LAYER_PARTITION=31,30 (layers balanced by memory): fits")


def test_a_split_that_fits_where_the_engines_own_does_not_is_planned(cli, tmp_path):
    """Kimi-K2 with bf16 KV, SGLang tp8 x pp2, 64k requests: SGLang's own split (30,31) leaves the last stage a
    pool smaller than one max-model-len request, and the layout was rejected although `memory` offered 31,30.
    The GPUs are 4 x 8 H800 whose memory is set to 76.5 GiB (a test size that puts the own split just short)."""
    import yaml
    gpu = {**yaml.safe_load((Path(__file__).parents[1] / "mla_planner/data/gpus.yaml").read_text())["H800-SXM-80G"],
           "name": "H800-lean", "memory_bytes": int(76.5 * 2**30)}
    gpu.pop("nvidia_smi_mib")
    topo = {**yaml.safe_load((Path(__file__).parents[1] / "topologies/4x8xh800-roce.yaml").read_text()),
            "name": "lean", "gpu": gpu}
    (tmp_path / "lean.yaml").write_text(yaml.safe_dump(topo))
    data = json.loads(cli("plan", "-m", "kimi-k2", "-t", str(tmp_path / "lean.yaml"), "--input-len",
                          "p50=8192,p99=61440", "--output-len", "4096", "-e", "sglang", "-l", "replicas=2,tp=8,pp=2",
                          "--kv-cache-dtype", "bf16", "--json").stdout)
    best = data["candidates"][0]
    assert best["knobs"]["pp_layer_partition"] == [31, 30]
    assert best["memory"]["kv_capacity_tokens"] >= best["knobs"]["max_model_len"]
    assert any(r.startswith("pp_layer_partition: 31,30") and "no room" in r for r in best["reasons"])


def test_lint_prices_the_split_the_command_exports(cli, tmp_path):
    """lint holds a command to the pipeline split its VLLM_PP_LAYER_PARTITION gives: the script `plan --emit` wrote
    for GLM-5 at tp4·pp2 on 8 x MI300X (41,37: the engine's own 39,39 leaves stage 1 no KV cache) lints clean, the
    engine's own split does not fit, and a split that does not sum to the layers is the engine's start-up error."""
    out = tmp_path / "out"
    assert cli("plan", "-m", "glm-5", "-t", "8xmi300x", "-e", "vllm", "-l", "tp=4,pp=2", "--emit",
               str(out)).exit_code == 0
    script = (out / "node-0.sh").read_text()
    env = dict(re.findall(r"^export (\S+)=(\S+)$", script, re.M))
    argv = shlex.split(script[script.index("exec ") + 5:].replace("\\\n", " "))

    def findings(split):
        words = [f"{k}={v}" for k, v in env.items() if k != "VLLM_PP_LAYER_PARTITION"]
        words += [f"VLLM_PP_LAYER_PARTITION={split}"] if split else []
        return json.loads(cli("lint", "-m", "glm-5", "-t", "8xmi300x", "--json", "--", *words, *argv).stdout)["findings"]
    assert not [f for f in findings(env["VLLM_PP_LAYER_PARTITION"]) if f["level"] == "error"]
    assert any(f["level"] == "error" and f["flag"] == "memory" for f in findings(None))
    bad = findings("40,37")
    assert any(f["level"] == "error" and f["flag"] == "VLLM_PP_LAYER_PARTITION" and "78" in f["text"] for f in bad)
