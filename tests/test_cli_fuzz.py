"""Fuzz every command with random but plausible option values.

The house rule, checked for whatever is thrown at `models`, `topologies`, `show`, `memory`, `compare`,
`plan`, `emit` and `verify`:
  - the exit status is 0, 1 (does not fit / no candidate / a verify check failed) or 2 (bad input);
  - on 2, stderr is exactly one non-empty line starting with "error:";
  - no traceback: no "Traceback" in stdout or stderr, and no exception escaping the command (under
    CliRunner an escaping exception is what a user would see as a traceback);
  - on 0 or 1 there is output;
  - on 2, no output file or folder was left behind (no half-written files, no temporary folders).

Values are numbers (0, negative, 1e12, floats where ints are expected, nan, inf), odd strings (empty,
blanks, unicode, newlines, `$(x)`, 5000 characters), unknown model and topology names, impossible
layouts and labels, bad percentile lengths, conflicting flags, and files of the wrong kind (a folder, an
empty file, a plan given as a model, a plan.json with a mutated field). Paths are written as tokens
("@DIR", "@NEW", "@MUT:<plan>:<field>=<json>") so failing examples stay readable; `Files.resolve` turns them
into real paths under a scratch folder. Every command runs with the scratch folder as the working
directory so that nothing is ever written into the repository.

Small models and clusters keep each call quick. `test_pinned` re-runs the minimised inputs that broke the
rule when this file was written.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import shlex
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent

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

# ---------------------------------------------------------------------------------------------------------
# files and the property


class Files:
    """The scratch folder: fixed files of every wrong kind, two real plans, and fresh paths per call."""

    def __init__(self, base: Path, cli):
        self.base, self.cli, self.count = base, cli, itertools.count()
        self.scratch = base / "cwd"
        self.scratch.mkdir()
        (base / "dir").mkdir()
        (base / "dir" / "keep.txt").write_text("not written by emit\n")
        (base / "empty").write_text("")
        (base / "notyaml.yaml").write_text("name: [unclosed\n  x: :")
        (base / "list.yaml").write_text("- a\n- b\n")
        self.plans = {"plan": self._plan(base / "plan.json", "-m", "deepseek-v2-lite", "-t", "8xh100"),
                      "plan_pp": self._plan(base / "plan_pp.json", "-m", "deepseek-v2-lite", "-t", "8xh100",
                                            "--layout", "tp=4,pp=2", "--layout", "tp=2,pp=2", "--engine", "vllm")}
        self.fixed = {"@DIR": base / "dir", "@EMPTY": base / "empty", "@NOTYAML": base / "notyaml.yaml",
                      "@LIST": base / "list.yaml", "@MISSING": base / "missing.yaml", "@PLAN": base / "plan.json",
                      "@PLAN_PP": base / "plan_pp.json", "@TOPOYAML": ROOT / "topologies" / "2x8xh100-ib.yaml",
                      "@MODELYAML": ROOT / "mla_planner" / "data" / "models" / "deepseek-v2-lite.yaml",
                      "@HFDIR": ROOT / "tests" / "fixtures" / "hf" / "DeepSeek-V3",
                      "@FILE/sub": base / "empty" / "sub"}

    def _plan(self, path: Path, *args: str) -> dict:
        r = self.cli("plan", *args, "--json")
        assert r.exit_code == 0, r.output
        path.write_text(r.stdout)
        return json.loads(r.stdout)

    def fresh(self) -> Path:
        """A new, empty parent folder; the property checks it is still empty after a refused call."""
        parent = self.base / f"out{next(self.count)}"
        parent.mkdir()
        return parent

    def resolve(self, word: str) -> tuple[str, Path | None]:
        """(the argument, the folder to watch for leftovers or None)."""
        if word in self.fixed:
            return str(self.fixed[word]), None
        if word == "@NEW":
            parent = self.fresh()
            return str(parent / "out"), parent
        if word in ("@EMPTYDIR", "@FULLDIR"):
            parent = self.fresh()
            (parent / "out").mkdir()
            if word == "@FULLDIR":
                (parent / "out" / "keep.txt").write_text("not written by mla-plan\n")
            return str(parent / "out"), parent
        if word in ("@OLDFILE", "@UNDERFILE"):
            parent = self.fresh()
            (parent / "out").write_text("an earlier file\n")
            return str(parent / "out" / "sub" if word == "@UNDERFILE" else parent / "out"), parent
        if word == "@LONG":
            parent = self.fresh()
            return str(parent / LONG), parent
        if word.startswith("@MUT:"):
            return str(self._mutated(word)), None
        return word, None

    def _mutated(self, word: str) -> Path:
        base, _, rest = word[len("@MUT:"):].partition(":")
        field, _, value = rest.partition("=")
        data = json.loads(json.dumps(self.plans[base]))
        *parents, last = field.split(".")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        key = int(last) if isinstance(node, list) else last
        value = json.loads(value)
        if value == "DEL":
            node.pop(key, None) if isinstance(node, dict) else node.pop(key)
        else:
            node[key] = value
        path = self.base / f"mutated{next(self.count)}.json"
        path.write_text(json.dumps(data))
        return path


def shown(argv: list[str]) -> str:
    """The command line as a user would type it, long words abbreviated."""
    return "mla-plan " + shlex.join(w if len(w) <= 80 else f"{w[:40]}...<{len(w)} chars>" for w in argv)


def listing(folder: Path) -> list[tuple]:
    """Names in `folder` with the size of each file and the names inside each subfolder."""
    return sorted((p.name, sorted(c.name for c in p.iterdir()) if p.is_dir() else p.stat().st_size)
                  for p in folder.iterdir())


@contextlib.contextmanager
def cwd(folder: Path):
    old = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(old)


def invoke(files: Files, argv: list[str]):
    """Run the command (tokens resolved) with the scratch folder as cwd; check the property."""
    real, watched = [], []
    for word in argv:
        arg, parent = files.resolve(word)
        real.append(arg)
        if parent is not None:
            watched.append((parent, listing(parent)))
    watched.append((files.fixed["@DIR"], listing(files.fixed["@DIR"])))
    with cwd(files.scratch):
        before = listing(files.scratch)
        result = files.cli(*real)
        watched.append((files.scratch, before))
    check(result, real, watched)
    return result


def check(result, argv: list[str], watched: list[tuple[Path, list[str]]]) -> None:
    cmd = shown(argv)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        tb = "".join(traceback.format_exception(*result.exc_info))
        raise AssertionError(f"{cmd}\n  -> uncaught {type(exc).__name__}: {str(exc)[:200]}\n{tb[-1500:]}")
    out, err = result.stdout, result.stderr
    assert "Traceback" not in out and "Traceback" not in err, f"{cmd}\n  -> traceback printed:\n{result.output[-1500:]}"
    assert result.exit_code in (0, 1, 2), f"{cmd}\n  -> exit status {result.exit_code}:\n{result.output[-800:]}"
    if result.exit_code == 2:
        lines = err.rstrip("\n").split("\n")   # lines as a terminal shows them (not str.splitlines)
        assert len(lines) == 1 and lines[0].startswith("error:") and lines[0][len("error:"):].strip(), \
            f"{cmd}\n  -> exit 2 with {len(lines)} stderr line(s), not one 'error:' line:\n{err[:800]}"
        for folder, before in watched:
            assert listing(folder) == before, \
                f"{cmd}\n  -> exit 2 but {folder} changed: {before} -> {listing(folder)}\n{err[:300]}"
    else:
        assert out.strip(), f"{cmd}\n  -> exit {result.exit_code} with no output; stderr: {err[:500]}"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from typer.testing import CliRunner

    from mla_planner.cli.app import app

    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, list(args), env={"COLUMNS": "160"})
    return Files(tmp_path_factory.mktemp("fuzz"), run)


# ---------------------------------------------------------------------------------------------------------
# one property test per command


@FUZZ
@given(argv=st.one_of(
    command("models", [], {"--json": None, "--tp": ints(8), "extra": None}, 2),
    command("topologies", [], {"--json": None, "-t": words("8xh100"), "extra": None}, 2)))
def test_catalogues(files, argv):
    invoke(files, argv)


@FUZZ
@given(argv=st.one_of(
    st.builds(lambda m, rest: ["show", m, *rest],
              models("deepseek-v3", "deepseek-v2-lite", "kimi-k2", "llama-3.1-70b", "@MODELYAML", "@HFDIR"),
              st.lists(st.sampled_from(["--json", "--topology", "8xh100", "extra"]), max_size=2)),
    command("show", [("--topology", topologies("8xh100", "2x8xh100-ib", "@TOPOYAML"))], {"--json": None}, 1),
    command("show", [], {"--json": None}, 1)))
def test_show(files, argv):
    invoke(files, argv)


@FUZZ
@given(argv=command("memory", [("-m", small_models), ("-t", small_topologies)], MEMORY, 5, MEMORY_COMBOS))
def test_memory(files, argv):
    invoke(files, argv)


@FUZZ
@given(argv=command("compare", [("-m", small_models), ("-t", small_topologies), ("--layout", layouts)],
                    COMPARE, 5, COMPARE_COMBOS))
def test_compare(files, argv):
    invoke(files, argv)


@FUZZ
@given(argv=command("plan", [("-m", small_models), ("-t", small_topologies)], PLAN, 4, PLAN_COMBOS))
def test_plan(files, argv):
    invoke(files, argv)


@FUZZ
@given(argv=st.builds(lambda plan, out, rest: ["emit", *plan, *out, *rest],
                      st.one_of(plan_files.map(lambda p: ["--plan", p]), st.just([])),
                      st.one_of(OUT_PATHS.map(lambda o: ["--out", o]), st.sampled_from([["--out", ""], ["--out", " "]]),
                                st.just([])),
                      command("", [], EMIT, 3, EMIT_COMBOS).map(lambda a: a[1:])))
def test_emit(files, argv):
    invoke(files, argv)


@needs_torch
@FUZZ
@given(argv=st.builds(lambda source, rest: ["verify", "--device", "cpu", "--quick", *source, *rest],
                      st.one_of(st.builds(lambda m, t: ["-m", m, "-t", t], small_models, small_topologies),
                                st.builds(lambda m, t, lay: ["-m", m, "-t", t, "--layout", lay],
                                          small_models, small_topologies, layouts),
                                plan_files.map(lambda p: ["--plan", p])),
                      st.builds(lambda only, rest: ["--only", only, *rest], VERIFY_ONLY,
                                command("", [], VERIFY, 4, VERIFY_COMBOS).map(lambda a: a[1:]))))
def test_verify(files, argv):
    invoke(files, argv)


# ---------------------------------------------------------------------------------------------------------
# inputs the fuzzing found breaking the rule, minimised, pinned so that each is checked on every run

SMALL = ["-m", "deepseek-v2-lite", "-t", "8xh100"]
VERIFY_CPU = ["verify", "--device", "cpu", "--quick", *SMALL]
PINNED = [
    # click/typer's own usage errors: a boxed multi-line message, not one "error:" line
    ["models", "--tp", "8"],                                     # unknown option
    ["show", "deepseek-v3", "extra"],                            # unexpected extra argument
    ["show", "--topology"],                                      # option without its value
    ["memory", *SMALL, "--tp", "1.5"],                           # float where an int is expected
    ["memory", *SMALL, "--tp", "1e12"],
    ["plan", *SMALL, "--tpot-ms", "abc"],                        # not a number
    ["emit", "--out", "@NEW"],                                   # required --plan missing
    # a layout value str.isdigit() accepts but int() does not: ValueError escapes parse_layout
    ["compare", *SMALL, "--layout", "tp=²"],
    ["plan", *SMALL, "--layout", "tp=²"],
    [*VERIFY_CPU, "--layout", "tp=²"],
    # a path too long for the file system: OSError (ENAMETOOLONG) escapes
    ["show", LONG],
    ["show", "--topology", LONG],
    ["compare", *SMALL, "--layout", "tp=8", "--calibration", LONG],
    ["emit", "--plan", LONG, "--out", "@NEW"],
    ["plan", *SMALL, "--plot", "@LONG"],
    # ~user of a user that does not exist: RuntimeError from Path.expanduser escapes
    ["show", "~nosuchuser"],
    ["show", "--topology", "~nosuchuser"],
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--calibration", "~nosuchuser"],
    # a newline in a user-given word is echoed into the error: two lines
    ["show", "a\nb"],
    ["memory", *SMALL, "--engine", "a\nb"],
    ["compare", *SMALL, "--layout", "tp=8\nx"],
    # numbers that overflow: OverflowError / ValueError escape
    ["plan", *SMALL, "--request-rate", "1.7976931348623157e308"],
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--memory-limit-gib", "nan"],
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--memory-limit-gib", "inf"],
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--memory-limit-gib", "1e300"],
    # a plan file whose pp_layer_partition is not a list of ints: TypeError escapes emit
    ["emit", "--plan", '@MUT:plan_pp:candidates.0.memory.pp_layer_partition=["14", "13"]', "--out", "@NEW"],
    ["emit", "--plan", "@MUT:plan_pp:candidates.0.memory.pp_layer_partition=5", "--out", "@NEW"],
    ["emit", "--plan", "@MUT:plan_pp:candidates.0.memory.pp_layer_partition=1.5", "--out", "@NEW"],
    # exit 2 after an output file was written: the plot stays behind when --emit is refused
    ["plan", *SMALL, "--plot", "@NEW", "--emit", "@FULLDIR"],
    # verify --write-calibration that cannot be written: exit 2 with no error line (--json) or with a
    # blank line before it (the transient progress line, on a non-terminal)
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--json", "--write-calibration", "@NEW"],
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--write-calibration", "@NEW"],
]


def pinned_id(argv: list[str]) -> str:
    text = shown(argv)[len("mla-plan "):].replace(" --device cpu --quick", "").replace(" ".join(SMALL), "...")
    return text if len(text) <= 100 else text[:100] + "..."


@pytest.mark.parametrize("argv", [pytest.param(a, marks=needs_torch if a[0] == "verify" else (), id=pinned_id(a))
                                  for a in PINNED])
def test_pinned(files, argv):
    invoke(files, argv)
