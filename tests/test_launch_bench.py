"""bench.sh's command and every environment variable the launch folder uses, checked against what the
target versions define.

The engine fixtures (mla_planner/data/engines/) record only `vllm serve` and `sglang.launch_server`, not the
benchmark subcommands, so the benchmark flags are checked against the small explicit tables below, read
out of the same wheels (vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl, sglang-0.5.23-cp311-cp311-
manylinux_2_34_x86_64.whl; sha256 in the fixtures' README):
  vLLM    `vllm bench serve` = vllm/entrypoints/cli/benchmark/serve.py -> vllm/benchmarks/serve.py
          `add_cli_args`, which first calls vllm/benchmarks/datasets/datasets.py `add_dataset_parser`
  SGLang  `python3 -m sglang.benchmark.serving` = sglang/benchmark/serving.py (`sglang.bench_serving` is its
          deprecated alias)
Each entry: flag -> (type, choices); type None is a store_true flag. Only the flags that mla-plan emits
or might, with their types and choices as the wheel defines them.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from mla_planner.engines.parser.tables import load_table
from launch_cases import make_plan

from mla_planner.core.resources import data_dir
from mla_planner.launch.emit import emit_plan
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout

VLLM_DATASETS = ["sharegpt", "burstgpt", "random", "random-mm", "random-rerank", "hf", "custom", "custom_audio",
                 "custom_image", "prefix_repetition", "spec_bench", "speed_bench", "timed_trace"]
SGLANG_DATASETS = ["agentic-trace", "sharegpt", "custom", "openai", "random", "random-ids", "generated-shared-prefix",
                   "mmmu", "image", "mooncake", "longbench_v2", "speed-bench"]
SGLANG_BACKENDS = ["sglang", "sglang-native", "sglang-oai", "sglang-oai-chat", "sglang-embedding", "vllm",
                   "vllm-chat", "vllm-embedding", "lmdeploy", "lmdeploy-chat", "trt", "gserver", "truss"]
BENCH = {
    "vllm": (["vllm", "bench", "serve"], {
        # vllm/benchmarks/serve.py
        "--host": (str, None), "--port": (int, None), "--model": (str, None), "--max-concurrency": (int, None),
        "--ignore-eos": (None, None), "--request-rate": (float, None),
        # vllm/benchmarks/datasets/datasets.py (--random-range-ratio is type=str there: a float or a JSON dict)
        "--dataset-name": (str, VLLM_DATASETS), "--num-prompts": (int, None), "--trust-remote-code": (None, None),
        "--random-input-len": (int, None), "--random-output-len": (int, None), "--random-range-ratio": (str, None),
        "--seed": (int, None), "--save-result": (None, None), "--result-filename": (str, None),
        "--metadata": (list, None)}),     # nargs="*": KEY=VALUE words up to the next flag
    "sglang": (["python3", "-m", "sglang.benchmark.serving"], {
        # sglang/benchmark/serving.py (it ignores EOS by default: --disable-ignore-eos turns that off)
        "--backend": (str, SGLANG_BACKENDS), "--host": (str, None), "--port": (int, None), "--model": (str, None),
        "--dataset-name": (str, SGLANG_DATASETS), "--num-prompts": (int, None), "--random-input-len": (int, None),
        "--random-output-len": (int, None), "--random-range-ratio": (float, None),
        "--max-concurrency": (int, None), "--request-rate": (float, None), "--seed": (int, None),
        "--output-file": (str, None), "--tag": (str, None)}),
}
# Every variable a launch folder sets or reads, and who defines it.
ENV_SOURCES = {
    "CUDA_VISIBLE_DEVICES": "CUDA runtime (CUDA C Programming Guide, CUDA environment variables)",
    "NCCL_SOCKET_IFNAME": "NCCL user guide, environment variables",
    "NCCL_IB_HCA": "NCCL user guide, environment variables",
    "NCCL_IB_DISABLE": "NCCL user guide, environment variables",
    "NCCL_IB_GID_INDEX": "NCCL user guide, environment variables",
    "NCCL_DEBUG": "NCCL user guide, environment variables (README's NET/IB check)",
    "GLOO_SOCKET_IFNAME": "PyTorch torch.distributed docs, 'Common environment variables'",
    "NVSHMEM_IB_GID_INDEX": "NVSHMEM environment variables (DeepEP's transport)",
    "VLLM_HOST_IP": "vllm/envs.py in the vLLM 0.33.0 wheel",
    "VLLM_PP_LAYER_PARTITION": "vllm/envs.py in the vLLM 0.33.0 wheel",
    "VLLM_ENGINE_READY_TIMEOUT_S": "vllm/envs.py in the vLLM 0.33.0 wheel",
    "SGLANG_PP_LAYER_PARTITION": "sglang/srt/distributed/utils.py in the SGLang 0.5.23 wheel",
    "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "sglang/srt/environ.py in the SGLang 0.5.23 wheel",
    "HEAD_IP": "the scripts' own: the instance head's cluster IP",
    "BENCH_HOST": "bench.sh's own", "BENCH_PORT": "bench.sh's own", "CONCURRENCY": "bench.sh's own",
    "RESULT": "bench.sh's own", "PROMPTS": "bench.sh's own", "REPLICAS": "bench.sh's own",
}
# Named in the README only to say they are gone.
MENTIONED_AS_REMOVED = {"VLLM_ATTENTION_BACKEND": "absent from vllm/envs.py in the 0.33.0 wheel (--attention-backend)"}
CASES = [("2x8xh100-ib", Layout(tp=8, pp=2), Knobs(engine="vllm"), "native"),
         ("2x8xh20-roce", Layout(tp=8, pp=2), Knobs(engine="vllm"), "ray"),
         ("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), Knobs(engine="vllm"), "native"),
         ("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), Knobs(engine="sglang", max_num_seqs=200), "native"),
         ("2x8xl40s-eth", Layout(tp=4, pp=4), Knobs(engine="sglang"), "native"),
         ("4x8xh800-roce", Layout(tp=8, pp=2, replicas=2), Knobs(engine="sglang"), "native"),
         ("8xh200", Layout(tp=4, replicas=2), Knobs(engine="vllm"), "native")]


def bench_command(script: Path) -> list[str]:
    """The words of bench.sh's `exec` command, continuation lines joined, as the shell splits them."""
    lines = script.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("exec "))
    text = ""
    for line in lines[start:]:
        text += line.removesuffix("\\") + " "
        if not line.endswith("\\"):
            break
    return shlex.split(text)[1:]


def check_bench(words: list[str], engine: str) -> list[str]:
    """Problems of a benchmark argv against BENCH (empty: every flag exists and its value parses)."""
    program, table = BENCH[engine]
    if words[:len(program)] != program:
        return [f"program {words[:len(program)]} is not {program}"]
    problems, rest = [], words[len(program):]
    while rest:
        flag, rest = rest[0], rest[1:]
        if flag not in table:
            problems.append(f"{flag} is not a flag of {' '.join(program)}")
            continue
        kind, choices = table[flag]
        if kind is None:
            continue
        if not rest:
            problems.append(f"{flag} has no value")
            break
        if kind is list:
            values = [w for w in rest[:next((i for i, w in enumerate(rest) if w.startswith("--")), len(rest))]]
            rest = rest[len(values):]
            problems += [f"{flag} {v}: not KEY=VALUE" for v in values if "=" not in v]
            problems += [f"{flag} {v}: unknown variable" for v in values
                         for var in re.findall(r"\$\{([A-Z_]+)\}", v) if var not in ENV_SOURCES]
            continue
        value, rest = rest[0], rest[1:]
        if re.fullmatch(r"\$\{[A-Z_]+\}", value):
            problems += [] if value[2:-1] in ENV_SOURCES else [f"{flag} {value}: unknown variable"]
            continue
        problems += [f"{flag} {value}: unknown variable" for var in re.findall(r"\$\{([A-Z_]+)\}", value)
                     if var not in ENV_SOURCES]
        try:
            kind(value)
        except ValueError:
            problems.append(f"{flag} {value}: not a {kind.__name__}")
        if choices is not None and value not in choices:
            problems.append(f"{flag} {value}: not one of {choices}")
    return problems


def test_the_fixtures_do_not_record_the_benchmark_flags():
    """If a fixture ever records the benchmark subcommand, check against it instead of BENCH."""
    assert "--dataset-name" not in load_table("vllm")["flags"]
    assert "--dataset-name" not in load_table("sglang")["flags"]


def test_check_bench_catches_a_wrong_flag():
    good = ["vllm", "bench", "serve", "--dataset-name", "random", "--num-prompts", "8"]
    assert check_bench(good, "vllm") == []
    assert check_bench(good[:5] + ["--prompts", "8"], "vllm")[0] == "--prompts is not a flag of vllm bench serve"
    assert check_bench(good[:4] + ["sharegpt4"], "vllm")[0].startswith("--dataset-name sharegpt4: not one of")
    assert check_bench(["python3", "-m", "sglang.bench_serving"], "sglang")[0].startswith("program")
    assert check_bench(["python3", "-m", "sglang.benchmark.serving", "--random-range-ratio", "x"], "sglang") == [
        "--random-range-ratio x: not a float"]


@pytest.mark.parametrize("topology, layout, knobs, mode", CASES)
def test_emitted_benchmark_flags_exist(tmp_path, topology, layout, knobs, mode):
    plan = make_plan(topology, layout, knobs, Workload(input_len=3000, output_len=700, concurrency=96))
    emit_plan(plan, 1, knobs.engine, tmp_path / "out", mode=mode)
    words = bench_command(tmp_path / "out" / "bench.sh")
    assert check_bench(words, knobs.engine) == []
    value = dict(zip(words, words[1:]))
    per_endpoint = str(-(-96 // layout.replicas))    # bench.sh loads one replica's endpoint: its share
    assert (value["--random-input-len"], value["--random-output-len"], value["--max-concurrency"]) == (
        "3000", "700", "${CONCURRENCY}")
    assert f'CONCURRENCY="${{CONCURRENCY:-{per_endpoint}}}"' in (tmp_path / "out" / "bench.sh").read_text()


def _variables(text: str) -> set[str]:
    """Names a shell script exports, assigns or expands."""
    names = set(re.findall(r"^\s*(?:export\s+)?([A-Z][A-Z0-9_]*)=", text, re.M))
    return names | set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", text)) | set(re.findall(r"\$([A-Z][A-Z0-9_]*)", text))


@pytest.mark.parametrize("topology, layout, knobs, mode", CASES)
def test_emitted_environment_variables_are_known(tmp_path, topology, layout, knobs, mode):
    emit_plan(make_plan(topology, layout, knobs), 1, knobs.engine, tmp_path / "out", mode=mode)
    used = set()
    for path in (tmp_path / "out").iterdir():
        used |= _variables(path.read_text()) if path.suffix == ".sh" else set()
    readme = (tmp_path / "out" / "README.md").read_text()
    used |= set(re.findall(r"\b((?:NCCL|GLOO|NVSHMEM|VLLM|SGLANG|CUDA)_[A-Z0-9_]+)", readme))
    assert used - set(ENV_SOURCES) - set(MENTIONED_AS_REMOVED) == set()


def test_template_variables_are_known():
    used = set()
    for template in data_dir("templates").iterdir():
        used |= _variables(template.read_text())
    assert used - set(ENV_SOURCES) == set()


def test_bench_sends_one_replicas_share_of_the_rate(cli, tmp_path):
    """bench.sh talks to one replica: its --request-rate is the rate over the replicas (the whole rate sent
    to one replica doubles its load and its queue grows without bound)."""
    import json
    data = json.loads(cli("plan", "-m", "deepseek-r1", "-t", "2x8xh200-ib", "--request-rate", "12",
                          "--output-len", "1024", "--tpot-ms", "45", "--json").stdout)
    assert data["meets_targets"] and data["candidates"][0]["layout"]["replicas"] == 2
    (tmp_path / "p.json").write_text(json.dumps(data))
    assert cli("emit", "--plan", str(tmp_path / "p.json"), "--out", str(tmp_path / "o")).exit_code == 0
    bench = (tmp_path / "o" / "bench.sh").read_text()
    assert "--request-rate 6.0" in bench and "--request-rate to 12)" in bench


@pytest.mark.parametrize("engine, other, same", [("vllm", "0.30.1", "0.33.2"), ("sglang", "0.4.6", "0.5.23")])
def test_node_scripts_warn_when_another_release_is_installed(tmp_path, engine, other, same):
    """vllm-project/vllm#54677 (version drift): the scripts carry one release's flags; when pip reports
    another, they say so on stderr and still start (a warning, not a stop); the same series is silent."""
    import subprocess
    from launch_cases import install_stubs, make_plan
    from mla_planner.specs.knobs import Knobs
    from mla_planner.launch.emit import emit_plan
    from mla_planner.specs.layout import Layout
    plan = make_plan("8xh200", Layout(tp=8), Knobs(engine=engine))
    emit_plan(plan, 1, engine, tmp_path / "out")
    install_stubs(tmp_path / "bin")
    for version, warned in ((other, True), (same, False)):
        (tmp_path / "bin" / "pip").write_text(f"#!/bin/bash\necho 'Name: {engine}'\necho 'Version: {version}'\n")
        done = subprocess.run(["bash", str(tmp_path / "out" / "node-0.sh")], capture_output=True, text=True,
                              timeout=30, env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
                                               "STUB_LOG": str(tmp_path / "call")})
        assert done.returncode == 0, done.stderr
        assert (f"warning: {engine} {version} is installed" in done.stderr) == warned, done.stderr
