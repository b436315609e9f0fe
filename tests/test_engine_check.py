"""Tests of tests/engine_check.py::check_command against vLLM 0.33.0 and SGLang 0.5.23.

Known-good commands are the engines' multi-node recipes and flag defaults (vllm/engine/arg_utils.py,
sglang/srt/server_args.py); every rejection the real parsers and config code of those releases
produce for the commands below must be reported.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_check import FIXTURE_FILES, check_command, load_fixture  # noqa: E402

M = "deepseek-ai/DeepSeek-V3"
DSV3_MAX_LEN = 163840
HEAD = "10.0.0.1"


def ok(argv, engine, gpu_arch=None, **kw):
    problems = check_command(argv, engine, gpu_arch, **kw)
    assert problems == [], problems


def bad(argv, engine, gpu_arch=None, pattern="", **kw):
    problems = check_command(argv, engine, gpu_arch, **kw)
    assert problems, f"expected a rejection for {argv}"
    if pattern:
        assert any(re.search(pattern, p) for p in problems), problems
    return problems


# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("engine,version", [("vllm", "0.33.0"), ("sglang", "0.5.23")])
def test_fixture_metadata(engine, version):
    fx = load_fixture(engine)
    assert fx["engine"] == engine
    assert fx["version"] == version
    assert fx["wheel"].startswith(f"{engine}-{version}-") and fx["wheel"].endswith(".whl")
    assert re.fullmatch(r"[0-9a-f]{64}", fx["wheel_sha256"])
    assert FIXTURE_FILES[engine].name == f"{engine}-{version}.json"
    assert len(fx["flags"]) > 200
    for key, spec in fx["flags"].items():
        assert key.startswith("-")
        assert isinstance(spec["takes_value"], bool)
        assert spec["source"].startswith(f"{engine}/") or spec["source"] == f"{engine} {version} docs"
    for name, rule in fx["rules"].items():
        assert rule["source"].startswith(f"{engine}/"), name


def test_fixture_contents_spot_checks():
    v = load_fixture("vllm")["flags"]
    assert v["--tensor-parallel-size"]["aliases"] == ["-tp"]
    assert v["--tensor-parallel-size"]["type"] == "int"
    assert "--disable-prefix-caching" in v["--enable-prefix-caching"]["negated"]
    assert v["--cudagraph-capture-sizes"]["nargs"] == "+"
    assert v["--max-num-batched-tokens"]["type"] == "human_int"
    assert v["--max-model-len"]["type"] == "human_int_or_auto"
    assert "choices" not in v["--kv-cache-dtype"]  # validated by CacheConfig, not argparse
    assert "choices" not in v["--block-size"]
    s = load_fixture("sglang")["flags"]
    assert "cutlass_mla" not in s["--attention-backend"]["choices"]
    assert {"trtllm_mla", "cutedsl_mla", "fa3", "flashmla"} <= set(s["--attention-backend"]["choices"])
    assert "--cuda-graph-max-bs" not in s
    assert s["--ep-size"]["aliases"] == ["--expert-parallel-size", "--ep"]
    assert s["--model-path"]["required"] is True
    r = load_fixture("vllm")["rules"]["attention_backends"]["backends"]
    assert r["FLASHMLA"]["block_size_bases"] == [64]
    assert r["FLASH_ATTN_MLA"]["block_size_bases"] == [16]
    assert r["FLASH_ATTN_MLA"]["compute_capability_majors"] == [9]
    assert r["TRITON_MLA"]["compute_capability_majors"] == "any"
    assert r["FLASHINFER_MLA"]["compute_capability_majors"] == [10]
    assert r["CUTLASS_MLA"]["block_size_bases"] == [128]
    assert r["FLASHMLA"]["device_family_majors"] == [9]


# ---------------------------------------------------------------------------
# vLLM: known-good commands (vLLM 0.33.0 recipes)
# ---------------------------------------------------------------------------

VLLM_GOOD_H200 = [
    # (b)1 mp executor, one command per node
    [M, "-tp", "8", "-pp", "2", "--nnodes", "2", "--node-rank", "0", "--master-addr", HEAD, "--master-port", "29501"],
    [M, "-tp", "8", "-pp", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr", HEAD, "--master-port", "29501", "--headless"],
    [M, "-tp", "16", "--nnodes", "2", "--node-rank", "0", "--master-addr", HEAD],
    # (b)2 Ray
    [M, "-tp", "8", "-pp", "2", "--distributed-executor-backend", "ray"],
    [M, "-tp", "1", "-dp", "16", "--data-parallel-backend", "ray"],
    # (b)3 multi-node DP / wide EP
    [M, "-tp", "1", "-dp", "16", "--data-parallel-size-local", "8", "--data-parallel-address", HEAD,
     "--data-parallel-rpc-port", "13345", "--enable-expert-parallel"],
    [M, "-tp", "1", "-dp", "16", "--data-parallel-size-local", "8", "--data-parallel-start-rank", "8",
     "--data-parallel-address", HEAD, "--data-parallel-rpc-port", "13345", "--enable-expert-parallel", "--headless"],
    [M, "-tp", "1", "-dp", "16", "-dpl", "8", "--data-parallel-hybrid-lb", "-dpa", HEAD, "-dpp", "13345", "-ep"],
    [M, "-tp", "1", "-dp", "16", "--data-parallel-external-lb", "--data-parallel-rank", "3", "-dpa", HEAD],
    [M, "-tp", "1", "-dp", "8", "--data-parallel-multi-port-external-lb"],
    [M, "-tp", "8", "--headless", "--api-server-count", "0"],
    # flag tables
    [M, "-tp", "8", "--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.92", "--max-num-seqs", "256",
     "--max-num-batched-tokens", "16k", "--max-model-len", "32k", "--enable-prefix-caching"],
    [M, "-tp", "8", "--no-enable-prefix-caching", "--disable-chunked-prefill", "--max-model-len", "8192",
     "--max-num-batched-tokens", "8192"],
    [M, "-tp", "8", "--disable-prefix-caching", "--enable-chunked-prefill", "--async-scheduling",
     "--performance-mode", "throughput"],
    [M, "-tp", "8", "--max-model-len", "auto"],
    [M, "-tp", "8", "--max-model-len", "-1"],
    [M, "-tp", "8", "-O3", "-cc", '{"cudagraph_mode":"FULL_DECODE_ONLY"}'],
    [M, "-tp", "8", "-O", "0", "--enforce-eager"],
    [M, "-tp", "8", "--compilation-config.cudagraph_mode", "FULL_DECODE_ONLY"],
    [M, "-tp", "8", "--cudagraph-capture-sizes", "1", "2", "4", "8", "--max-cudagraph-capture-size", "8"],
    [M, "-tp", "8", "--speculative-config", '{"method":"deepseek_mtp","num_speculative_tokens":1}'],
    [M, "-tp", "8", "-dp", "2", "--enable-expert-parallel", "--all2all-backend", "deepep_low_latency",
     "--enable-eplb", "--eplb-config", '{"num_redundant_experts": 32}'],
    [M, "-tp", "8", "-dcp", "8", "--dcp-comm-backend", "a2a"],
    [M, "-tp", "8", "-dcp", "4"],
    [M, "--tensor-parallel-size=8", "--trust-remote-code", "--port", "8000", "--host", "0.0.0.0"],
    [M, "-tp", "8", "--prefix-caching-hash-algo", "xxhash", "--kv-cache-memory-bytes", "80G"],
    # MLA backends valid on Hopper
    [M, "-tp", "8", "--attention-backend", "FLASH_ATTN_MLA", "--block-size", "16"],
    [M, "-tp", "8", "--attention-backend", "FLASH_ATTN_MLA", "--block-size", "64"],
    [M, "-tp", "8", "--attention-backend", "FLASHMLA", "--block-size", "64"],
    [M, "-tp", "8", "--attention-backend", "FLASHMLA", "--block-size", "128", "--kv-cache-dtype", "fp8"],
    [M, "-tp", "8", "--attention-backend", "FLASHMLA"],
    [M, "-tp", "8", "--attention-backend", "TRITON_MLA", "--block-size", "32"],
    [M, "-tp", "8", "--attention-backend", "flashmla"],  # case-insensitive
    [M, "-tp", "8", "--attention-backend", "auto", "--block-size", "16"],
]

VLLM_GOOD_B200 = [
    [M, "-tp", "8", "--attention-backend", "FLASHINFER_MLA", "--block-size", "32"],
    [M, "-tp", "8", "--attention-backend", "FLASHINFER_MLA", "--block-size", "64"],
    [M, "-tp", "8", "--attention-backend", "FLASHINFER_MLA", "--block-size", "128", "--kv-cache-dtype", "fp8_e4m3"],
    [M, "-tp", "8", "--attention-backend", "CUTLASS_MLA", "--block-size", "128"],
    [M, "-tp", "8", "--attention-backend", "TRITON_MLA", "--block-size", "16"],
    [M, "-tp", "8", "--attention-backend", "TOKENSPEED_MLA", "--kv-cache-dtype", "fp8"],
    [M, "-tp", "8", "--block-size", "16"],  # auto-selection falls back to TRITON_MLA
    [M, "-tp", "8", "-dp", "8", "--enable-expert-parallel", "--max-num-batched-tokens", "16384"],
]


@pytest.mark.parametrize("argv", VLLM_GOOD_H200, ids=lambda a: " ".join(a[1:])[:60])
def test_vllm_known_good_h200(argv):
    ok(argv, "vllm", "sm90", model_max_len=DSV3_MAX_LEN)


@pytest.mark.parametrize("argv", VLLM_GOOD_B200, ids=lambda a: " ".join(a[1:])[:60])
def test_vllm_known_good_b200(argv):
    ok(argv, "vllm", "sm100", model_max_len=DSV3_MAX_LEN)


def test_vllm_triton_mla_any_arch():
    for arch in ("sm80", "sm89", "sm90", "sm100", "sm120"):
        ok([M, "--attention-backend", "TRITON_MLA", "--block-size", "16"], "vllm", arch)


def test_vllm_good_without_gpu_arch():
    ok([M, "-tp", "8", "--attention-backend", "CUTLASS_MLA", "--block-size", "256"], "vllm")


# ---------------------------------------------------------------------------
# vLLM: verified rejections (vLLM 0.33.0's own messages)
# ---------------------------------------------------------------------------


def test_vllm_rejects_unrecognized_argument():
    bad([M, "--tensor-parallel-sizes", "8"], "vllm", pattern="unrecognized arguments: --tensor-parallel-sizes")


def test_vllm_rejects_invalid_int():
    bad([M, "--max-num-seqs", "many"], "vllm", pattern="invalid int value: 'many'")


def test_vllm_rejects_flashmla_block_16():
    bad([M, "--block-size", "16", "--attention-backend", "FLASHMLA"], "vllm", "sm90",
        pattern=r"FLASHMLA.*block_size not supported")
    # also without a GPU given: the block size alone is enough
    bad([M, "--block-size", "16", "--attention-backend", "FLASHMLA"], "vllm", pattern="block_size not supported")


@pytest.mark.parametrize("backend", ["FLASHINFER_MLA", "CUTLASS_MLA"])
def test_vllm_rejects_blackwell_backends_on_h200(backend):
    bad([M, "--attention-backend", backend], "vllm", "sm90", pattern="compute capability not supported")


@pytest.mark.parametrize("backend", ["FLASHMLA", "FLASH_ATTN_MLA"])
def test_vllm_rejects_hopper_backends_on_b200(backend):
    bad([M, "--attention-backend", backend], "vllm", "sm100",
        pattern="compute capability not supported|FlashMLA Dense is only supported on Hopper")


def test_vllm_flashmla_dense_message_on_b200():
    bad([M, "--attention-backend", "FLASHMLA"], "vllm", "sm100", pattern="FlashMLA Dense is only supported on Hopper")


def test_vllm_rejects_bad_kv_cache_dtype():
    bad([M, "--kv-cache-dtype", "fp9"], "vllm", pattern=r"Invalid kv_cache_dtype: 'fp9'")


def test_vllm_rejects_tp_not_divisible_by_dcp():
    bad([M, "-tp", "8", "-dcp", "3"], "vllm", pattern=r"tp_size=8 must be divisible by dcp_size=3")


def test_vllm_rejects_small_batched_tokens_without_chunked_prefill():
    bad([M, "--max-model-len", "32768", "--max-num-batched-tokens", "4096", "--disable-chunked-prefill"], "vllm",
        pattern=r"max_num_batched_tokens \(4096\) is smaller than max_model_len \(32768\)")
    # the model max is used when --max-model-len is not given
    bad([M, "--max-num-batched-tokens", "8192", "--no-enable-chunked-prefill"], "vllm",
        model_max_len=DSV3_MAX_LEN, pattern="smaller than max_model_len")
    ok([M, "--max-num-batched-tokens", "4096", "--max-model-len", "32768"], "vllm")  # chunked prefill on


def test_vllm_rejects_max_model_len_above_model_max():
    bad([M, "--max-model-len", "200000"], "vllm", model_max_len=DSV3_MAX_LEN,
        pattern=r"max_model_len \(200000\) is greater than the derived max_model_len \(163840\)")
    ok([M, "--max-model-len", "200000"], "vllm", model_max_len=DSV3_MAX_LEN, allow_long_max_model_len=True)
    ok([M, "--max-model-len", "160k"], "vllm", model_max_len=DSV3_MAX_LEN)  # 160000


def test_vllm_rejects_inconsistent_cudagraph_sizes():
    bad([M, "--max-cudagraph-capture-size", "512", "--cudagraph-capture-sizes", "1", "2", "4", "8"], "vllm",
        pattern=r"max_cudagraph_capture_size\(=512\) should be consistent")
    # not checked when CUDA graphs are off
    ok([M, "--max-cudagraph-capture-size", "512", "--cudagraph-capture-sizes", "1", "2", "--enforce-eager"], "vllm")


# ---------------------------------------------------------------------------
# vLLM: other rules from the brief
# ---------------------------------------------------------------------------


def test_vllm_headless_with_api_server_count():
    bad([M, "--headless", "--api-server-count", "2"], "vllm", pattern="cannot be used with --headless")
    bad([M, "--headless", "-asc", "1"], "vllm", pattern="cannot be used with --headless")


@pytest.mark.parametrize("combo", [
    ["--data-parallel-hybrid-lb", "--data-parallel-external-lb"],
    ["--data-parallel-hybrid-lb", "--data-parallel-rank", "0"],
    ["--data-parallel-multi-port-external-lb", "--data-parallel-external-lb"],
    ["--data-parallel-start-rank", "8", "--data-parallel-rank", "8"],
])
def test_vllm_only_one_dp_lb_mode(combo):
    bad([M, "-dp", "16", *combo], "vllm", pattern="more than one data parallel load balancing mode")


def test_vllm_world_size_vs_gpus_per_node():
    # vllm/config/parallel.py (0.33.0): without --nnodes (or Ray) world size > GPUs on the node is rejected
    bad([M, "-tp", "16"], "vllm", "sm90", gpus_per_node=8,
        pattern=r"World size \(16\) is larger than the number of available GPUs \(8\)")
    bad([M, "-tp", "8", "-pp", "2"], "vllm", gpus_per_node=8, pattern="World size")
    ok([M, "-tp", "16", "--nnodes", "2", "--node-rank", "0", "--master-addr", HEAD], "vllm", gpus_per_node=8)
    ok([M, "-tp", "8", "-pp", "2", "--distributed-executor-backend", "ray"], "vllm", gpus_per_node=8)
    ok([M, "-tp", "8", "-dp", "2"], "vllm", gpus_per_node=8)  # the check is per DP rank


def test_vllm_dp_launch_rules():
    bad([M, "-tp", "8", "--nnodes", "2", "--data-parallel-backend", "ray"], "vllm", pattern="requires --data-parallel-backend mp")
    bad([M, "-tp", "8", "--nnodes", "3"], "vllm", pattern=r"must evenly divide the total world size \(8\)")
    bad([M, "-tp", "8", "--nnodes", "2", "--node-rank", "2"], "vllm", pattern="--node-rank must be between 0 and 1")
    bad([M, "-dp", "16", "--data-parallel-external-lb"], "vllm", pattern="requires a data-parallel rank")
    bad([M, "-dp", "16", "--data-parallel-rank", "0", "-dpl", "8"], "vllm", pattern="--data-parallel-size-local 1")
    bad([M, "-dp", "16", "--data-parallel-hybrid-lb"], "vllm", pattern="requires --data-parallel-size-local")
    bad([M, "-dp", "16", "-dpl", "8", "--data-parallel-hybrid-lb", "--headless"], "vllm",
        pattern="not applicable in headless mode")


def test_vllm_backend_block_size_rules():
    fam = [
        ("FLASHMLA", "sm90", [64, 128, 192], [16, 32, 48]),
        ("FLASH_ATTN_MLA", "sm90", [16, 32, 48, 64], [8, 24]),
        ("TRITON_MLA", "sm80", [16, 48, 64], [8, 20]),
        ("FLASHINFER_MLA", "sm100", [32, 64, 96, 128], [16, 48]),
        ("CUTLASS_MLA", "sm100", [128, 256], [16, 32, 64]),
    ]
    for backend, arch, good_sizes, bad_sizes in fam:
        for b in good_sizes:
            ok([M, "--attention-backend", backend, "--block-size", str(b)], "vllm", arch)
        for b in bad_sizes:
            bad([M, "--attention-backend", backend, "--block-size", str(b)], "vllm", arch,
                pattern="block_size not supported")


def test_vllm_backend_kv_dtype_and_family():
    # FLASH_ATTN_MLA has no fp8 KV cache support in 0.33.0
    bad([M, "--attention-backend", "FLASH_ATTN_MLA", "--kv-cache-dtype", "fp8"], "vllm", "sm90",
        pattern="kv_cache_dtype not supported")
    bad([M, "--attention-backend", "TOKENSPEED_MLA"], "vllm", "sm100", pattern="kv_cache_dtype not supported")
    bad([M, "--attention-backend", "FLASH_ATTN"], "vllm", "sm90", pattern="MLA not supported")
    bad([M, "--attention-backend", "NOT_A_BACKEND"], "vllm", pattern="unknown attention backend")
    bad([M, "--attention-backend", "FLASHMLA_SPARSE"], "vllm", "sm90", sparse_attention=False,
        pattern="non-sparse not supported")
    bad([M, "--attention-backend", "ROCM_AITER_MLA"], "vllm", "sm90", pattern="not a CUDA backend")
    # -ac JSON is read as well
    bad([M, "-ac", '{"backend": "CUTLASS_MLA"}'], "vllm", "sm90", pattern="compute capability")


def test_vllm_auto_selection_without_valid_backend():
    # sm90: no dense MLA backend takes block size 8
    bad([M, "--block-size", "8"], "vllm", "sm90", pattern="no valid MLA attention backend")


def test_vllm_bounds():
    bad([M, "--gpu-memory-utilization", "1.5"], "vllm", pattern="less than or equal to 1")
    bad([M, "--block-size", "0"], "vllm", pattern="greater than 0")
    bad([M, "-tp", "0"], "vllm", pattern="greater than or equal to 1")


def test_vllm_batched_tokens_vs_num_seqs():
    bad([M, "--max-num-batched-tokens", "128", "--max-num-seqs", "256"], "vllm",
        pattern=r"must be greater than or equal to max_num_seqs")


# ---------------------------------------------------------------------------
# vLLM: parser behaviour
# ---------------------------------------------------------------------------


def test_vllm_missing_model():
    bad(["-tp", "8"], "vllm", pattern="no model given")
    bad([], "vllm", pattern="no model given")
    ok(["--model", M, "-tp", "8"], "vllm")  # moved to the positional by FlexibleArgumentParser
    ok(["-tp", "8", f"--model={M}"], "vllm")
    ok(["-tp", "8", M], "vllm")  # argparse also takes a later positional
    bad(["-tp", "8", "--served-model-name", "x"], "vllm", pattern="first positional argument")


def test_vllm_extra_positional():
    bad([M, "other-model"], "vllm", pattern="unrecognized arguments: other-model")


def test_vllm_missing_value():
    bad([M, "--max-num-seqs"], "vllm", pattern="expected one argument")
    bad([M, "-tp", "--enforce-eager"], "vllm", pattern="expected one argument")
    bad([M, "--cudagraph-capture-sizes"], "vllm", pattern="expected at least one argument")


def test_vllm_value_forms_and_types():
    ok([M, "--max-num-seqs=64", "--gpu-memory-utilization=0.9"], "vllm")
    bad([M, "--gpu-memory-utilization", "high"], "vllm", pattern="invalid float value")
    bad([M, "--max-num-batched-tokens", "16q"], "vllm", pattern="invalid human-readable int value")
    bad([M, "--max-num-batched-tokens", "1.5K"], "vllm", pattern="invalid human-readable int value")
    ok([M, "--max-num-batched-tokens", "16K", "--max-model-len", "32k"], "vllm")
    bad([M, "--speculative-config", "{not json"], "vllm", pattern="invalid JSON value")
    bad([M, "--dtype", "fp7"], "vllm", pattern="invalid choice: 'fp7'")
    bad([M, "--enforce-eager=true"], "vllm", pattern="ignored explicit argument")
    ok([M, "--max_model_len", "4096", "--enable_expert_parallel"], "vllm")  # underscores accepted
    ok([M, "--moe-backend", "DEEP-GEMM"], "vllm")  # normalised before the choices check


def test_vllm_prefix_abbreviation():
    ok([M, "--tensor-parallel", "8"], "vllm")  # unique prefix of --tensor-parallel-size
    bad([M, "--data-parallel", "2"], "vllm", pattern="ambiguous option: --data-parallel could match")
    bad([M, "-d", "2"], "vllm", pattern="ambiguous option")
    ok([M, "-tp", "8", "-n2", "-r0"], "vllm")  # one-letter short options take attached values


# ---------------------------------------------------------------------------
# SGLang: known-good commands (SGLang 0.5.23 recipes)
# ---------------------------------------------------------------------------

SGL_GOOD_H200 = [
    ["--model-path", M, "--tp", "16", "--dist-init-addr", f"{HEAD}:5000", "--nnodes", "2", "--node-rank", "0",
     "--trust-remote-code", "--host", "0.0.0.0", "--port", "30000"],
    ["--model-path", M, "--tp", "16", "--dist-init-addr", f"{HEAD}:5000", "--nnodes", "2", "--node-rank", "1",
     "--trust-remote-code"],
    ["--model-path", M, "--tp", "16", "--attn-dp-size", "16", "--ep-size", "16", "--moe-a2a-backend", "deepep",
     "--deepep-mode", "low_latency", "--dist-init-addr", f"{HEAD}:5000", "--nnodes", "2", "--node-rank", "0"],
    ["--model-path", M, "--tp", "16", "--enable-dp-attention", "--dp", "16", "--ep", "16",
     "--moe-a2a-backend", "deepep", "--deepep-mode", "auto"],
    ["--model-path", M, "--tp", "8", "--pp-size", "2", "--nnodes", "2", "--node-rank", "0",
     "--dist-init-addr", f"{HEAD}:5000"],
    ["--model", M, "--tp-size", "8", "--dp-size", "2"],
    ["--model-path", M, "--tensor-parallel-size", "8", "--attention-backend", "fa3", "--page-size", "1"],
    ["--model-path", M, "--tp", "8", "--attention-backend", "flashmla", "--page-size", "64", "--kv-cache-dtype", "fp8_e4m3"],
    ["--model-path", M, "--tp", "8", "--attention-backend", "triton"],
    ["--model-path", M, "--tp", "8", "--attention-backend", "flashinfer", "--mem-fraction-static", "0.88",
     "--chunked-prefill-size", "8192", "--max-prefill-tokens", "16384", "--context-length", "32k",
     "--schedule-policy", "lpm", "--max-running-requests", "256", "--disable-radix-cache"],
    ["--model-path", M, "--tp", "8", "--cuda-graph-max-bs-decode", "256", "--cuda-graph-bs-decode", "1", "2", "4", "8",
     "--cuda-graph-backend-prefill", "disabled", "--disable-cuda-graph-padding", "--enable-torch-compile"],
    ["--model-path", M, "--tp", "8", "--disable-cuda-graph"],
    ["--model-path", M, "--tp", "8", "--enable-hicache", "--enable-two-batch-overlap", "--disaggregation-mode", "decode"],
    ["--model-path", M, "--tp", "8", "--dcp-size", "8", "--attn-cp-size", "1", "--enable-eplb",
     "--ep-num-redundant-experts", "32"],
]

SGL_GOOD_B200 = [
    ["--model-path", M, "--tp", "8", "--attention-backend", "trtllm_mla", "--page-size", "64", "--kv-cache-dtype", "fp8_e4m3"],
    ["--model-path", M, "--tp", "8", "--attention-backend", "trtllm_mla", "--page-size", "32", "--kv-cache-dtype", "bf16"],
    ["--model-path", M, "--tp", "8", "--decode-attention-backend", "cutedsl_mla", "--prefill-attention-backend", "trtllm_mla"],
    ["--model-path", M, "--tp", "8", "--attention-backend", "cutedsl_mla", "--kv-cache-dtype", "fp8_e4m3"],
    ["--model-path", M, "--tp", "8", "--attention-backend", "tokenspeed_mla"],  # deprecated alias
    ["--model-path", M, "--tp", "8", "--attention-backend", "flashmla"],
    ["--model-path", M, "--tp", "8", "--attention-backend", "fa4"],
    ["--model-path", M, "--tp", "8", "--moe-runner-backend", "flashinfer_trtllm", "--attn-dp-size", "8"],
]


@pytest.mark.parametrize("argv", SGL_GOOD_H200, ids=lambda a: " ".join(a[2:])[:60])
def test_sglang_known_good_h200(argv):
    ok(argv, "sglang", "sm90")


@pytest.mark.parametrize("argv", SGL_GOOD_B200, ids=lambda a: " ".join(a[2:])[:60])
def test_sglang_known_good_b200(argv):
    ok(argv, "sglang", "sm100")


# ---------------------------------------------------------------------------
# SGLang: verified rejections (SGLang 0.5.23's own messages)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["cutlass_mla", "flashmla2"])
def test_sglang_rejects_invalid_backend_choice(backend):
    bad(["--model-path", M, "--attention-backend", backend], "sglang", pattern=f"invalid choice: '{backend}'")


def test_sglang_rejects_ambiguous_cuda_graph_max_bs():
    bad(["--model-path", M, "--cuda-graph-max-bs", "256"], "sglang",
        pattern="ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")


def test_sglang_rejects_tp_not_divisible_by_attn_dp():
    bad(["--model-path", M, "--tp", "8", "--dp", "3", "--enable-dp-attention"], "sglang",
        pattern=r"tp_size % attn_dp_size == 0")
    bad(["--model-path", M, "--tp", "8", "--attn-dp-size", "3"], "sglang", pattern="divisible by attn_dp_size")


def test_sglang_rejects_dp_with_attn_dp():
    bad(["--model-path", M, "--dp", "8", "--attn-dp-size", "8"], "sglang",
        pattern="data-parallel replicas combined with attention data parallelism are not supported")


@pytest.mark.parametrize("backend", ["trtllm_mla", "cutedsl_mla"])
def test_sglang_rejects_blackwell_backends_on_hopper(backend):
    bad(["--model-path", M, "--attention-backend", backend], "sglang", "sm90", pattern="only supported on Blackwell")


def test_sglang_rejects_trtllm_mla_fp8_e5m2():
    bad(["--model-path", M, "--attention-backend", "trtllm_mla", "--kv-cache-dtype", "fp8_e5m2"], "sglang", "sm100",
        pattern="only supports kv-cache-dtype of fp8_e4m3")


# ---------------------------------------------------------------------------
# SGLang: other rules / parser behaviour
# ---------------------------------------------------------------------------


def test_sglang_cutedsl_rules():
    bad(["--model-path", M, "--attention-backend", "cutedsl_mla"], "sglang", "sm120", pattern="SM100")
    bad(["--model-path", M, "--prefill-attention-backend", "cutedsl_mla"], "sglang", "sm100",
        pattern="only supports decoding")
    bad(["--model-path", M, "--attention-backend", "cutedsl_mla", "--kv-cache-dtype", "fp8_e5m2"], "sglang", "sm100",
        pattern="kv-cache-dtype")
    ok(["--model-path", M, "--attention-backend", "trtllm_mla"], "sglang", "sm120")  # SM12x is Blackwell too


def test_sglang_fa3_mla_needs_hopper():
    bad(["--model-path", M, "--attention-backend", "fa3"], "sglang", "sm100", pattern="FlashAttention v3")
    bad(["--model-path", M, "--attention-backend", "fa3"], "sglang", "sm80", pattern="FlashAttention v3")


def test_sglang_page_size_overrides():
    argv = ["--model-path", M, "--attention-backend", "trtllm_mla", "--page-size", "16"]
    bad(argv, "sglang", "sm100", pattern=r"^\[override\].*changed to 64")
    ok(argv, "sglang", "sm100", include_overrides=False)
    bad(["--model-path", M, "--attention-backend", "flashmla", "--page-size", "1"], "sglang", pattern=r"^\[override\]")


def test_sglang_prefix_resolution():
    # --tp resolves uniquely to --tp-size (checked through the attn-dp rule)
    bad(["--model-path", M, "--tp", "6", "--attn-dp-size", "4"], "sglang", pattern="tp_size 6")
    ok(["--model-path", M, "--tp=8", "--dp=2"], "sglang")
    # --pp is ambiguous in 0.5.23 (--pp-size, --pp-async-batch-depth, --pp-max-micro-batch-size)
    bad(["--model-path", M, "--pp", "2"], "sglang", pattern="ambiguous option: --pp")
    bad(["--model-path", M, "--cuda-graph-max-bs=256"], "sglang", pattern="ambiguous option")


def test_sglang_enable_dp_attention_with_dp_is_accepted():
    ok(["--model-path", M, "--tp", "8", "--enable-dp-attention", "--dp", "8"], "sglang")
    ok(["--model-path", M, "--tp", "8", "--dp-size", "8", "--enable-dp-attention"], "sglang")


def test_sglang_parser_errors():
    bad(["--tp", "8"], "sglang", pattern="required: --model-path")
    bad(["--model-path", M, "--tp-sizes", "8"], "sglang", pattern="unrecognized arguments")
    bad(["--model-path", M, "--tp-size"], "sglang", pattern="expected one argument")
    bad(["--model-path", M, "--tp-size", "eight"], "sglang", pattern="invalid int value")
    bad(["--model-path", M, "--mem-fraction-static", "most"], "sglang", pattern="invalid float value")
    bad(["--model-path", M, "--kv-cache-dtype", "fp8"], "sglang", pattern="invalid choice: 'fp8'")
    bad(["--model-path", M, "--trust-remote-code=yes"], "sglang", pattern="ignored explicit argument")
    bad([M, "--tp", "8"], "sglang", pattern="unrecognized arguments")  # no positional model in SGLang
    ok(["--model-path", M, "--context-length", "128Ki"], "sglang")
    bad(["--model-path", M, "--context-length", "128K"], "sglang", pattern="invalid human-readable int")


def test_invalid_arguments():
    with pytest.raises(ValueError):
        check_command([M], "tgi")
    with pytest.raises(ValueError):
        check_command([M], "vllm", "hopper")


# ---------------------------------------------------------------------------
# The argparse emulation agrees with the standard library's argparse
# (CPython 3.11, the version the SGLang 0.5.23 wheel is built for) when the
# parser is rebuilt from the fixture.
# ---------------------------------------------------------------------------


def _stdlib_parser(engine):
    import argparse

    import engine_check as ec

    class P(argparse.ArgumentParser):
        def error(self, message):
            raise ValueError(message)

    fx = load_fixture(engine)
    p = P(prog=fx["program"], add_help=False)
    for pos in fx["positionals"]:
        p.add_argument(pos["name"], nargs=pos["nargs"])
    for key, spec in fx["flags"].items():
        opts = [key, *spec.get("aliases", [])]
        dest = spec.get("dest", key.lstrip("-").replace("-", "_"))
        if not spec["takes_value"]:
            p.add_argument(*opts, dest=dest, action="store_const", const=True)
            if spec.get("negated"):
                p.add_argument(*spec["negated"], dest=dest, action="store_const", const=False)
            continue

        def conv(raw, spec=spec, key=key):
            try:
                return ec._convert(spec, key, raw)
            except ec._ParseError as e:
                raise argparse.ArgumentTypeError(str(e))

        kw = {"dest": dest, "type": conv}
        if spec.get("nargs") is not None:
            kw["nargs"] = spec["nargs"]
            if spec["nargs"] == "?":
                kw["const"] = True
        if spec.get("action") == "append":
            kw["action"] = "append"
        if spec.get("required"):
            kw["required"] = True
        p.add_argument(*opts, **kw)
    return p


_PARSER_CASES = {
    "vllm": [
        [M, "-tp", "8"], [M, "-tp"], [M, "-tp", "x"], [M, "--tensor-parallel", "8"], [M, "--data-parallel", "2"],
        [M, "-d", "2"], [M, "-n2"], [M, "-tp8"], [M, "--cudagraph-capture-sizes", "1", "2", "4"],
        [M, "--cudagraph-capture-sizes"], [M, "--cudagraph-capture-sizes=8"], [M, "--max-model-len", "-1"],
        [M, "--max-model-len=16k"], [M, "--enforce-eager", "x"], [M, "--enforce-eager=1"], [M, "--hf-token"],
        [M, "--hf-token", "abc"], [M, "--disable-prefix-caching"], [M, "--no-enable-prefix-caching"],
        [M, "--enable-prefix"], [M, "--max-num", "3"], [M, "--max-num-s", "3"], ["-tp", "8", M], [M, "x"],
        [M, "--middleware", "a", "--middleware", "b"], [M, "--dtype", "half"], [M, "--dtype", "fp4"],
        [M, "--kv-cache-dtype", "fp8"], [M, "-asc", "2", "--headless"], [M, "--port", "-1"], [M, "--", "x"],
        [M, "-q", "fp8"], [M, "-qfp8"], [M, "--gpu-memory-utilization", ".9"], [M, "-dp", "2", "-dpl=1"],
    ],
    "sglang": [
        ["--model-path", M], ["--model", M], ["--mod", M], ["--tp", "8", "--model-path", M],
        ["--model-path", M, "--tp", "8", "--dp", "2"], ["--model-path", M, "--pp", "2"],
        ["--model-path", M, "--cuda-graph-max-bs", "8"], ["--model-path", M, "--cuda-graph-max-bs-d", "8"],
        ["--model-path", M, "--ep", "8"], ["--model-path", M, "--e", "8"], ["--model-path", M, "--attention-backend", "fa3"],
        ["--model-path", M, "--attention-backend=cutlass_mla"], ["--model-path", M, "--enable-dp-attention", "--dp", "8"],
        ["--model-path", M, "--lora-paths"], ["--model-path", M, "--lora-paths", "a", "b"],
        ["--model-path", M, "--cuda-graph-bs-decode", "1", "2"], ["--model-path", M, "--context-length", "4k"],
        ["--model-path", M, "--dcp-replicate-q-proj"], ["--model-path", M, "--no-dcp-replicate-q-proj"],
        ["--model-path", M, "--trust-remote-code", "1"], ["--tp", "8"], [M], ["--model-path"],
        ["--model-path", M, "--page-size", "1.5"], ["--model-path", M, "--monokernel-backend", "amd"],
    ],
}


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="argparse abbreviation rules differ between versions")
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_parser_agrees_with_stdlib_argparse(engine):
    import engine_check as ec

    parser = _stdlib_parser(engine)
    for argv in _PARSER_CASES[engine]:
        args = ec._vllm_preprocess(argv, []) if engine == "vllm" else list(argv)
        try:
            ns = parser.parse_args(args)
            std_error = None
        except ValueError as e:
            std_error = str(e)
        try:
            values, given, positionals, _ = ec._parse(args, engine)
            our_error = None
        except ec._ParseError as e:
            our_error = str(e)
        assert (std_error is None) == (our_error is None), (argv, std_error, our_error)
        if std_error is None:
            fx = load_fixture(engine)
            for key in given:
                dest = fx["flags"][key].get("dest", key.lstrip("-").replace("-", "_"))
                assert getattr(ns, dest) == values[key], (argv, key)
