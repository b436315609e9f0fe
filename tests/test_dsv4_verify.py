"""`verify` for DeepSeek-V4 models: the attention check times the compressed attention decode microkernel
(verify/compressed_kernel.py: the sliding window, the compressed rows, the indexer's top-k on CSA layers, the
attention sink) for one layer of each compression ratio, and holds their average over the layers to the roofline
of the bytes and FLOPs the step model prices for that work (the csa-hca kind's layer_core, its bytes recounted at
the timed dtype: verify/compressed_bench.py). The CPU twin runs the same code path at small shapes; the GPU test
runs where a CUDA device is."""

import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from mla_planner.specs.attention.compressed import layer_ratios, rows_read
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.verify.compressed_bench import compressed_attention_benchmark
from mla_planner.verify.target import caps_for

FLASH = "tests/fixtures/hf/DeepSeek-V4-Flash-0731"
ROOT = Path(__file__).resolve().parent.parent
NAMES = {0: "swa", 4: "csa", 128: "hca"}


def expected_kind(spec, layout, ratio, batch, context, elem):
    """What one layer of `ratio` moves and computes as the timed kernel holds it: layer_core's FLOPs, and its bytes
    counted from first principles at `elem` bytes a value (each row read or written 512 wide, queries and outputs
    512 wide per head, each index key scored index_head_dim wide); the rows from rows_read."""
    core = attention_of(spec).layer_core(spec, layout, ratio, batch, context, 1)
    rows, window, keys = rows_read(context, ratio, spec.sliding_window, spec.index_topk)
    heads = spec.num_attention_heads // layout.tp
    moved = (batch * (rows + window + 1) * spec.head_dim + batch * heads * 2 * spec.head_dim
             + batch * keys * spec.index_head_dim) * elem
    assert core.bytes > 0 and core.flops > 0
    return {"bytes": moved, "flops": core.flops, "rows": [rows, window, keys]}


def expected_average(spec, layout, batch, context, elem):
    """The per-kind figures and their average over the decoder layers, weighted by each ratio's layer count."""
    layers = Counter(layer_ratios(spec))
    kinds = {NAMES[r]: expected_kind(spec, layout, r, batch, context, elem) | {"layers": n} for r, n in layers.items()}
    n = sum(layers.values())
    return kinds, (sum(k["bytes"] * k["layers"] for k in kinds.values()) / n,
                   sum(k["flops"] * k["layers"] for k in kinds.values()) / n)


def small_spec():
    """Flash with 8 query heads, 4 index heads, a 16-token window and a top-8 indexer: seconds on a CPU."""
    return replace(load_model(FLASH).spec, num_attention_heads=8, index_n_heads=4, index_topk=8, sliding_window=16)


@pytest.fixture(scope="module")
def v4_plan(tmp_path_factory):
    from click.testing import CliRunner

    from mla_planner.cli.app import app

    result = CliRunner().invoke(app, ["plan", "-m", FLASH, "-t", "8xh200", "--json"])
    assert result.exit_code == 0, result.output
    path = tmp_path_factory.mktemp("dsv4") / "plan.json"
    path.write_text(result.stdout)
    return path


def test_verify_times_the_compressed_kernel_of_a_planned_v4_candidate(cli, v4_plan):
    r = cli("verify", "--plan", str(v4_plan), "--device", "cpu", "--only", "attention", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    check = next(c for c in data["checks"] if c["name"] == "attention")
    assert check["status"] == "info" and check["measured"] > 0 and check["predicted"] > 0
    assert check["extra"]["impl"] == "compressed" and "torch-compressed" in check["detail"]
    target = data["target"]
    caps = caps_for("cpu", quick=False)
    batch, context = min(target["micro_batch"], caps.batch), min(target["context_len"], caps.context)
    spec, layout = load_model(FLASH).spec, Layout(**target["layout_fields"])
    kinds, (moved, flops) = expected_average(spec, layout, batch, context, elem=4)     # fp32 on a CPU
    assert check["extra"]["bytes"] == pytest.approx(moved) and check["extra"]["flops"] == pytest.approx(flops)
    assert moved > 0 and flops > 0
    got = check["extra"]["layer_kinds"]
    assert {k: v["layers"] for k, v in got.items()} == {"swa": 2, "csa": 21, "hca": 20}
    for name, k in kinds.items():
        assert got[name]["bytes"] == pytest.approx(k["bytes"]) and got[name]["flops"] == pytest.approx(k["flops"])
        assert got[name]["rows"] == k["rows"] and got[name]["time_s"] > 0
    assert "csa 21 x" in check["detail"] and "averaged over 43 layers" in check["detail"]


def test_verify_runs_a_v4_layout_given_on_the_command_line(cli):
    """--layout takes the V4 cache knobs as memory does (584-byte rows on 256-token blocks), not a bf16 cache."""
    r = cli("verify", "-m", FLASH, "-t", "8xh200", "--layout", "tp=2", "--device", "cpu", "--only", "attention",
            "--quick", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["target"]["knobs"]["kv_cache_dtype"] == "fp8_ds_mla" and data["target"]["knobs"]["block_size"] == 256
    assert not any("cache format" in n for n in data["target"]["notes"])
    check = next(c for c in data["checks"] if c["name"] == "attention")
    assert check["extra"]["impl"] == "compressed" and check["status"] == "info"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("context", [10, 200])
def test_its_bytes_flops_and_rows_are_the_step_models_at_the_timed_dtype(dtype, context):
    """Below the window (10 tokens: two CSA entries, no HCA row) and past it and the top-k x 4 (200 tokens: 50 CSA
    entries of which 8 are attended, one HCA row)."""
    spec, layout = small_spec(), Layout(tp=2)
    r = compressed_attention_benchmark(spec, layout, 3, context, dtype, "cpu", warmup=0, repeats=1)
    elem = torch.tensor([], dtype=dtype).element_size()
    kinds, (moved, flops) = expected_average(spec, layout, 3, context, elem)
    assert r["impl"] == "compressed" and r["path"] == "torch-compressed" and r["heads"] == 4
    assert r["bytes"] == pytest.approx(moved) and r["flops"] == pytest.approx(flops)
    assert r["time_s"] > 0 and r["achieved_gb_per_s"] == pytest.approx(moved / r["time_s"] / 1e9)
    for name, k in kinds.items():
        got = r["kinds"][name]
        assert (got["layers"], got["rows"]) == (k["layers"], k["rows"])
        assert got["bytes"] == pytest.approx(k["bytes"]) and got["flops"] == pytest.approx(k["flops"])
    assert r["time_s"] == pytest.approx(sum(k["time_s"] * k["layers"] for k in r["kinds"].values()) / 43)
    if context == 200:
        assert r["kinds"]["csa"]["rows"] == [8, 16, 50] and r["kinds"]["hca"]["rows"] == [1, 16, 0]


def test_a_model_without_csa_layers_times_no_indexer():
    spec = replace(small_spec(), compress_ratios=(0, 128) * 22)
    r = compressed_attention_benchmark(spec, Layout(tp=1), 2, 300, torch.float32, "cpu", warmup=0, repeats=1)
    assert set(r["kinds"]) == {"swa", "hca"} and r["kinds"]["hca"]["rows"] == [2, 16, 0]
    assert {k["layers"] for k in r["kinds"].values()} == {21, 22}


def test_the_csa_hca_kind_is_verified_and_the_planner_stays_torch_free():
    assert attention_of(load_model(FLASH).spec).verify_kernel
    code = ("import sys, mla_planner.cli.verify, mla_planner.verify.target, mla_planner.specs.attention.compressed, "
            "mla_planner.engines.compressed_kv; assert 'torch' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_compressed_kernel_runs_at_a_planned_shape_on_the_gpu():
    spec = load_model(FLASH).spec
    r = compressed_attention_benchmark(spec, Layout(tp=2), 64, 8192, torch.bfloat16, "cuda", warmup=2, repeats=5)
    assert r["time_s"] > 0 and r["achieved_gb_per_s"] > 0
    assert r["kinds"]["csa"]["rows"] == [512, 128, 2048]
