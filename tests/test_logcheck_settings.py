"""check-log --plan holds the settings an engine logged against the launched candidate (audit/logcheck_settings.py):
another layout fails, another sizing knob warns, and SGLang's resolved values are read as SGLang resolves them
(its --tp-size spans the attention-DP ranks, 0.5.23's attn_dp_size, the aiter reserve's 0.85 on ROCm)."""

import json
import shlex

import pytest

from mla_planner.audit.logcheck_read import read_log


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    from click.testing import CliRunner

    from mla_planner.cli.app import app
    folder = tmp_path_factory.mktemp("plans")
    runs = {"sglang-dp": ["-m", "deepseek-r1", "-t", "8xh200", "-e", "sglang", "-l", "tp=1,dp=8,ep=8"],
            "sglang-mi355x": ["-m", "deepseek-r1", "-t", "8xmi355x", "-e", "sglang", "--input-len", "16384"],
            "vllm-tp8": ["-m", "deepseek-v3", "-t", "8xh200", "-e", "vllm", "-l", "tp=8"]}
    out = {}
    for name, args in runs.items():
        r = CliRunner().invoke(app, ["plan", *args, "--json"])
        assert r.exit_code == 0, r.output
        out[name] = folder / f"{name}.json"
        out[name].write_text(r.stdout)
    return out


def candidate(path):
    c = json.loads(path.read_text())["candidates"][0]
    return c["layout"], c["knobs"]


SERVER_ARGS = {"--tp-size": "tp_size", "--pp-size": "pp_size", "--attn-dp-size": "attn_dp_size",
               "--ep-size": "ep_size", "--dcp-size": "dcp_size", "--page-size": "page_size",
               "--context-length": "context_length", "--mem-fraction-static": "mem_fraction_static"}


def emitted_server_args(cli, tmp_path, plan) -> dict:
    """The sizing flags node-0.sh passes SGLang, by the server_args names SGLang logs them under, with SGLang's
    defaults (1) for the parallel sizes the script leaves out: what the engine's line echoes before it resolves
    anything (arg_groups/fields)."""
    out = tmp_path / "launch"
    assert cli("emit", "--plan", str(plan), "--out", str(out)).exit_code == 0
    lines = (out / "node-0.sh").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "sglang.launch_server" in line)
    text = ""
    for line in lines[start:]:
        text += line.removesuffix("\\") + " "
        if not line.endswith("\\"):
            break
    words = shlex.split(text)
    args = {"pp_size": 1, "attn_dp_size": 1, "ep_size": 1, "dcp_size": 1}
    for flag, key in SERVER_ARGS.items():
        if flag in words:
            raw = words[words.index(flag) + 1]
            args[key] = float(raw) if key == "mem_fraction_static" else int(raw)
    return args


def sglang_log(args: dict, **override) -> str:
    """SGLang 0.5.23's server_args line (entrypoints/engine.py) for these settings, and its pool line."""
    args = {"model_path": "x", "dp_size": 1, "kv_cache_dtype": "auto", **args, **override}
    return ("[2026-12-02 10:00:00] server_args={" + ", ".join(f"'{k}': {v!r}" for k, v in args.items()) + "}\n"
            "[2026-12-02 10:01:00 DP0 TP0] max_total_num_tokens=500000, chunked_prefill_size=1024\n")


def check(cli, tmp_path, plan, text):
    (tmp_path / "node-0.log").write_text(text)
    r = cli("check-log", str(tmp_path / "node-0.log"), "--plan", str(plan), "--json")
    return r.exit_code, next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "launch_settings")


def test_the_emitted_dp_attention_command_logs_as_planned(cli, tmp_path, plans):
    """The flags node-0.sh passes, as SGLang logs them: --tp-size 8 spans the 8 attention-DP ranks of tp1 x dp8."""
    code, got = check(cli, tmp_path, plans["sglang-dp"], sglang_log(emitted_server_args(cli, tmp_path,
                                                                                        plans["sglang-dp"])))
    assert got["status"] == "ok", got
    assert got["text"].startswith("tp_size=8, pp_size=1, attn_dp_size=8, dcp_size=1, ep_size=8")
    assert "mem_fraction_static=" in got["text"]


def test_another_layout_fails_and_another_fraction_warns(cli, tmp_path, plans):
    args = emitted_server_args(cli, tmp_path, plans["sglang-dp"])
    code, got = check(cli, tmp_path, plans["sglang-dp"], sglang_log(args, attn_dp_size=1, ep_size=1))
    assert code == 1 and got["status"] == "fail"
    assert "attn_dp_size=1 where the plan has 8; ep_size=1 where the plan has 8: another layout" in got["text"]
    code, got = check(cli, tmp_path, plans["sglang-dp"], sglang_log(args, mem_fraction_static=0.8))
    assert got["status"] == "warn"
    assert f"mem_fraction_static=0.8 where the plan has {args['mem_fraction_static']:g}" in got["text"]


def test_sglang_on_rocm_logs_its_fraction_after_the_aiter_reserve(cli, tmp_path, plans):
    """SGLang 0.5.23 multiplies --mem-fraction-static by 0.85 under aiter above 8,192 tokens of context
    (arg_groups/attention_hook.py) and logs the product in full (0.965 x 0.85 = 0.8202499999999999); the unscaled
    flag means the reserve was skipped (SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION), which the plan does not price."""
    layout, knobs = candidate(plans["sglang-mi355x"])
    assert knobs["attention_backend"] == "aiter" and knobs["max_model_len"] > 8192
    args = emitted_server_args(cli, tmp_path, plans["sglang-mi355x"])
    assert args["mem_fraction_static"] == knobs["memory_fraction"]
    code, got = check(cli, tmp_path, plans["sglang-mi355x"],
                      sglang_log(args, mem_fraction_static=args["mem_fraction_static"] * 0.85))
    assert got["status"] == "ok", got
    assert f"mem_fraction_static={knobs['memory_fraction'] * 0.85:.3f}".rstrip("0") in got["text"]
    code, got = check(cli, tmp_path, plans["sglang-mi355x"], sglang_log(args))
    assert got["status"] == "warn" and f"(its --mem-fraction-static {knobs['memory_fraction']:g} x 0.85, SGLang's " \
        "aiter reserve)" in got["text"]


def test_a_vllm_log_of_another_tensor_parallel_size_fails(cli, tmp_path, plans):
    layout, knobs = candidate(plans["vllm-tp8"])
    line = ("(EngineCore_DP0 pid=1) INFO 12-02 10:00:05 [core.py:140] Initializing a V1 LLM engine (v0.33.0) with "
            f"config: model='x', max_seq_len={knobs['max_model_len']}, tensor_parallel_size=4, "
            "pipeline_parallel_size=2, data_parallel_size=1, decode_context_parallel_size=1, enforce_eager=False, "
            "kv_cache_dtype=fp8\n(EngineCore_DP0 pid=1) INFO 12-02 10:02:00 [kv_cache_utils.py:1148] GPU KV cache "
            "size: 1,000,000 tokens\n")
    code, got = check(cli, tmp_path, plans["vllm-tp8"], line)
    assert code == 1 and got["status"] == "fail"
    assert "tensor_parallel_size=4 where the plan has 8; pipeline_parallel_size=2 where the plan has 1" in got["text"]


@pytest.mark.parametrize("args, dp", [
    ("'tp_size': 8, 'dp_size': 1, 'attn_dp_size': 8", 8),             # SGLang 0.5.23: dp_size counts replicas
    ("'tp_size': 8, 'dp_size': 8, 'enable_dp_attention': True", 8),   # older releases
    ("'tp_size': 8, 'dp_size': 2, 'enable_dp_attention': False", 1),  # router replicas, no DP attention
])
def test_sglang_attention_dp_is_read_as_the_plan_counts_it(args, dp):
    facts = read_log("[2026-12-02 10:00:00] server_args={'model_path': 'x', " + args + "}\n")
    assert facts.settings["dp"] == dp
