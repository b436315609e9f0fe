"""check-log --plan holds the settings an engine logged against the launched candidate (audit/logcheck_settings.py):
another layout fails, another sizing knob warns, and SGLang's resolved values are read as SGLang resolves them
(its --tp-size spans the attention-DP ranks, 0.5.23's attn_dp_size, the aiter reserve's 0.85 on ROCm)."""

import json

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


def sglang_log(layout, knobs, fraction, **override):
    """SGLang 0.5.23's server_args line for the emitted flags (launch/sglang.py sizing_flags), resolved."""
    args = {"tp_size": layout["tp"] * layout["dp"], "pp_size": layout["pp"], "dp_size": 1,
            "attn_dp_size": layout["dp"], "ep_size": layout["ep"], "dcp_size": layout["dcp"],
            "context_length": knobs["max_model_len"], "page_size": knobs["block_size"],
            "mem_fraction_static": fraction, "kv_cache_dtype": "auto", **override}
    return ("[2026-12-02 10:00:00] server_args={" + ", ".join(f"'{k}': {v!r}" for k, v in args.items()) + "}\n"
            "[2026-12-02 10:01:00 DP0 TP0] max_total_num_tokens=500000, chunked_prefill_size=1024, "
            f"max_prefill_tokens=16384, max_running_requests={knobs['max_num_seqs']}, context_len="
            f"{knobs['max_model_len']}\n")


def check(cli, tmp_path, plan, text):
    (tmp_path / "node-0.log").write_text(text)
    r = cli("check-log", str(tmp_path / "node-0.log"), "--plan", str(plan), "--json")
    return r.exit_code, next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "launch_settings")


def test_the_emitted_dp_attention_command_logs_as_planned(cli, tmp_path, plans):
    layout, knobs = candidate(plans["sglang-dp"])
    code, got = check(cli, tmp_path, plans["sglang-dp"], sglang_log(layout, knobs, knobs["memory_fraction"]))
    assert got["status"] == "ok", got
    assert got["text"].startswith("tp_size=8, pp_size=1, attn_dp_size=8, dcp_size=1, ep_size=8")


def test_another_layout_fails_and_another_fraction_warns(cli, tmp_path, plans):
    layout, knobs = candidate(plans["sglang-dp"])
    code, got = check(cli, tmp_path, plans["sglang-dp"], sglang_log(layout, knobs, knobs["memory_fraction"],
                                                                    attn_dp_size=1, ep_size=1))
    assert code == 1 and got["status"] == "fail"
    assert "attn_dp_size=1 where the plan has 8; ep_size=1 where the plan has 8: another layout" in got["text"]
    code, got = check(cli, tmp_path, plans["sglang-dp"], sglang_log(layout, knobs, 0.8))
    assert got["status"] == "warn" and f"mem_fraction_static=0.8 where the plan has {knobs['memory_fraction']:g}" \
        in got["text"]


def test_sglang_on_rocm_logs_its_fraction_after_the_aiter_reserve(cli, tmp_path, plans):
    """SGLang 0.5.23 multiplies --mem-fraction-static by 0.85 under aiter above 8,192 tokens of context
    (arg_groups/attention_hook.py) and logs the result; the unscaled flag means the reserve was skipped
    (SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION), which the plan does not price."""
    layout, knobs = candidate(plans["sglang-mi355x"])
    assert knobs["attention_backend"] == "aiter" and knobs["max_model_len"] > 8192
    code, got = check(cli, tmp_path, plans["sglang-mi355x"], sglang_log(layout, knobs, knobs["memory_fraction"] * 0.85))
    assert got["status"] == "ok", got
    code, got = check(cli, tmp_path, plans["sglang-mi355x"], sglang_log(layout, knobs, knobs["memory_fraction"]))
    assert got["status"] == "warn" and "mem_fraction_static" in got["text"]


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
