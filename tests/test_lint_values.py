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
