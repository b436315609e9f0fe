"""What the fuzz tests (test_cli_fuzz.py, test_cli_fuzz_pinned.py) throw at every command: the hypothesis
settings, value pools (numbers, odd strings, wrong files, unknown models and topologies, impossible layouts,
bad percentile lengths) and each command's options and conflicting combinations. Paths are tokens ("@DIR",
"@NEW", "@MUT:<plan>:<field>=<json>") that tests/fuzz_harness.py's `Files.resolve` turns into real paths."""

from __future__ import annotations

import importlib.util
import json

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st


# no example database (nothing written into the repository) and no explain phase (slow on a failure)
FUZZ = settings(max_examples=25, deadline=None, database=None,
                phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="verify needs torch")

# ---------------------------------------------------------------------------------------------------------
# value pools

LONG = "a" * 5000
ODD_TEXT = ["", " ", "   ", "\t", "ü", "日本語", "Ω≈ç√", "$(x)", "`id`", "; rm -rf /", "'", '"', "\\", "a\nb",
            "x\r", "-", "--", "[red]x[/red]", "[/]", "%s%n", "{}", "None", "null", "~", "~nosuchuser", "*", "\udcff",
            LONG]
# free text: no NUL (argv cannot hold one), no lone surrogates but \udcff above (what a non-UTF-8 byte
# becomes), no "/" (so a text used as a file name stays inside the scratch folder)
free_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), max_size=20)
odd_text = st.one_of(st.sampled_from(ODD_TEXT), free_text)

INT_ODD = ["0", "-1", "-8", "1e12", "1000000000000", "99999999999999999999", "1.5", "8.0", "nan", "inf", "-inf",
           "", " ", "abc", "٨", "²", "0x10", "1_000"]
FLOAT_ODD = ["0", "-1", "-0.0", "1e12", "1e-300", "1.5", "nan", "-nan", "inf", "-inf", "", "abc", "0.9,0.8", "١"]


def ints(*valid):
    return st.one_of(st.sampled_from([str(v) for v in valid]), st.sampled_from(INT_ODD),
                     st.integers(-10, 10**13).map(str))


def floats(*valid):
    return st.one_of(st.sampled_from([str(v) for v in valid]), st.sampled_from(FLOAT_ODD),
                     st.floats(allow_nan=True, allow_infinity=True).map(repr))


def words(*valid):
    return st.one_of(st.sampled_from(list(valid)), odd_text)


# files of the wrong kind, by token (see Files.resolve)
WRONG_FILES = ["@DIR", "@EMPTY", "@NOTYAML", "@LIST", "@MISSING", "@PLAN", "@TOPOYAML", "@MODELYAML", "@HFDIR",
               "@FILE/sub", "@LONG"]

BAD_MODELS = ["deepseek-v33", "DeepSeek-V2-Lite", "gpt-4", "deepseek-v2-lite ", "deepseek-ai/DeepSeek-V2-Lite"]
BAD_TOPOLOGIES = ["8xh1000", "16xh100", "2x8xh100", "8XH100", "8xh100 "]


def models(*good):
    return st.one_of(st.sampled_from(list(good)), st.sampled_from(BAD_MODELS + WRONG_FILES), odd_text)


def topologies(*good):
    return st.one_of(st.sampled_from(list(good)), st.sampled_from(BAD_TOPOLOGIES + WRONG_FILES), odd_text)


LAYOUTS = ["tp=8", "tp=1", "tp=2,pp=2", "tp=1,dp=8", "tp=1,dp=8,ep=8", "tp=8,dcp=2", "tp=8,kv=latent-sharded",
           "tp8·pp2", "2x(tp4)", "tp4·latent-sharded", "8x(tp1)", "tp=0", "tp=3", "tp=3,pp=2", "tp=8,dp=2,ep=3",
           "dcp=16", "kv=foo", "2x(tp8·pp2)", "tp=²", "tp=٨", "tp=8,,pp=1", "tp = 8", "tp=8 pp=2", "TP=8",
           "tp=8,tp=4", "tp=-1", "tp=1e3", "tp=99999999999999999999", "replicas=0", "x(tp8)", "0x(tp8)", "2x()",
           "()", "·", "tp8··pp2", "tp8·foo", "tp", "=8", "tp=", "kv=", "ep=64", "pp=27", "pp=28", "tp=8\nx"]


@st.composite
def layout_pairs(draw):
    keys = draw(st.lists(st.sampled_from(["tp", "pp", "dp", "ep", "dcp", "replicas", "kv", "foo", ""]),
                         min_size=1, max_size=4))
    values = st.one_of(st.sampled_from(["1", "2", "3", "4", "8", "16", "0", "-1", "1.5", "", "x", "²",
                                        "latent-sharded", "replicated"]), st.integers(0, 2**64).map(str))
    sep = draw(st.sampled_from([",", " ", ", "]))
    return sep.join(f"{k}={draw(values)}" for k in keys)


@st.composite
def layout_labels(draw):
    parts = draw(st.lists(st.sampled_from(["tp", "pp", "dp", "ep", "dcp", "foo"]), min_size=1, max_size=4))
    body = "·".join(f"{p}{draw(st.sampled_from(['0', '1', '2', '3', '8', '16', '']))}" for p in parts)
    replicas = draw(st.sampled_from(["", "0", "1", "2", "99"]))
    return f"{replicas}x({body})" if replicas else body


layouts = st.one_of(st.sampled_from(LAYOUTS), layout_pairs(), layout_labels(), odd_text)

LENGTHS = ["2048", "512", "1", "p50=1024,p99=8192", "p50=0", "p99=5,p50=10", "p50=10,p50=10", "p50=1,p100=2",
           "p0=1,p50=2", "p50=", "=", "p50=5,", ",", "p50=1.5", "p50=1e3", "p50=²", "p50=٣", "0", "-1", "1e3",
           "99999999999", "p50=1,p99=99999999999", "p 50=1", "P50=1", "p50 = 4", "50=4", "p50=4,p90=3", " 2048 ",
           "p99=8192"]


@st.composite
def percentiles(draw):
    pcts = draw(st.lists(st.integers(-1, 101), min_size=1, max_size=4))
    return ",".join(f"p{p}={draw(st.integers(-1, 10**12))}" for p in pcts)


lengths = st.one_of(st.sampled_from(LENGTHS), percentiles(), st.integers(-5, 10**12).map(str), odd_text)

ENGINES = ("vllm", "sglang", "VLLM", "trtllm")
KV_DTYPES = ("auto", "bf16", "fp8", "fp8_ds_mla", "fp16", "int4")

# ---------------------------------------------------------------------------------------------------------
# command lines: base arguments, then a few options drawn from the command's table (None: a flag)


@st.composite
def command(draw, name: str, base: list, options: dict, max_options: int = 5, combos: tuple = ()):
    """`name`, the base options, up to `max_options` drawn options, and maybe one combination of flags
    that go badly together."""
    argv = [name]
    for flag, strategy in base:
        argv += [flag, draw(strategy)]
    for flag in draw(st.lists(st.sampled_from(sorted(options)), max_size=max_options)):
        strategy = options[flag]
        argv += [flag] if strategy is None else [flag, draw(strategy)]
    if combos:
        argv += draw(st.one_of(st.just([]), st.sampled_from(combos)))
    return argv


FRACTIONS = (["--gpu-memory-utilization", "0.9", "--mem-fraction-static", "0.85"],
             ["--engine", "sglang", "--gpu-memory-utilization", "0.9"],
             ["--engine", "vllm", "--mem-fraction-static", "0.85"])
MEMORY_COMBOS = (*FRACTIONS, ["--engine", "sglang", "--engine-version", "0.8.4"], ["--dp", "2", "--ep", "3"],
                 ["--tp", "8", "--dcp", "16"], ["--tp", "1", "--kv-layout", "latent-sharded"],
                 ["--pp", "28"], ["--engine", "sglang", "--block-size", "1"], ["--mtp", "--pp", "2", "--tp", "4"])
COMPARE_COMBOS = (*FRACTIONS, ["--memory-fraction", "0.9", "--gpu-memory-utilization", "0.9"],
                  ["--engine", "sglang", "--memory-fraction", "0.9"], ["--layout", "tp=8", "--layout", "tp=8"],
                  ["--layout", "tp=1,dp=8", "--engine", "sglang", "--kv-cache-dtype", "fp8_ds_mla"])
PLAN_COMBOS = (["--json", "--yaml"], ["--concurrency", "8", "--request-rate", "1"],
               ["--plot", "@NEW", "--emit", "@NEW"],
               ["--plot", "@NEW", "--emit", "@FULLDIR"], ["--engine", "sglang", "--kv-cache-dtype", "fp8_ds_mla"],
               ["--engine", "sglang", "--layout", "tp=8,dcp=2"], ["--layout", "tp=8", "--block-size", "1"])
EMIT_COMBOS = (["--engine", "sglang", "--mode", "ray"], ["--engine", "vllm", "--mode", "ray"],
               ["--head-address", "10.0.0.1", "--candidate", "3"], ["--force", "--json"])
VERIFY_COMBOS = (*FRACTIONS, ["--plan", "@PLAN", "--layout", "tp=8"], ["--print-launch", "--json"],
                 ["--engine", "sglang", "--layout", "tp=8", "--mem-fraction-static", "0.85"],
                 ["--print-launch", "--head", "", "--port", "0"],
                 ["--batch", "4", "--context", "1", "--only", "attention"])


# output paths are fresh for every call: a new name, an empty folder, a folder holding someone's file, an
# existing file, a name under a file, a name too long for the file system
OUT_PATHS = st.sampled_from(["@NEW", "@NEW", "@EMPTYDIR", "@FULLDIR", "@OLDFILE", "@UNDERFILE", "@LONG"])
small_models = models("deepseek-v2-lite", "deepseek-v2-lite", "llama-3.1-70b")
small_topologies = topologies("8xh100", "8xh100", "8xh200", "8xb200")

MEMORY = {"--tp": ints(1, 2, 4, 8, 16), "--pp": ints(1, 2, 27), "--dp": ints(1, 2, 8), "--ep": ints(1, 8, 64),
          "--dcp": ints(1, 2, 8), "--kv-layout": words("replicated", "latent-sharded", "sharded"),
          "--engine": words(*ENGINES), "--gpu-memory-utilization": floats(0.9, 0.5, 1),
          "--mem-fraction-static": floats(0.85, 1), "--kv-cache-dtype": words(*KV_DTYPES),
          "--block-size": ints(1, 16, 64, 128, 1024, 1025), "--max-model-len": ints(1, 4096, 163840, 163841),
          "--max-num-seqs": ints(1, 256, 65536, 65537), "--max-num-batched-tokens": ints(1, 8192, 1048577),
          "--mtp": None, "--enforce-eager": None, "--json": None,
          "--engine-version": words("0.33.0", "0.8.4", "0.5.23", "0.10", "1", "99.0", "0.0.0", "v0.8.4", "foo",
                                    "0.8.4.post1", "1e3")}

COMPARE = {"--layout": layouts, "--engine": words(*ENGINES), "--input-len": lengths, "--output-len": lengths,
           "--tpot-ms": floats(50, 5, 1e6), "--ttft-ms": floats(3000, 1), "--kv-cache-dtype": words(*KV_DTYPES),
           "--enforce-eager": None, "--max-num-seqs": ints(1, 64, 65537),
           "--gpu-memory-utilization": floats(0.9, 1), "--mem-fraction-static": floats(0.85),
           "--memory-fraction": floats(0.9), "--calibration": st.sampled_from(WRONG_FILES), "--json": None}

PLAN = {"--input-len": lengths, "--output-len": lengths, "--concurrency": ints(1, 64, 10**6),
        "--request-rate": floats(1, 100), "--ttft-ms": floats(3000, 100), "--tpot-ms": floats(50, 20),
        "--prefix-hit-rate": floats(0, 0.5, 0.99, 1), "--engine": words(*ENGINES),
        "--kv-cache-dtype": words(*KV_DTYPES), "--layout": layouts, "--block-size": ints(1, 64, 128),
        "--enforce-eager": None, "--top": ints(1, 3, 100), "--explain": None, "--json": None, "--yaml": None,
        "--plot": OUT_PATHS, "--emit": OUT_PATHS, "--calibration": st.sampled_from(WRONG_FILES)}

EMIT = {"--candidate": ints(1, 2, 12, 13), "--engine": words(*ENGINES), "--mode": words("native", "ray", "mpi"),
        "--model-path": words("/models/dsv2", "deepseek-ai/DeepSeek-V2-Lite"),
        "--head-address": words("10.0.0.1", "head.local", "::1"), "--force": None, "--json": None}

VERIFY = {"--candidate": ints(1, 2, 13), "--layout": layouts, "--engine": words(*ENGINES),
          "--gpu-memory-utilization": floats(0.9, 1), "--mem-fraction-static": floats(0.85),
          "--kv-cache-dtype": words(*KV_DTYPES), "--block-size": ints(1, 64, 128),
          "--max-model-len": ints(4096, 163841), "--max-num-seqs": ints(1, 64),
          "--max-num-batched-tokens": ints(1, 8192), "--mtp": None, "--enforce-eager": None,
          "--input-len": ints(1, 2048), "--output-len": ints(1, 512), "--tpot-ms": floats(50, 5),
          "--batch": ints(1, 4), "--context": ints(1, 256), "--calibration": st.sampled_from(WRONG_FILES),
          "--json": None, "--write-calibration": OUT_PATHS, "--print-launch": None,
          "--head": words("10.0.0.1"), "--port": ints(29500, 1, 65535, 65536), "--timeout": floats(120, 1),
          "--memory-limit-gib": floats(1, 80)}
VERIFY_ONLY = st.sampled_from(["fit", "env", "attention", "collectives", "fit,env", "env,attention", "foo", "FIT",
                               ",", ""])  # no gemms: the slow one

# mutated plan files for emit --plan / verify --plan
PLAN_FIELDS = ["candidates.0.layout.tp", "candidates.0.layout.pp", "candidates.0.layout.dp", "candidates.0.layout.ep",
               "candidates.0.layout.dcp", "candidates.0.layout.replicas", "candidates.0.layout.kv_layout",
               "candidates.0.knobs.engine", "candidates.0.knobs.block_size", "candidates.0.knobs.memory_fraction",
               "candidates.0.knobs.max_num_seqs", "candidates.0.knobs.max_num_batched_tokens",
               "candidates.0.knobs.max_model_len", "candidates.0.knobs.attention_backend",
               "candidates.0.knobs.kv_cache_dtype", "candidates.0.memory", "candidates.0.memory.pp_layer_partition",
               "candidates.0.performance", "candidates.0.performance.concurrency_per_dp_rank",
               "candidates.0.warnings", "candidates.0", "candidates", "model.model_path", "model.spec",
               "model.spec.num_hidden_layers", "model.spec.max_position_embeddings", "model.spec.name",
               "topology.nodes", "topology.gpus_per_node", "topology.gpu", "topology.name", "topology.inter_node",
               "workload.input_len", "workload.tpot_ms", "workload.concurrency", "workload.prefix_hit_rate",
               "workload", "mla_plan_version", "rejected"]
json_values = st.one_of(st.none(), st.booleans(), st.integers(-2, 2**64), st.floats(allow_nan=True),
                        st.sampled_from(["", "$(x)", "a\nb", "foo", "fp8_ds_mla", "FLASHMLA", "latent-sharded"]),
                        st.lists(st.integers(-1, 30), max_size=3), st.lists(st.sampled_from(["14", "13", "x"]),
                                                                            max_size=2),
                        st.just({}), st.just("DEL"))
mutated_plans = st.builds(lambda base, field, value: f"@MUT:{base}:{field}={json.dumps(value)}",
                          st.sampled_from(["plan", "plan_pp"]), st.sampled_from(PLAN_FIELDS), json_values)
plan_files = st.one_of(st.sampled_from(["@PLAN", "@PLAN_PP"]), mutated_plans, st.sampled_from(WRONG_FILES),
                       odd_text)
