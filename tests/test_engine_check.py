"""Tests of mla_planner/engines/parser/ (check_command) against vLLM 0.33.0 and SGLang 0.5.23: the fixtures, the
checker's own arguments, vLLM's parser behaviour, and the argparse emulation against the standard library's.

Known-good commands are the engines' multi-node recipes and flag defaults (vllm/engine/arg_utils.py,
sglang/srt/server_args.py); every rejection the real parsers and config code of those releases
produce for the commands below must be reported. The engines' rules: test_engine_check_vllm.py and
test_engine_check_sglang.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mla_planner.engines.parser.check import check_command  # noqa: E402
from mla_planner.engines.parser.tables import TABLE_FILES, load_table  # noqa: E402
from engine_check_cases import M, bad, ok  # noqa: E402


# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("engine,version", [("vllm", "0.33.0"), ("sglang", "0.5.23")])
def test_fixture_metadata(engine, version):
    fx = load_table(engine)
    assert fx["engine"] == engine
    assert fx["version"] == version
    assert fx["wheel"].startswith(f"{engine}-{version}-") and fx["wheel"].endswith(".whl")
    assert re.fullmatch(r"[0-9a-f]{64}", fx["wheel_sha256"])
    assert TABLE_FILES[engine].name == f"{engine}-{version}.json"
    assert len(fx["flags"]) > 200
    for key, spec in fx["flags"].items():
        assert key.startswith("-")
        assert isinstance(spec["takes_value"], bool)
        assert spec["source"].startswith(f"{engine}/") or spec["source"] == f"{engine} {version} docs"
    for name, rule in fx["rules"].items():
        assert rule["source"].startswith(f"{engine}/"), name


def test_fixture_contents_spot_checks():
    v = load_table("vllm")["flags"]
    assert v["--tensor-parallel-size"]["aliases"] == ["-tp"]
    assert v["--tensor-parallel-size"]["type"] == "int"
    assert "--disable-prefix-caching" in v["--enable-prefix-caching"]["negated"]
    assert v["--cudagraph-capture-sizes"]["nargs"] == "+"
    assert v["--max-num-batched-tokens"]["type"] == "human_int"
    assert v["--max-model-len"]["type"] == "human_int_or_auto"
    assert "choices" not in v["--kv-cache-dtype"]  # validated by CacheConfig, not argparse
    assert "choices" not in v["--block-size"]
    s = load_table("sglang")["flags"]
    assert "cutlass_mla" not in s["--attention-backend"]["choices"]
    assert {"trtllm_mla", "cutedsl_mla", "fa3", "flashmla"} <= set(s["--attention-backend"]["choices"])
    assert "--cuda-graph-max-bs" not in s
    assert s["--ep-size"]["aliases"] == ["--expert-parallel-size", "--ep"]
    assert s["--model-path"]["required"] is True
    r = load_table("vllm")["rules"]["attention_backends"]["backends"]
    assert r["FLASHMLA"]["block_size_bases"] == [64]
    assert r["FLASH_ATTN_MLA"]["block_size_bases"] == [16]
    assert r["FLASH_ATTN_MLA"]["compute_capability_majors"] == [9]
    assert r["TRITON_MLA"]["compute_capability_majors"] == "any"
    assert r["FLASHINFER_MLA"]["compute_capability_majors"] == [10]
    assert r["CUTLASS_MLA"]["block_size_bases"] == [128]
    assert r["FLASHMLA"]["device_family_majors"] == [9]


# ---------------------------------------------------------------------------
# check_command's own arguments
# ---------------------------------------------------------------------------


def test_invalid_arguments():
    with pytest.raises(ValueError):
        check_command([M], "tgi")
    with pytest.raises(ValueError):
        check_command([M], "vllm", "hopper")


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
# The argparse emulation agrees with the standard library's argparse
# (CPython 3.11, the version the SGLang 0.5.23 wheel is built for) when the
# parser is rebuilt from the fixture.
# ---------------------------------------------------------------------------


def _stdlib_parser(engine):
    import argparse

    from mla_planner.engines.parser import parsing, preprocess, values as conversion

    class P(argparse.ArgumentParser):
        def error(self, message):
            raise ValueError(message)

    fx = load_table(engine)
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
                return conversion.convert(spec, key, raw)
            except conversion.ParseError as e:
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
    from mla_planner.engines.parser import parsing, preprocess, values as conversion

    parser = _stdlib_parser(engine)
    for argv in _PARSER_CASES[engine]:
        args = preprocess.vllm_preprocess(argv, []) if engine == "vllm" else list(argv)
        try:
            ns = parser.parse_args(args)
            std_error = None
        except ValueError as e:
            std_error = str(e)
        try:
            values, given, positionals, _ = parsing.parse_args(args, engine)
            our_error = None
        except conversion.ParseError as e:
            our_error = str(e)
        assert (std_error is None) == (our_error is None), (argv, std_error, our_error)
        if std_error is None:
            fx = load_table(engine)
            for key in given:
                dest = fx["flags"][key].get("dest", key.lstrip("-").replace("-", "_"))
                assert getattr(ns, dest) == values[key], (argv, key)
