"""`lint` for DeepSeek Sparse Attention models: a hand-written command held to the engines' own rules for them
(docs/dsa-engines.md; data/backends.yaml `sparse`)."""

import json

import pytest

V32 = "tests/fixtures/hf/DeepSeek-V3.2"
VLLM = ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2", "-tp", "8"]
SGLANG = ["python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3.2", "--tp", "8"]


def findings(cli, topology, words):
    r = cli("lint", "-m", V32, "-t", topology, "--json", "--", *words)
    return r.exit_code, {(f["level"], f["flag"]) for f in json.loads(r.stdout)["findings"]}


@pytest.mark.parametrize("topology, words, expected", [
    ("8xh200", VLLM, set()),
    ("8xh200", VLLM + ["--attention-backend", "FLASHMLA_SPARSE", "--kv-cache-dtype", "fp8", "--block-size", "64"], set()),
    ("8xb200", VLLM + ["--attention-backend", "FLASHINFER_MLA_SPARSE", "--kv-cache-dtype", "fp8"], set()),
    # a dense MLA backend: vLLM finds no valid backend for sparse attention
    ("8xh200", VLLM + ["--attention-backend", "FLASHMLA"], {("error", "--attention-backend")}),
    # FlashInfer's sparse backend is Blackwell-only, and keeps no fp8_ds_mla rows
    ("8xh200", VLLM + ["--attention-backend", "FLASHINFER_MLA_SPARSE"], {("error", "--attention-backend")}),
    ("8xb200", VLLM + ["--attention-backend", "FLASHINFER_MLA_SPARSE", "--kv-cache-dtype", "fp8_ds_mla"],
     {("error", "--kv-cache-dtype")}),
    ("8xh200", VLLM + ["--attention-backend", "FLASH_ATTN_MLA_SPARSE", "--kv-cache-dtype", "fp8"],
     {("error", "--kv-cache-dtype")}),
    ("8xh200", VLLM + ["--kv-cache-dtype", "fp8_e5m2", "--block-size", "32"],
     {("error", "--kv-cache-dtype"), ("error", "block size")}),
    # DCP: FlashMLA-sparse takes it with fp8_ds_mla below 32 heads per rank (tp8: 16), not at tp4 (32)
    ("8xh200", VLLM + ["-dcp", "2", "--attention-backend", "FLASHMLA_SPARSE", "--kv-cache-dtype", "fp8"], set()),
    ("8xh200", ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2", "-tp", "4", "-dcp", "2", "--attention-backend",
                "FLASHMLA_SPARSE", "--kv-cache-dtype", "fp8"], {("error", "--decode-context-parallel-size")}),
    ("8xh200", SGLANG, set()),
    ("8xh200", SGLANG + ["--kv-cache-dtype", "fp8_e5m2"], {("error", "--kv-cache-dtype")}),
    ("8xh200", SGLANG + ["--attention-backend", "fa3", "--page-size", "1"],
     {("warn", "--attention-backend"), ("warn", "block size")}),
    # SGLang's DSA decode kernels by architecture (data/backends.yaml): trtllm is Blackwell's, fa3 Hopper's
    ("8xh200", SGLANG + ["--dsa-decode-backend", "trtllm"], {("error", "--dsa-decode-backend")}),
    ("8xb200", SGLANG + ["--dsa-decode-backend", "fa3"], {("error", "--dsa-decode-backend")}),
    ("8xb200", SGLANG + ["--dsa-decode-backend", "trtllm"], set()),
])
def test_sparse_rules(cli, topology, words, expected):
    code, found = findings(cli, topology, words)
    assert found == expected
    assert code == (1 if any(level == "error" for level, _ in expected) else 0)
