"""Sparse and compressed attention on AMD Instinct (issue 20). DeepSeek-V3.2 and GLM-5 plan, emit and lint on ROCm with
the engines' ROCm DSA paths (vLLM 0.33.0's ROCM_AITER_MLA_SPARSE, which the model's ROCm attention hard-wires; SGLang
0.5.23's HIP DSA kernels, tilelang as AMD's recipes pin them), their plain 576-byte fp8 rows (no fp8_ds_mla),
vLLM's 16-token blocks and AITER's head padding. DeepSeek-V4 runs on vLLM's ROCM_FLASHMLA_SPARSE_DSV4 (FP4 index
keys on gfx950 only) and SGLang's HIP dsv4 backend (TileLang's decode pads heads to 64 on gfx942, AITER's on gfx950
does not). Commands are checked against the flags and ROCm backend lists read from the engines' wheels."""

from __future__ import annotations

import json

import pytest

from mla_planner.core.errors import PlanError
from mla_planner.engines.parser.check import check_command
from mla_planner.engines.sparse import padded_heads, sparse_choice
from mla_planner.launch.build import build, launch_inputs
from mla_planner.memory.accounting import evaluate
from mla_planner.search.planfile_read import read_plan
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

ROCM_DSA = {"vllm": {"ROCM_AITER_MLA_SPARSE"}, "sglang": {"tilelang"}}
CUDA_ONLY = ("FLASHMLA", "FLASH_ATTN", "FLASHINFER", "flashmla", "fa3", "trtllm", "fp8_ds_mla", "deepep")
GFX = {"8xmi355x": "gfx950", "8xmi300x": "gfx942"}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("model, topology", [("deepseek-v3.2", "8xmi355x"), ("glm-5-fp8", "8xmi300x")])
def test_dsa_plans_and_scripts_use_rocm_sparse_backends_only(cli, tmp_path, engine, model, topology):
    r = cli("plan", "-m", model, "-t", topology, "-e", engine, "--json")
    assert r.exit_code in (0, 1), r.output
    plan = json.loads(r.stdout)
    assert plan["candidates"]
    for c in plan["candidates"]:
        assert c["knobs"]["attention_backend"] in ROCM_DSA[engine], c["knobs"]
        assert c["knobs"]["kv_cache_dtype"] in ("bf16", "fp8"), c["knobs"]
        assert c["knobs"]["block_size"] == (16 if engine == "vllm" else 64), c["knobs"]
    path = tmp_path / "plan.json"
    path.write_text(r.stdout)
    out = tmp_path / "out"
    assert cli("emit", "-p", str(path), "-o", str(out)).exit_code == 0
    script = (out / "node-0.sh").read_text()
    assert not any(word in script for word in CUDA_ONLY), script
    saved = read_plan(path)
    commands = [c for c in build(launch_inputs(saved, saved.candidates[0], "native"), engine) if c.runs_engine]
    for c in commands:
        assert check_command(c.engine_args, engine, GFX[topology], sparse_attention=True,
                             model_max_len=saved.spec.max_position_embeddings) == [], c.argv
    if engine == "sglang":
        assert "--dsa-decode-backend tilelang" in " ".join(commands[0].argv)
        assert "--dsa-prefill-backend tilelang" in " ".join(commands[0].argv)
    r = cli("lint", "-m", model, "-t", topology, "--json", "--", *commands[0].argv)
    assert not [f for f in json.loads(r.stdout)["findings"] if f["level"] == "error"], r.stdout


def test_what_each_engine_stores_on_rocm():
    """Both keep the plain 576-wide latent row on ROCm (vLLM's ROCM_AITER_MLA_SPARSE lists no fp8_ds_mla; SGLang's
    calculate_mla_kv_cache_dim returns 576 for its HIP kernels) and bf16 when not told; vLLM's blocks are multiples of
    16 there, SGLang's pages 64; neither runs DCP there."""
    spec, gpu = load_model("glm-5").spec, load_topology("8xmi355x").gpu
    vllm = sparse_choice("vllm", spec, gpu, "auto", 8)
    assert (vllm.backend, vllm.kv_cache_dtype, vllm.block_size) == ("ROCM_AITER_MLA_SPARSE", "bf16", 16)
    assert sparse_choice("vllm", spec, gpu, "fp8", 8, block_size=32).kv_cache_dtype == "fp8"
    with pytest.raises(PlanError, match="not FlashMLA's 656-byte fp8_ds_mla"):
        sparse_choice("vllm", spec, gpu, "fp8_ds_mla", 8)
    with pytest.raises(PlanError, match="multiples of 16"):
        sparse_choice("vllm", spec, gpu, "fp8", 8, block_size=24)
    with pytest.raises(PlanError, match="no DCP"):
        sparse_choice("vllm", spec, gpu, "fp8", 8, dcp=2)
    sglang = sparse_choice("sglang", spec, gpu, "auto", 8)
    assert (sglang.backend, sglang.kv_cache_dtype, sglang.block_size) == ("tilelang", "bf16", 64)


def test_rocm_dsa_cache_bytes_and_head_padding():
    """A token costs 576 B of fp8 latent and 132 B of index key per layer on ROCm (78 layers for GLM-5); vLLM's AITER
    sparse kernel computes GLM-5's 8 heads per TP8 rank as 16, and so does SGLang's tilelang (a power of two, at least
    16)."""
    spec, topo = load_model("glm-5-fp8").spec, load_topology("8xmi355x")
    knobs = Knobs(engine="sglang", kv_cache_dtype="fp8", block_size=64, attention_backend="tilelang",
                  memory_fraction=0.9, max_model_len=8192)
    report = evaluate(spec, topo, Layout(tp=8), knobs)
    assert report.per_gpu[0].kv_bytes_per_token == 78 * (576 + 132)
    assert padded_heads("vllm", "ROCM_AITER_MLA_SPARSE", 8) == 16
    assert padded_heads("sglang", "tilelang", 8) == 16 and padded_heads("sglang", "tilelang", 24) == 32


@pytest.mark.parametrize("argv, flag, words", [
    (["vllm", "serve", "zai-org/GLM-5-FP8", "-tp", "8", "--block-size", "24"], "block size", "multiples of 16"),
    (["vllm", "serve", "zai-org/GLM-5-FP8", "-tp", "8", "--kv-cache-dtype", "fp8_ds_mla"], "--kv-cache-dtype",
     "plain 576-byte rows"),
    (["python", "-m", "sglang.launch_server", "--model-path", "zai-org/GLM-5-FP8", "--tp", "8",
      "--dsa-decode-backend", "flashmla_kv"], "--dsa-decode-backend", "a CUDA kernel"),
])
def test_lint_flags_what_rocm_dsa_cannot_run(cli, argv, flag, words):
    r = cli("lint", "-m", "glm-5-fp8", "-t", "8xmi355x", "--json", "--", *argv)
    findings = json.loads(r.stdout)["findings"]
    assert r.exit_code == 1 and any(f["level"] == "error" and f["flag"] == flag and words in f["text"]
                                    for f in findings), findings


def test_vllm_dsa_without_aiter_on_gfx942_is_warned(cli):
    """vLLM's DSA indexer raises RuntimeError on gfx942 without VLLM_ROCM_USE_AITER (forward_hip); lint cannot see an
    exported variable, so it warns, naming the failure."""
    r = cli("lint", "-m", "deepseek-v3.2", "-t", "8xmi300x", "--json", "--", "vllm", "serve",
            "deepseek-ai/DeepSeek-V3.2", "-tp", "8")
    warns = [f for f in json.loads(r.stdout)["findings"] if f["flag"] == "VLLM_ROCM_USE_AITER"]
    assert warns and "RuntimeError on gfx942" in warns[0]["text"], warns


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("topology", ["8xmi355x", "8xmi300x"])
def test_deepseek_v4_plans_on_rocm_backends(cli, tmp_path, engine, topology):
    r = cli("plan", "-m", "deepseek-v4-flash", "-t", topology, "-e", engine, "--json")
    assert r.exit_code in (0, 1), r.output
    plan = json.loads(r.stdout)
    own = {("vllm", "8xmi355x"): "ROCM_FLASHMLA_SPARSE_DSV4", ("vllm", "8xmi300x"): "ROCM_FLASHMLA_SPARSE_DSV4",
           ("sglang", "8xmi355x"): "aiter_sparse", ("sglang", "8xmi300x"): "tilelang"}[(engine, topology)]
    fp4 = engine == "vllm" and topology == "8xmi355x"      # vLLM's FP4 index keys: gfx950 only
    for c in plan["candidates"]:
        k = c["knobs"]
        assert (k["attention_backend"], k["kv_cache_dtype"], k["block_size"]) == (own, "fp8_ds_mla", 256), k
        assert k["indexer_kv_dtype"] == ("mxfp4" if fp4 else "fp8"), k
    path = tmp_path / "plan.json"
    path.write_text(r.stdout)
    saved = read_plan(path)
    for c in build(launch_inputs(saved, saved.candidates[0], "native"), engine):
        if c.runs_engine:
            assert check_command(c.engine_args, engine, GFX[topology], sparse_attention=True,
                                 model_max_len=saved.spec.max_position_embeddings,
                                 model_backend="ROCM_FLASHMLA_SPARSE_DSV4" if engine == "vllm" else None) == []
            assert ("mxfp4" in " ".join(c.argv)) == fp4
            assert not any(word in " ".join(c.argv) for word in ("FLASHMLA_SPARSE_DSV4 ", "deepep")), c.argv


def test_deepseek_v4_head_padding_by_rocm_kernel():
    """SGLang's TileLang V4 decode (gfx942) pads a TP rank's heads to 64; AITER's (gfx950) and vLLM's ROCm kernels
    take the heads themselves; CUDA's FlashMLA pads to 64."""
    v4 = {"compressed": True}
    assert padded_heads("sglang", "tilelang", 16, **v4) == 64 and padded_heads("sglang", "aiter_sparse", 16, **v4) == 16
    assert padded_heads("sglang", "tilelang", 48) == 64          # the DSA kernel of the same name: a power of two
    assert padded_heads("vllm", "ROCM_FLASHMLA_SPARSE_DSV4", 16, **v4) == 16
    assert padded_heads("vllm", "FLASHMLA_SPARSE_DSV4", 16, **v4) == 64


@pytest.mark.parametrize("given", [["--attention-config", '{"indexer_kv_dtype":"mxfp4"}'],
                                   ["--attention-config.indexer_kv_dtype", "mxfp4"]])
def test_lint_refuses_fp4_index_keys_on_gfx942(cli, given):
    r = cli("lint", "-m", "deepseek-v4-flash", "-t", "8xmi300x", "--json", "--", "vllm", "serve",
            "deepseek-ai/DeepSeek-V4-Flash", "-tp", "8", "--block-size", "256", "--kv-cache-dtype", "fp8", *given)
    findings = json.loads(r.stdout)["findings"]
    assert r.exit_code == 1 and any(f["flag"] == "--attention-config" and "CDNA4" in f["text"] for f in findings)
