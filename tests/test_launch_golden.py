"""Golden launch folders: the seed scenario (DeepSeek-V3, 2 x 8 H100 InfiniBand, TP8 x PP2) and a
DP-attention + EP plan (2 x 8 H200, tp=1 dp=16 ep=16), for both engines, plus the Ray form of the seed.
Every engine command is also checked against the real vLLM 0.33.0 / SGLang 0.5.23 option tables.

Regenerate after an intended change with `UPDATE_GOLDEN=1 python -m pytest tests/test_launch_golden.py`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from mla_planner.engines.parser.check import check_command
from launch_cases import bash_syntax_ok, make_plan, scripts

from mla_planner.launch.build import build, launch_inputs
from mla_planner.launch.emit import emit_plan
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout

GOLDEN = Path(__file__).parent / "golden"
SEED = dict(topology="2x8xh100-ib", layout=Layout(tp=8, pp=2),
            workload=Workload(input_len=2048, output_len=512, concurrency=128))
DP_EP = dict(topology="2x8xh200-ib", layout=Layout(tp=1, dp=16, ep=16),
             workload=Workload(input_len=1024, output_len=1024, concurrency=2048))
SCENARIOS = {
    "seed-vllm": dict(SEED, engine="vllm", knobs=Knobs(
        engine="vllm", block_size=64, attention_backend="FLASHMLA", memory_fraction=0.9, max_num_seqs=128,
        max_num_batched_tokens=8192, max_model_len=32768)),
    "seed-vllm-ray": dict(SEED, engine="vllm", mode="ray", knobs=Knobs(
        engine="vllm", block_size=64, attention_backend="FLASHMLA", memory_fraction=0.9, max_num_seqs=128,
        max_num_batched_tokens=8192, max_model_len=32768)),
    "seed-sglang": dict(SEED, engine="sglang", knobs=Knobs(
        engine="sglang", block_size=64, attention_backend="flashmla", memory_fraction=0.85, max_num_seqs=128,
        max_num_batched_tokens=8192, max_model_len=32768)),
    "dp-ep-vllm": dict(DP_EP, engine="vllm", head_address="10.0.0.1", knobs=Knobs(
        engine="vllm", block_size=64, kv_cache_dtype="fp8", attention_backend="FLASHMLA", memory_fraction=0.9,
        max_num_seqs=128, max_num_batched_tokens=4096, max_model_len=16384, mtp=True)),
    "dp-ep-sglang": dict(DP_EP, engine="sglang", head_address="10.0.0.1", knobs=Knobs(
        engine="sglang", block_size=64, kv_cache_dtype="fp8", attention_backend="flashmla", memory_fraction=0.8,
        max_num_seqs=128, max_num_batched_tokens=4096, max_model_len=16384, mtp=True)),
}


def _plan(case: dict):
    return make_plan(case["topology"], case["layout"], case["knobs"], case["workload"],
                     warnings=("example warning carried from the plan",))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_golden_folder(name, tmp_path):
    case = SCENARIOS[name]
    out = tmp_path / name
    emit_plan(_plan(case), 1, case["engine"], out, mode=case.get("mode", "native"),
              head_address=case.get("head_address"))
    expected = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        shutil.rmtree(expected, ignore_errors=True)
        shutil.copytree(out, expected)
    produced = sorted(p.name for p in out.iterdir())
    assert produced == sorted(p.name for p in expected.iterdir()), f"{name}: files differ from {expected}"
    for file in produced:
        assert (out / file).read_text() == (expected / file).read_text(), \
            f"{name}/{file} differs from the golden copy (UPDATE_GOLDEN=1 to accept an intended change)"
    assert all(bash_syntax_ok(p) for p in scripts(out))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_golden_commands_pass_the_engine_check(name):
    case = SCENARIOS[name]
    plan = _plan(case)
    commands = build(launch_inputs(plan, plan.candidates[0], case.get("mode", "native")), case["engine"])
    arch = plan.topology.gpu.arch_id
    engine_cmds = [c for c in commands if c.runs_engine]
    assert len(engine_cmds) == (1 if case.get("mode") == "ray" else 2)
    for c in engine_cmds:
        assert check_command(c.engine_args, case["engine"], arch, model_max_len=plan.spec.max_position_embeddings) == []
