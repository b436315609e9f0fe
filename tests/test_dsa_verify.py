"""`verify` for DeepSeek Sparse Attention models: the attention check times the sparse decode microkernel
(verify/sparse_kernel.py: indexer over the paged index keys, top-k, attention over the chosen latents) and holds
it to the roofline of the bytes and FLOPs the step model prices for that work (the DSA kind's decode_core).
The CPU twin runs the same code path at small shapes; the GPU test runs where a CUDA device is."""

import json

import pytest
import torch

from mla_planner.specs.attention.dsa import index_key_bytes, index_scan
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.verify.sparse_bench import sparse_attention_benchmark

V32 = "tests/fixtures/hf/DeepSeek-V3.2"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_its_bytes_and_flops_are_the_step_models_at_the_timed_dtype(dtype):
    spec, layout = load_model(V32).spec, Layout(tp=8)
    r = sparse_attention_benchmark(spec, layout, 2, 3000, 64, dtype, "cpu", warmup=0, repeats=1)
    cost = attention_of(spec).decode_core(spec, layout, "bf16", 2, 3000, 1)
    elem = torch.tensor([], dtype=dtype).element_size()
    scanned = 2 * 3000
    latent_and_activations = cost.bytes - scanned * index_key_bytes(spec)
    assert r["bytes"] == pytest.approx(latent_and_activations * elem / 2 + scanned * 128 * elem)
    assert r["flops"] == cost.flops and r["top_k"] == 2048 and r["time_s"] > 0


def test_verify_runs_the_sparse_kernel_for_a_dsa_model(cli):
    r = cli("verify", "-m", V32, "-t", "8xh200", "--layout", "tp=8", "--device", "cpu", "--only", "attention",
            "--json")
    assert r.exit_code == 0, r.output
    check = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "attention")
    assert "torch-sparse" in check["detail"] and "block 64" in check["detail"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_sparse_kernel_runs_at_a_planned_shape_on_the_gpu():
    spec = load_model(V32).spec
    r = sparse_attention_benchmark(spec, Layout(tp=8), 64, 8192, 64, torch.bfloat16, "cuda", warmup=2, repeats=5)
    assert r["time_s"] > 0 and r["achieved_gb_per_s"] > 0


def test_glm52s_kernel_work_is_one_indexer_layer_not_the_average():
    """The kernel always scores (an indexer layer); GLM-5.2 keeps 21 indexers in 78 layers, which decode_core
    averages: the benchmark counts sparse_core plus a whole index_scan."""
    spec, layout = load_model("tests/fixtures/hf/GLM-5.2-FP8").spec, Layout(tp=8)
    r = sparse_attention_benchmark(spec, layout, 2, 3000, 64, torch.float32, "cpu", warmup=0, repeats=1)
    kind = attention_of(spec)
    whole = kind.sparse_core(spec, layout, "bf16", 2, 3000, 1).flops + index_scan(spec, 2, 3000, 1).flops
    assert r["flops"] == whole > kind.decode_core(spec, layout, "bf16", 2, 3000, 1).flops
