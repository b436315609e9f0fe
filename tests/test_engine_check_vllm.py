"""Tests of mla_planner/engines/parser/ (check_command) against vLLM 0.33.0: known-good commands (the engine's
multi-node recipes and flag defaults, vllm/engine/arg_utils.py), its verified rejections with vLLM's own
messages, and the other cross-flag rules. Every rejection the real parser and config code of that release
produce for the commands below must be reported.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_check_cases import DSV3_MAX_LEN, HEAD, M, bad, ok  # noqa: E402


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
