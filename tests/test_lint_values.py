"""Bad values in the linted command are findings (exit 1), never lint's own bad-input status or a traceback. Found by
QA: `-tp nan` exited 2 as if lint's own input were wrong, and a parallel size of 0 (`--attn-dp-size 0`, vLLM's
`-tp 0`, `-dp 0`) ended in ZeroDivisionError."""

from __future__ import annotations

import pytest

VLLM = ["vllm", "serve", "deepseek-ai/DeepSeek-V3"]
SGLANG = ["python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3"]


@pytest.mark.parametrize("command", [VLLM + ["-tp", "nan"], VLLM + ["-tp", "0"], VLLM + ["-dp", "0"],
                                     VLLM + ["-pp", "0"], VLLM + ["-tp", "8", "-dcp", "0"], VLLM + ["-tp", "-8"],
                                     SGLANG + ["--tp", "abc"], SGLANG + ["--tp", "0"],
                                     SGLANG + ["--tp", "8", "--attn-dp-size", "0"]])
def test_a_bad_parallel_size_is_a_finding(cli, command):
    result = cli("lint", "--", *command)
    assert result.exit_code == 1, result.output
    assert "ERROR" in result.stdout and "Traceback" not in result.output and result.stderr == ""


@pytest.mark.parametrize("command, words", [
    (VLLM + ["-tp", "8", "--gpu-memory-utilization", "0.6", "--max-model-len", "8k"], "nothing to flag"),
    (VLLM + ["-tp", "8", "--gpu-memory-utilization", "0.6", "--max-model-len", "10M"], "--max-model-len 10,485,760"),
    (SGLANG + ["--tp", "8", "--mem-fraction-static", "1.5"], "1.5: not a fraction in (0, 1]"),
    (SGLANG + ["--tp", "8", "--mem-fraction-static", "0"], "0: not a fraction in (0, 1]"),
    (VLLM + ["-tp", "8", "--block-size", "abc"], "invalid int value: 'abc'")])
def test_values_as_the_engines_read_them(cli, command, words):
    """Found by QA: `--max-model-len 8k` was priced at the model's 163,840 (a false error; 10M a false pass),
    SGLang's fraction 0, 1.5 or nan said nothing, and a block size 'abc' exited 2."""
    env = ["VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"] if command[0] == "vllm" else []
    result = cli("lint", "-t", "8xh200", "--", *env, *command)
    assert words in result.stdout and "Traceback" not in result.output, result.output
    assert result.exit_code == (0 if words == "nothing to flag" else 1)


@pytest.mark.parametrize("env, level", [([], "ERROR"), (["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"], "WARN ")])
def test_a_context_past_the_models_is_what_sglang_makes_of_it(cli, env, level):
    """SGLang refuses a --context-length above the model's unless its override variable is set, then warns."""
    result = cli("lint", "-t", "8xh200", "--", *env, *SGLANG, "--tp", "8", "--context-length", "200000")
    assert f"{level} --context-length: 200,000 tokens is above" in result.stdout


def test_a_base_gpu_id_past_the_node_is_told_to_come_down(cli):
    result = cli("lint", "-t", "8xh200", "--", *SGLANG, "--tp", "8", "--base-gpu-id", "4")
    assert "ERROR --base-gpu-id:" in result.stdout and "lower --base-gpu-id to at most 0" in result.stdout


@pytest.mark.parametrize("command", [["vllm", "deepseek-ai/DeepSeek-V3", "-tp", "8"],
                                     ["vllm", "bench", "serve", "--model", "deepseek-ai/DeepSeek-V3"],
                                     ["python3", "-m", "sglang.bench_serving", "--backend", "sglang"]])
def test_a_command_that_is_not_a_server_launch_is_one_error_line(cli, command):
    """Found by QA: `vllm MODEL` (no serve) passed, and benchmark commands were linted as servers."""
    result = cli("lint", "--", *command)
    assert result.exit_code == 2 and "is not a server launch" in result.stderr and result.stderr.count("\n") == 1


def test_an_sglang_pool_shorter_than_its_context_is_a_warning(cli):
    """SGLang starts with such a pool and caps each request (managers/tp_worker.py): lint said ERROR and named
    vLLM's --max-model-len."""
    result = cli("lint", "-t", "8xh200", "--", *SGLANG, "--tp", "8", "--mem-fraction-static", "0.62")
    assert result.exit_code == 0 and "WARN  memory: at --mem-fraction-static 0.620" in result.stdout
    assert "--context-length 163,840" in result.stdout and "--max-model-len" not in result.stdout
