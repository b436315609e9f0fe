"""`lint` as a gate (issue: "lint says nothing to flag to commands the engine refuses"): every class of command
the engines refuse, or that cannot run, exits 1 with a named reason; the commands the planner emits exit 0.

The refusals come from the engines' own parsers and start-up rules (engines/parser, read out of the vLLM
0.33.0 and SGLang 0.5.23 wheels), their environment tables, SGLang's process placement (audit/lint_nodes)
and the memory model (audit/lint_memory)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mla_planner.launch.build import build, launch_inputs  # noqa: E402
from mla_planner.search.planfile_read import read_plan  # noqa: E402
from test_launch_golden import SCENARIOS, _plan  # noqa: E402

R1_VLLM = ("vllm", "serve", "deepseek-ai/DeepSeek-R1", "-tp", "8")
R1_SGLANG = ("python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-R1", "--tp", "8")
V3_VLLM = ("vllm", "serve", "deepseek-ai/DeepSeek-V3")

REFUSED = [
    # the classes
    ("8xh200", R1_VLLM + ("--gpu-memory-utilisation", "0.9"), "engine", "did you mean --gpu-memory-utilization"),
    ("8xh200", R1_VLLM + ("--kv-cache-dtpye", "fp8"), "engine", "did you mean --kv-cache-dtype"),
    ("8xh200", R1_SGLANG + ("--mem-fraction-statc", "0.8"), "engine", "did you mean --mem-fraction-static"),
    ("8xh100", R1_VLLM, "memory", "the weights alone"),
    ("2x8xh200-ib", V3_VLLM + ("--tensor-parallel-size", "16"), "engine", "World size (16) is larger"),
    ("2x8xh200-ib", V3_VLLM + ("-tp", "8", "--nnodes", "2", "--node-rank", "5"), "engine",
     "--node-rank must be between 0 and 1"),
    ("8xh200", R1_VLLM + ("--max-num-batched-tokens", "64", "--max-num-seqs", "256"), "engine",
     "must be greater than or equal to max_num_seqs"),
    ("8xh200", ("VLLM_ATTENTION_BACKEND=FLASHMLA",) + R1_VLLM, "VLLM_ATTENTION_BACKEND", "--attention-backend"),
    # and more of the same kinds
    ("2x8xh200-ib", ("python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "16"),
     "--nnodes", "give --nnodes 2"),
    ("2x8xh200-ib", ("python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "16",
                     "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "10.0.0.1:5000"), "--node-rank", "0..1"),
    ("8xh200", R1_VLLM + ("--kv-cache-dtype", "fp9"), "engine", "Invalid kv_cache_dtype"),
    ("8xh200", R1_VLLM + ("--max-num-seqs", "many"), "engine", "invalid int value"),
    ("8xh200", R1_VLLM + ("--gpu-memory-utilization", "0.99"), "memory", "short"),
    ("8xh200", R1_VLLM + ("--max-model-len", "1000000"), "engine", "VLLM_ALLOW_LONG_MAX_MODEL_LEN"),
    ("8xh200", R1_SGLANG + ("--attention-backend", "flashmla2"), "engine", "invalid choice"),
    ("8xh200", ("SGLANG_ENABLE_TURBO=1",) + R1_SGLANG, "SGLANG_ENABLE_TURBO", "no code in the SGLang wheel"),
    ("8xh200", ("VLLM_USE_DEEP_GEM=1",) + R1_VLLM, "VLLM_USE_DEEP_GEM", "VLLM_USE_DEEP_GEMM"),
]


def lint(cli, topology, words, model=None):
    r = cli("lint", "-t", topology, "--json", *(["-m", model] if model else []), "--", *words)
    return r.exit_code, json.loads(r.stdout)


@pytest.mark.parametrize("topology, words, flag, text", REFUSED, ids=[" ".join(w[3:7]) for _, w, _, _ in REFUSED])
def test_each_class_is_refused_with_a_named_reason(cli, topology, words, flag, text):
    code, out = lint(cli, topology, words)
    errors = [f for f in out["findings"] if f["level"] == "error"]
    assert code == 1 and not out["ok"]
    assert any(f["flag"] == flag and text in f["text"] for f in errors), errors


def test_the_same_commands_done_right_pass(cli):
    """The refused commands above, corrected: nothing is wrong, exit 0."""
    assert lint(cli, "8xh200", R1_VLLM + ("--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8"))[0] == 0
    assert lint(cli, "8xh200", R1_SGLANG + ("--mem-fraction-static", "0.8"))[0] == 0
    assert lint(cli, "8xh200", ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",) + R1_VLLM + ("--max-model-len", "200000"))[0] == 0
    assert lint(cli, "8xh200", R1_VLLM + ("--attention-backend", "FLASHMLA"))[0] == 0
    assert lint(cli, "8xh200", ("VLLM_USE_DEEP_GEMM=1",) + R1_VLLM)[0] == 0


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_golden_plans_commands_lint_clean(cli, name):
    case = SCENARIOS[name]
    plan = _plan(case)
    commands = [c for c in build(launch_inputs(plan, plan.candidates[0], case.get("mode", "native")), case["engine"])
                if c.runs_engine]
    assert commands
    for c in commands:
        words = [f"{k}={v}" for k, v in c.env.items()] + [str(w) for w in c.argv]
        code, out = lint(cli, case["topology"], words, model="deepseek-v3")
        assert (code, out["findings"]) == (0, []), words


@pytest.mark.parametrize("images", [False, True])
def test_the_kimi_k25_commands_lint_clean_text_only_and_with_images(cli, tmp_path, images):
    r = cli("plan", "-m", "kimi-k2.5", "-t", "8xh200", "-e", "vllm", "--json", "--top", "1", *(["--images"] * images))
    (tmp_path / "plan.json").write_text(r.stdout)
    plan = read_plan(tmp_path / "plan.json")
    for c in build(launch_inputs(plan, plan.candidates[0], "native"), "vllm"):
        if c.runs_engine:
            code, out = lint(cli, "8xh200", [f"{k}={v}" for k, v in c.env.items()] + [str(w) for w in c.argv])
            assert (code, out["findings"]) == (0, []), c.argv


def test_a_switch_before_the_model_leaves_the_model_in_place(cli):
    """Which flags take a value is the engine's own table's answer: `--async-scheduling` is a switch, so the word
    after it is vLLM's positional model (a hand-kept list took it as the flag's value)."""
    for switch in ("--async-scheduling", "--enable-auto-tool-choice"):
        code, out = lint(cli, "8xh200", ["vllm", "serve", switch, "deepseek-ai/DeepSeek-R1", "-tp", "8"])
        assert code == 0 and out["model"] == "deepseek-r1"
    code, out = lint(cli, "8xh200", ["vllm", "serve", "deepseek-ai/DeepSeek-R1", "--cudagraph-capture-sizes", "1",
                                     "2", "4", "-tp", "8"])
    assert code == 0 and out["findings"] == []


def test_a_pixtral_encoder_vllm_builds_is_priced_and_the_hint_fits_the_model(cli):
    """Mistral Large 3's encoder (2.57B bf16) is on every GPU unless --language-model-only: lint's memory check
    counts it, and does not suggest `plan --images`, which does not model Pixtral's image path."""
    words = ["vllm", "serve", "mistralai/Mistral-Large-3-675B-Instruct-2512", "-tp", "8", "--max-model-len", "32768",
             "--tokenizer-mode", "mistral", "--config-format", "mistral", "--load-format", "mistral"]
    _, with_encoder = lint(cli, "8xh200", words + ["--gpu-memory-utilization", "0.85"])
    warn = next(f for f in with_encoder["findings"] if f["flag"] == "--language-model-only")
    assert "plan --images" not in warn["text"] and "priced above" in warn["text"]
    assert lint(cli, "8xh200", words + ["--language-model-only", "--gpu-memory-utilization", "0.85"])[1]["findings"] == []
