"""lint's visible-device checks (audit/lint_devices.py): found by QA, a command that named half the GPUs its ranks
need, or HIP and CUDA visibility that vLLM refuses on ROCm, got "nothing to flag"."""

from __future__ import annotations

import pytest

R1_VLLM = ["vllm", "serve", "deepseek-ai/DeepSeek-R1"]
R1_SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-R1"]


@pytest.mark.parametrize("topology, env, command, words", [
    ("8xmi300x", ["VLLM_ROCM_USE_AITER=1", "HIP_VISIBLE_DEVICES=0,1,2,3", "CUDA_VISIBLE_DEVICES=4,5,6,7"],
     R1_VLLM + ["-tp", "4"], "ERROR HIP_VISIBLE_DEVICES: '0,1,2,3' and CUDA_VISIBLE_DEVICES '4,5,6,7' differ: vLLM"),
    ("8xmi300x", ["VLLM_ROCM_USE_AITER=1", "CUDA_VISIBLE_DEVICES=0,1,2,3"], R1_VLLM + ["-tp", "8"],
     "ERROR CUDA_VISIBLE_DEVICES: names 4 GPU(s), but the command needs 8 visible GPUs"),
    ("8xh200", ["CUDA_VISIBLE_DEVICES=0,1,2,3"], R1_SGLANG + ["--tp", "8"],
     "ERROR CUDA_VISIBLE_DEVICES: names 4 GPU(s), but the command needs 8 visible GPUs"),
    ("8xh200", ["CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6"], R1_SGLANG + ["--tp", "4", "--base-gpu-id", "4"],
     "names 7 GPU(s), but the command needs 8 visible GPUs"),
    ("8xmi300x", ["SGLANG_USE_AITER=1", "HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"],
     R1_SGLANG + ["--tp", "8", "--attention-backend", "aiter"], None),
    ("8xh200", ["CUDA_VISIBLE_DEVICES=0,1,2,3"], R1_VLLM + ["-tp", "4"], None),
    ("2x8xh200-ib", [], R1_VLLM + ["-tp", "8", "-dp", "2", "--enable-expert-parallel"],   # both DP ranks here
     "ERROR --data-parallel-size: 2 ranks of tp 8 x pp 1 all start on this node (16 GPU processes; it has 8)"),
    ("8xh200", [], R1_VLLM + ["-tp", "1", "-dp", "8", "--enable-expert-parallel"], None),
    ("8xh200", ["CUDA_VISIBLE_DEVICES=4,5,6,7"],            # one DP rank of an external load balancer (review)
     R1_VLLM + ["-tp", "4", "-dp", "2", "--enable-expert-parallel", "--data-parallel-rank", "1"], None),
    ("2x8xh200-ib", ["CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"], R1_VLLM + ["-tp", "16", "-n", "2", "-r", "0",
                                                                      "--master-addr", "10.0.0.1"], None),
    ("2x8xh200-ib", ["CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"],      # one node's share of a two-node group
     R1_VLLM + ["-tp", "16", "--nnodes=2", "--node-rank=0", "--master-addr", "10.0.0.1"], None),
])
def test_visible_devices_against_the_processes_a_command_starts(cli, topology, env, command, words):
    result = cli("lint", "-t", topology, "--", *env, *command)
    if words is None:
        assert "VISIBLE_DEVICES" not in result.stdout and "--data-parallel-size:" not in result.stdout, result.stdout
    else:
        assert words in result.stdout and result.exit_code == 1, result.output
