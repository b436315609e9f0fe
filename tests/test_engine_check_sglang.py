"""Tests of mla_planner/engines/parser/ (check_command) against SGLang 0.5.23: known-good commands (the engine's
recipes and flag defaults, sglang/srt/server_args.py), its verified rejections with SGLang's own messages,
and the other rules and parser behaviour. Every rejection the real parser and config code of that release
produce for the commands below must be reported.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_check_cases import HEAD, M, bad, ok  # noqa: E402


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
