"""check-log reads any text without a traceback (issue 23, item 5): every pattern matches only what int() /
float() accept, huge and implausible figures are ignored with a note, binary and non-UTF-8 logs are decoded
with replacement. The c5 reproducers of the issue's QA survey are kept byte for byte; the fuzz test feeds
random text and mutated real lines (written from the engines' format strings, as in test_logcheck_alone.py)
to the reader and every check built on it, with and without a plan."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mla_planner.audit.logcheck import check_log
from mla_planner.audit.logcheck_alone import alone_checks, facts_dict, startup_check
from mla_planner.audit.logcheck_nccl import nccl_tests_check, table_summary
from mla_planner.audit.logcheck_read import read_log
from mla_planner.core.errors import PlanError
from mla_planner.core.jsonout import dumps

# the reproducers (/tmp/i23/inputs/c5_*.log), and the plan each ran against
C5 = {"c5a_kv_comma": ("INFO GPU KV cache size: , tokens\n", "vllm", "'GPU KV cache size: N tokens' line"),
      "c5b_bench_dots": ("INFO GPU KV cache size: 1,600,000 tokens\nOutput token throughput (tok/s):   ...\n"
                         "Mean TPOT (ms):   1.2.3\n", "vllm", "'Mean TPOT (ms):' line"),
      "c5c_bench_dot": ("Output token throughput (tok/s):   .\n", "vllm", "'Output token throughput (tok/s):' line"),
      "c5d_sglang_kv_5000_digits": ("max_total_num_tokens=" + "9" * 5000 + "\n", "sglang",
                                    "'max_total_num_tokens=N' line")}

REAL = [
    "(EngineCore_DP0 pid=4200) INFO 12-01 10:00:05 [core.py:140] Initializing a V1 LLM engine (v0.33.0) with config: "
    "model='x', max_seq_len=32768, tensor_parallel_size=8, pipeline_parallel_size=2, enforce_eager=False, "
    "kv_cache_dtype=fp8, enable_prefix_caching=True",
    "(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:96] non-default args: {'block_size': 64, "
    "'gpu_memory_utilization': 0.92, 'attention_backend': <AttentionBackendEnum.FLASHMLA: 'x.FlashMLABackend'>}",
    "(EngineCore_DP0 pid=4200) INFO 12-01 10:02:00 [kv_cache_utils.py:1148] GPU KV cache size: 1,044,992 tokens, "
    "Maximum concurrency for 32,768 tokens per request: 31.89x",
    "(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:38] vLLM server version 0.33.0, serving model x",
    "WARNING [fused_moe.py:1166] Using default MoE config. Performance might be sub-optimal! Config file not found at "
    "/c/E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
    "[2026-12-01 10:00:00] server_args={'tp_size': 8, 'kv_cache_dtype': 'fp8_e4m3', 'mem_fraction_static': 0.83, "
    "'page_size': 64, 'context_length': None, 'disable_cuda_graph': False}",
    "[2026-12-01 10:01:00 TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 712400, KV size: 31.35 GB",
    "[2026-12-01 10:01:10 TP0] max_total_num_tokens=712400, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=2048, context_len=163840, available_gpu_mem=12.34 GB",
    "[2026-12-01 10:01:10 TP0] KV pool holds 100000 tokens, fewer than --context-length 163840.",
    "sglang: 0.5.23",
    "node0:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9",
    "node0:1:2 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA",
    "node0:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/indirect/2[2]/read",
    "node0:1:2 [0] NCCL INFO Channel 00 : 1[1] -> 2[2] via SHM/direct/direct",
    "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>", "NCCL INFO Using network Socket",
    "Output token throughput (tok/s):         4000.12", "Mean TPOT (ms):                          48.20",
    "ValueError: No available memory for the cache blocks.",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw",
    "     1048576        262144     float     sum      -1    71.93   14.58   27.34      0    71.50   14.66"]
NOISE = "0123456789,.:= -x'{}[]()#/\n\t\xff\x00é█"


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """A multi-node vLLM plan and a one-node SGLang one (the c5 reproducers ran against such)."""
    from click.testing import CliRunner

    from mla_planner.cli.app import app
    from mla_planner.search.planfile_read import read_plan
    out = {}
    for name, args in {"vllm": ("-m", "deepseek-v3", "-t", "2x8xh100-ib", "-e", "vllm", "-l", "tp=8,pp=2"),
                       "sglang": ("-m", "deepseek-v3", "-t", "8xh200", "-e", "sglang", "-l", "tp=8")}.items():
        path = tmp_path_factory.mktemp(name) / "plan.json"
        path.write_text(CliRunner().invoke(app, ["plan", *args, "--json"]).stdout)
        out[name] = (path, read_plan(path))
    return out


@pytest.mark.parametrize("case", sorted(C5))
def test_the_c5_reproducers_are_notes_not_tracebacks(cli, plans, tmp_path, case):
    text, engine, what = C5[case]
    log = tmp_path / f"{case}.log"
    log.write_text(text)
    for extra in (("--plan", str(plans[engine][0])), ()):
        r = cli("check-log", str(log), *extra, "--json")
        assert r.exit_code == 0 and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
        data = json.loads(r.stdout)
        assert any(what in n and n.startswith("ignored") for n in data["notes"]), data["notes"]
        assert all(len(n) < 300 for n in data["notes"])   # the 5,000 digits are not echoed
        text_out = cli("check-log", str(log), *extra).stdout
        assert "note ignored" in text_out and "Traceback" not in text_out


def test_huge_implausible_and_malformed_figures_are_ignored_with_a_note():
    cases = {"GPU KV cache size: 123456789012345678901 tokens": "no number that parses",   # 21 digits
             "GPU KV cache size: 999,999,999,999 tokens": "out of range",                  # over 1e11 tokens
             "GPU KV cache size: 1.5 tokens": "no number that parses",
             "GPU KV cache size: 1,2 tokens": "no number that parses",
             "max_total_num_tokens=-5, context_len=1": "no number that parses",
             "Output token throughput (tok/s): 1e400": "no number that parses",
             "Output token throughput (tok/s): nan": "no number that parses",
             "Mean TPOT (ms): 99999999999.5": "out of range"}
    for line, why in cases.items():
        facts = read_log(line)
        assert facts.kv("vllm") == facts.kv("sglang") == [] and not facts.bench, line
        assert len(facts.notes) == 1 and why in facts.notes[0], (line, facts.notes)
    facts = read_log("server_args={'tp_size': 99999999, 'mem_fraction_static': 1.5, 'page_size': 0, "
                     "'kv_cache_dtype': 'fp8_e4m3'}")
    assert facts.settings == {"kv_cache_dtype": "fp8_e4m3"} and len(facts.notes) == 3
    many = read_log("GPU KV cache size: , tokens\n" * 100)
    assert len(many.notes) == 21 and "further lines" in many.notes[-1]


def test_a_binary_log_is_read_with_replacement(cli, tmp_path):
    log = tmp_path / "bin.log"
    log.write_bytes(b"\x00\xff\xfe\x89PNG\r\n\x1a\n" + bytes(range(256)) + b"\nINFO GPU KV cache size: 1,616,640 "
                    b"tokens, Maximum concurrency for 2,560 tokens per request: 9.31x\n\xc3\x28\xa0\xa1\n")
    r = cli("check-log", str(log), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["facts"]["kv_cache_tokens"] == [1616640]
    (tmp_path / "zeros.log").write_bytes(b"\x00" * 100000)
    r = cli("check-log", str(tmp_path / "zeros.log"))
    assert r.exit_code == 2 and r.stderr.count("\n") == 1


@st.composite
def mutated_line(draw):
    """A real line with a slice replaced by noise, a run of digits, or nothing."""
    line = draw(st.sampled_from(REAL))
    i = draw(st.integers(0, len(line)))
    j = draw(st.integers(i, min(len(line), i + 12)))
    piece = draw(st.one_of(st.text(NOISE, max_size=8), st.just("9" * draw(st.sampled_from([19, 400, 5000]))),
                           st.just(""), st.sampled_from([",", ".", "..", "1.2.3", "-1", "1e400", "nan", "inf"])))
    return line[:i] + piece + line[j:]


logs = st.lists(st.one_of(st.sampled_from(REAL), mutated_line(), st.text(max_size=60), st.text(NOISE, max_size=60)),
                min_size=1, max_size=12).map("\n".join)


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=logs)
def test_any_text_is_read_without_an_exception(plans, text):
    """The reader and every check built on it, with each plan and without, end in checks (or the project's own
    error), and the facts are strict JSON."""
    try:
        facts = read_log(text)
        checks = alone_checks(facts) + [startup_check(facts)] + [c for c in [table_summary(text)] if c]
        for _, (plan_path, plan) in plans.items():
            cand = plan.candidates[0]
            checks += check_log(facts, plan, cand, {"a.log": text, "b.log": text[: len(text) // 2]})
            checks += [c for c in [nccl_tests_check(text, plan, cand)] if c]
        json.loads(dumps({"facts": facts_dict(facts), "notes": facts.notes,
                          "checks": [c.__dict__ for c in checks]}))
    except PlanError:
        return
    assert all(c.status in ("ok", "warn", "fail", "absent") for c in checks)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.one_of(st.binary(max_size=400), logs.map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_any_bytes_through_the_command_exit_0_1_or_2(cli, plans, tmp_path_factory, data):
    log = tmp_path_factory.mktemp("fuzz") / "node-0.log"
    log.write_bytes(data)
    for extra in ((), ("--plan", str(plans["vllm"][0]))):
        r = cli("check-log", str(log), *extra, "--json")
        assert (r.exception is None or isinstance(r.exception, SystemExit)) and r.exit_code in (0, 1, 2), r.output
        assert (r.exit_code == 2) == (r.stdout == "") and (r.exit_code != 2 or r.stderr.count("\n") == 1)
