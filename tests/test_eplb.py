"""EPLB's redundant experts as a knob (issue 21): `plan --redundant-experts N` puts N extra physical experts per MoE
layer on every layout with expert parallelism, counts their weights and emits each engine's flags."""

import json
from dataclasses import replace

import pytest
from plan_cases import setup

from mla_planner.engines.parser.check import check_command
from mla_planner.launch.build import build, launch_inputs
from mla_planner.memory.accounting import evaluate
from mla_planner.search.attention_backend import Rejected
from mla_planner.search.planfile_read import read_plan
from mla_planner.search.tuning import Overrides, draft_knobs
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout


def test_the_copies_weigh_what_the_experts_they_copy_weigh():
    """32 copies over EP8: 36 experts on each rank where the checkpoint needs 32, so 4/32 more routed-expert bytes,
    taken out of the KV pool."""
    spec, topo, _ = setup("deepseek-v3", "8xh200")
    layout = Layout(tp=1, dp=8, ep=8)
    plain, _ = draft_knobs(spec, topo, layout, "sglang", "fp8", Workload())
    eplb, reasons = draft_knobs(spec, topo, layout, "sglang", "fp8", Workload(), Overrides(redundant_experts=32))
    assert eplb.redundant_experts == 32 and "36 experts on each EP rank" in reasons["redundant_experts"]
    a, b = evaluate(spec, topo, layout, plain), evaluate(spec, topo, layout, replace(plain, redundant_experts=32))
    routed = a.per_gpu[0].terms["weights/routed_experts"]
    assert b.per_gpu[0].terms["weights/redundant_experts"] == pytest.approx(routed * 32 / 256)
    assert b.kv_capacity_tokens < a.kv_capacity_tokens
    tp, _ = draft_knobs(spec, topo, Layout(tp=8), "sglang", "fp8", Workload(), Overrides(redundant_experts=32))
    assert tp.redundant_experts == 0                     # no expert parallelism: nothing to balance


def test_copies_that_do_not_spread_evenly_are_refused():
    spec, topo, _ = setup("deepseek-v3", "8xh200")
    with pytest.raises(Rejected, match="do not spread evenly over EP 8"):
        draft_knobs(spec, topo, Layout(tp=1, dp=8, ep=8), "vllm", "fp8", Workload(), Overrides(redundant_experts=3))


@pytest.mark.parametrize("engine, flags", [("sglang", ["--enable-eplb", "--ep-num-redundant-experts", "32"]),
                                           ("vllm", ["--enable-eplb", "--eplb-config",
                                                     '{"num_redundant_experts":32}'])])
def test_the_engines_flags_are_emitted_and_accepted(cli, tmp_path, engine, flags):
    r = cli("plan", "-m", "deepseek-v3", "-t", "8xh200", "-e", engine, "-l", "tp=1,dp=8,ep=8",
            "--redundant-experts", "32", "--json")
    assert r.exit_code in (0, 1), r.output
    (tmp_path / "plan.json").write_text(r.stdout)
    plan = read_plan(tmp_path / "plan.json")
    assert json.loads(r.stdout)["candidates"][0]["knobs"]["redundant_experts"] == 32
    for c in build(launch_inputs(plan, plan.candidates[0]), engine):
        words = c.engine_args
        start = words.index(flags[0])
        assert words[start:start + len(flags)] == flags
        assert check_command(words, engine, f"sm{plan.topology.gpu.sm}",
                             model_max_len=plan.spec.max_position_embeddings) == []
    r = cli("plan", "-m", "deepseek-v3", "-t", "8xh200", "--redundant-experts", "-1")
    assert r.exit_code == 2 and "--redundant-experts must be 0 to 4,096" in r.stderr


def test_lint_prices_the_redundant_experts_a_command_asks_for(cli):
    """The same command fits without copies and not with 256 of them (64 experts per GPU instead of 32)."""
    base = ["python3", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp-size", "8",
            "--attn-dp-size", "8", "--ep-size", "8", "--moe-a2a-backend", "deepep", "--mem-fraction-static", "0.9",
            "--context-length", "8192"]
    assert cli("lint", "-m", "deepseek-v3", "-t", "8xh200", "--", *base).exit_code == 0
    r = cli("lint", "-m", "deepseek-v3", "-t", "8xh200", "--", *base, "--enable-eplb",
            "--ep-num-redundant-experts", "256")
    assert r.exit_code == 1 and "the weights alone" in r.stdout
    vllm = ["vllm", "serve", "deepseek-ai/DeepSeek-V3", "-dp", "8", "--enable-expert-parallel", "--enable-eplb",
            "--eplb-config", '{"num_redundant_experts":256}']
    assert cli("lint", "-m", "deepseek-v3", "-t", "8xh200", "--", *vllm).exit_code == 1
