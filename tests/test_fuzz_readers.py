"""Fuzz every file the CLI reads (issue "Trust", inputs): a real file of each kind, its parsed fields mutated at
random places (wrong types, NaN and infinities, 400-digit and 1e-300 numbers, surrogates, 5,000 characters, deep
nesting, keys removed or added) or its text corrupted (cut short, YAML aliases, a thousand `[`, binary bytes), read
by the command that reads it. The house rule (fuzz_harness.check: exit 0, 1 or 2; on 2 one `error:` line; no
traceback, no exception escaping) and, for every `--json` output, strict JSON: no NaN or Infinity in it.

Readers: a model YAML, a config.json snapshot folder, Mistral's params.json, a topology YAML, a plan file (emit), a
calibration file (compare), benchmark results (calibrate), a validation points file (validate), and a launch command
(lint). Engine logs (check-log) have their own fuzz test beside check-log's.

Each reader runs MLA_FUZZ_EXAMPLES examples (default 120: about 1,100 inputs a run, some 80 s of CI; set it to 1000 for
a long run). Every example is a fresh input; hypothesis shrinks a failing one to a small reproducer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from fuzz_harness import ROOT, check, cwd
from fuzz_strategies import FUZZ
from hypothesis import given, settings
from hypothesis import strategies as st

# The same examples on every run unless MLA_FUZZ_RANDOM=1 (a CI run must not fail by the luck of the draw; a long
# random run is how new inputs are found - each one it finds becomes a fix and, through the seed, part of this set).
READERS = settings(FUZZ, max_examples=int(os.environ.get("MLA_FUZZ_EXAMPLES", "120")),
                   derandomize=os.environ.get("MLA_FUZZ_RANDOM") != "1")


def _nested(depth: int, kind: str):
    value = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
    st.sampled_from([10**400, -10**400, 10**30, float("nan"), float("inf"), -float("inf"), 1e-300, 1e300, 0, -1]),
    st.text(max_size=12), st.sampled_from(["\udcff", "", "x" * 5000, "$(id)", "${HOME}", "[red]x", "1e400"]),
    st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(-3, 3), max_size=2),
    st.sampled_from([_nested(400, "list"), _nested(400, "dict")]))
CORRUPT = st.sampled_from(["cut", "alias", "brackets", "binary", "anchors", "deep_json"])


def _paths(node, prefix=()):
    """Every place in a parsed document a value sits (keys of mappings, indices of lists)."""
    out = [prefix] if prefix else []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in items:
        out += _paths(child, prefix + (key,))
    return out


def _set(doc, path, value):
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


@st.composite
def mutated(draw, doc: dict):
    """DOC with one to three of its values replaced, removed, or a key added."""
    doc = json.loads(json.dumps(doc))
    paths = _paths(doc)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        try:
            if draw(st.booleans()):
                _set(doc, path, draw(VALUES))
            elif isinstance(path[-1], str):
                parent = doc
                for key in path[:-1]:
                    parent = parent[key]
                parent.pop(path[-1], None) if draw(st.booleans()) else parent.__setitem__("zz_" + path[-1],
                                                                                          draw(VALUES))
        except (KeyError, IndexError, TypeError, AttributeError):      # an earlier mutation replaced a parent
            pass
    return doc


def _text(doc, as_json: bool) -> str:
    if not as_json:
        try:
            return yaml.safe_dump(doc, allow_unicode=True)
        except (yaml.YAMLError, UnicodeEncodeError):
            pass
    return json.dumps(doc, allow_nan=True)      # NaN / Infinity tokens: json.loads reads them back


def _corrupt(text: str, how: str, where: float) -> bytes:
    cut = int(len(text) * where)
    return {"cut": text[:cut].encode(),
            "alias": (text[:cut] + "\nzz: &a [1, 2]\nyy: *a\n" + text[cut:]).encode(),
            "anchors": ("a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: [*b, *b, *b, *b]\n" + text).encode(),
            "brackets": (text[:cut] + "[" * 3000 + text[cut:]).encode(),
            "binary": text[:cut].encode() + b"\xff\xfe\x00\x9c" + text[cut:].encode(),
            "deep_json": ("[" * 5000 + "]" * 5000).encode()}[how]


@st.composite
def contents(draw, doc: dict, as_json: bool) -> bytes:
    """A mutated document, written out, or the real one's text corrupted."""
    if draw(st.integers(0, 3)) == 0:
        return _corrupt(_text(doc, as_json), draw(CORRUPT), draw(st.floats(0, 1)))
    return _text(draw(mutated(doc)), as_json).encode("utf-8", "surrogatepass")


def run(cli, tmp: Path, argv: list[str]):
    """Run ARGV (in the scratch folder) and hold it to the house rule, and its --json to strict JSON."""
    with cwd(tmp):
        result = cli(*argv)
    check(result, argv, [])
    if "--json" in argv and result.exit_code in (0, 1) and result.stdout.strip().startswith("{"):
        json.loads(result.stdout, parse_constant=_not_json)


def _not_json(token: str):
    raise AssertionError(f"--json output holds {token}, which is not JSON")


@pytest.fixture(scope="module")
def scratch(files):
    """The fuzz harness's scratch folder (tests/conftest.py `files`), with its real plan to mutate."""
    return files.base


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())


MODEL = _load(ROOT / "mla_planner/data/models/deepseek-v2-lite.yaml")
CONFIG = _load(ROOT / "tests/fixtures/hf/DeepSeek-V2-Lite/config.json")
PARAMS = _load(ROOT / "tests/fixtures/mistral/Mistral-Large-3/params.json")
TOPOLOGY = _load(ROOT / "topologies/8xh100.yaml")
CALIBRATION = {"format": "mla-plan-calibration/1", "gpu": "H100-SXM-80G",
               "efficiency": {"hbm_efficiency": 0.8, "kernels_per_layer": 40, "graph_kernel_overhead_s": 2.6e-6},
               "measurements": {"attention_core": {"predicted_s": 1e-4, "measured_s": 1.1e-4}}}
BENCH = {"endpoint_type": "openai", "model_id": "deepseek-ai/DeepSeek-V2-Lite", "max_concurrency": 4, "completed": 16,
         "total_input_tokens": 32768, "total_output_tokens": 8192, "mean_tpot_ms": 9.5}
POINTS = {"points": [yaml.safe_load((ROOT / "mla_planner/data/validation.yaml").read_text())["points"][0]]}


# reader -> (the real document, where it is written in the scratch folder, the command that reads it: {path} the
# written file, {folder} its folder, {tmp} the scratch folder, {plan} a real plan); None: the scratch plan itself
READ = {
    "model_yaml": (MODEL, "model.yaml", ["memory", "-m", "{path}", "-t", "8xh100", "--tp", "2", "--json"]),
    "config_json_snapshot": (CONFIG, "snap/config.json", ["memory", "-m", "{folder}", "-t", "8xh100", "--tp", "2",
                                                           "--json"]),
    "mistral_params_json": (PARAMS, "snap/params.json", ["show", "{folder}", "--json"]),
    "topology_yaml": (TOPOLOGY, "topo.yaml", ["memory", "-m", "deepseek-v2-lite", "-t", "{path}", "--tp", "2",
                                              "--json"]),
    "plan_file": (None, "plan.json", ["emit", "--plan", "{path}", "--out", "{tmp}/out", "--json"]),
    "calibration_file": (CALIBRATION, "cal.yaml", ["compare", "-m", "deepseek-v2-lite", "-t", "8xh100", "--layout",
                                                   "tp=2", "--calibration", "{path}", "--json"]),
    "benchmark_results": (BENCH, "a.json", ["calibrate", "--plan", "{plan}", "{path}", "{tmp}/b.json", "--json"]),
    "validation_points": (POINTS, "points.yaml", ["validate", "--points", "{path}", "--json"]),
}


@pytest.mark.parametrize("reader", sorted(READ))
@READERS
@given(data=st.data())
def test_reader(cli, scratch, tmp_path_factory, reader, data):
    doc, name, argv = READ[reader]
    doc = _load(scratch / "plan.json") if doc is None else doc
    tmp = tmp_path_factory.mktemp(reader)
    path = tmp / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data.draw(contents(doc, as_json=path.suffix == ".json")))
    (tmp / "b.json").write_text(json.dumps(BENCH | {"max_concurrency": 16, "mean_tpot_ms": 12.0}))  # calibrate's 2nd
    where = {"path": str(path), "folder": str(path.parent), "tmp": str(tmp), "plan": str(scratch / "plan.json")}
    run(cli, tmp, [word.format(**where) for word in argv])


LINT_WORDS = st.sampled_from(["-tp", "8", "--tensor-parallel-size", "--gpu-memory-utilization", "0.9", "1e400",
                              "nan", "--max-model-len", "--context-length", "9" * 400, "128k",
                              "--kv-cache-dtype", "fp8", "--block-size", "-1",
                              "--nnodes", "--node-rank", "--max-num-seqs", "--enable-expert-parallel", "-dp", "2",
                              "--attention-backend", "FLASHMLA", "--tp", "--page-size", "\udcff", "x" * 300, "--",
                              "VLLM_X=1", "--speculative-config", "{\"method\": \"mtp\"}", "--compilation-config.x",
                              "--mem-fraction-static", "--chunked-prefill-size", "--dp-size", "--attn-dp-size"])


@READERS
@given(engine=st.sampled_from([["vllm", "serve", "deepseek-ai/DeepSeek-V3"],
                               ["python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3"]]),
       words=st.lists(LINT_WORDS, max_size=8))
def test_launch_command(cli, tmp_path_factory, engine, words):
    run(cli, tmp_path_factory.mktemp("l"), ["lint", "-t", "8xh200", "--json", "--", *engine, *words])
