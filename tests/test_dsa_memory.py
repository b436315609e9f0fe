"""`memory` for DeepSeek Sparse Attention models (DeepSeek-V3.2, GLM-5.2) as each engine allocates them:
the KV dtype the engine stores when not told, per GPU generation; the sparse backend it selects and what
"fp8" becomes on it; 64-token blocks; the index keys beside the latent (docs/dsa-engines.md, from the vLLM
0.33.0 and SGLang 0.5.23 wheels; data/backends.yaml `sparse`)."""

import json
from pathlib import Path

import pytest

from mla_planner.specs.catalogue import spec_from_hf_config
from mla_planner.specs.sizing import kv_bytes_per_token

V32 = "tests/fixtures/hf/DeepSeek-V3.2/config.json"
GLM52 = "tests/fixtures/hf/GLM-5.2-FP8/config.json"


@pytest.mark.parametrize("model, topology, engine, backend, stored", [
    # vLLM: auto is bf16 for V3.2 everywhere (the bfloat16 flag is rewritten to auto), but fp8_e4m3 for GLM on
    # SM10x (GlmMoeDsaForCausalLM.verify_and_update_config); Hopper's first bf16 backend is FLASH_ATTN_MLA_SPARSE,
    # Blackwell's FA4 at <= 16 heads per rank (V3.2 at TP8), FlashInfer's sparse backend for fp8
    (V32, "8xh200", "vllm", "FLASH_ATTN_MLA_SPARSE", "bf16"),
    (V32, "8xb200", "vllm", "FLASH_ATTN_MLA_SPARSE_FA4", "bf16"),
    (GLM52, "8xh200", "vllm", "FLASH_ATTN_MLA_SPARSE", "bf16"),
    (GLM52, "8xb200", "vllm", "FLASHINFER_MLA_SPARSE", "fp8"),
    # SGLang: auto is bf16 on Hopper (fa3 decode), fp8_e4m3 on Blackwell (trtllm: plain 576-byte rows)
    (V32, "8xh200", "sglang", "fa3", "bf16"),
    (V32, "8xb200", "sglang", "trtllm", "fp8"),
    (GLM52, "8xh200", "sglang", "fa3", "bf16"),
    (GLM52, "8xb200", "sglang", "trtllm", "fp8"),
])
def test_each_engine_stores_its_own_default_and_says_so(cli, model, topology, engine, backend, stored):
    r = cli("memory", "-m", model, "-t", topology, "-e", engine, "--max-model-len", "131072", "--json")
    data = json.loads(r.stdout)
    knobs = data["knobs"]
    assert (knobs["attention_backend"], knobs["kv_cache_dtype"], knobs["block_size"]) == (backend, stored, 64)
    assert any(f"default for {data['model']}" in n and backend in n for n in data["notes"])
    spec = spec_from_hf_config(Path(model))
    per_token = {g["kv_bytes_per_token"] for g in data["per_gpu"]}
    assert per_token == {kv_bytes_per_token(spec, stored)}          # latent + index keys, whole on every rank


@pytest.mark.parametrize("topology, engine, stored, row", [
    ("8xh200", "vllm", "fp8_ds_mla", 656),      # FLASHMLA_SPARSE turns fp8 into fp8_ds_mla
    ("8xb200", "vllm", "fp8", 576),             # FLASHINFER_MLA_SPARSE keeps plain fp8
    ("8xh200", "sglang", "fp8_ds_mla", 656),    # flashmla_kv
    ("8xb200", "sglang", "fp8", 576),           # trtllm
])
def test_fp8_becomes_what_the_backend_keeps(cli, topology, engine, stored, row):
    r = cli("memory", "-m", V32, "-t", topology, "-e", engine, "--kv-cache-dtype", "fp8", "--json")
    data = json.loads(r.stdout)
    assert data["knobs"]["kv_cache_dtype"] == stored
    assert data["per_gpu"][0]["kv_bytes_per_token"] == 61 * (row + 132)


def test_the_capacity_follows_the_bytes_per_token(cli):
    """The same budget holds bf16 / fp8_ds_mla = 78,324 / 48,068 times as many fp8 tokens (up to whole
    64-token blocks: the pool is a whole number of them), as vLLM's num_blocks = available // (64 x sum of the layers' pages)."""
    bf16 = json.loads(cli("memory", "-m", V32, "-t", "8xh200", "--json").stdout)
    fp8 = json.loads(cli("memory", "-m", V32, "-t", "8xh200", "--kv-cache-dtype", "fp8", "--json").stdout)
    assert bf16["per_gpu"][0]["kv_pool_bytes"] == pytest.approx(fp8["per_gpu"][0]["kv_pool_bytes"], rel=1e-4)
    ratio = fp8["kv_capacity_tokens"] / bf16["kv_capacity_tokens"]
    assert ratio == pytest.approx(78_324 / 48_068, rel=5e-4)
    assert bf16["kv_capacity_tokens"] % 64 == 0 and fp8["kv_capacity_tokens"] % 64 == 0


def test_pipeline_stages_hold_their_own_index_keys(cli):
    """GLM-5.2 at pp=2: stage 0 (layers 0-38) keeps 12 indexers, stage 1 (39-77) 9."""
    data = json.loads(cli("memory", "-m", GLM52, "-t", "2x8xh200-ib", "--tp", "8", "--pp", "2",
                          "--max-model-len", "131072", "--json").stdout)
    assert [g["kv_bytes_per_token"] for g in data["per_gpu"]] == [39 * 1152 + 12 * 132, 39 * 1152 + 9 * 132]


@pytest.mark.parametrize("words, needle", [
    (["-e", "sglang", "-t", "8xb200", "--kv-cache-dtype", "fp8_ds_mla"], "plain 576-byte rows"),
    (["--block-size", "32"], "multiples of 64"),
    (["--tp", "4", "--dcp", "2"], "no sparse MLA backend for a bf16 cache on H200-SXM-141G with dcp=2"),
    (["--tp", "8", "--dcp", "2", "-e", "sglang", "--kv-cache-dtype", "fp8"], "flashmla_kv: no DCP"),
    (["--tp", "4", "--dcp", "2", "--kv-cache-dtype", "fp8"], "fewer than 32 query heads per rank"),
    (["-t", "4x8xa100-ib", "--tp", "8", "--pp", "4", "--kv-cache-dtype", "fp8"], "no FP8"),
    (["-t", "4x8xa100-ib", "--tp", "8", "--pp", "4"], "no sparse MLA backend"),
])
def test_what_the_engine_would_refuse_is_one_line(cli, words, needle):
    r = cli("memory", "-m", V32, *(["-t", "8xh200"] if "-t" not in words else []), *words)
    assert r.exit_code == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_dcp_splits_both_caches_as_vllm_does(cli):
    """vLLM 0.33.0 shards every attention cache spec over the DCP ranks (kv_cache_interface.py dcp_sharded), the
    index keys with the latent: a GPU's slot is 1/dcp of a token's bytes. FlashMLA-sparse takes DCP with
    fp8_ds_mla at 16 heads per rank (padded to 64 alone and gathered over 2 or 4 ranks)."""
    one = json.loads(cli("memory", "-m", V32, "-t", "8xh200", "--tp", "8", "--kv-cache-dtype", "fp8",
                         "--json").stdout)
    two = json.loads(cli("memory", "-m", V32, "-t", "8xh200", "--tp", "8", "--dcp", "2",
                         "--kv-cache-dtype", "fp8", "--json").stdout)
    assert two["knobs"]["attention_backend"] == "FLASHMLA_SPARSE" and two["knobs"]["kv_cache_dtype"] == "fp8_ds_mla"
    assert two["per_gpu"][0]["kv_bytes_per_token"] == one["per_gpu"][0]["kv_bytes_per_token"] / 2
