"""Speculative decoding with more than one drafted token (--mtp-draft-tokens; the recipes run 3 for DeepSeek-V3.2
and GLM-5): the chain of acceptances, the 1 + k tokens each sequence verifies, the drafter run k times, the engines'
flags for it, and the DSpark checkpoint that has no MTP layer to draft with."""

from __future__ import annotations

import json

import pytest
from mla_planner.engines.parser.check import check_command

from mla_planner.launch.build import build, launch_inputs
from mla_planner.perf.step import decode_step
from mla_planner.search.planfile_read import read_plan
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs, tokens_per_step
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

CTX = 2304


def setup(model="deepseek-v3", topology="8xh200"):
    spec, topo = load_model(model).spec, load_topology(topology)
    return spec, topo, load_calibration(None, topo)


def test_k_drafted_tokens_gain_the_chain_and_verify_k_plus_one():
    """1 + a + ... + a^k tokens per step; every sequence verifies 1 + k tokens; the one MTP module runs k times."""
    assert tokens_per_step(Knobs(mtp=True, mtp_draft_tokens=3), 0.85) == pytest.approx(1 + 0.85 + 0.85 ** 2 + 0.85 ** 3)
    spec, topo, calib = setup()
    one, three = (decode_step(spec, topo, Layout(tp=8), Knobs(engine="sglang", kv_cache_dtype="fp8", mtp=True,
                                                             mtp_draft_tokens=k), 32, CTX, calib) for k in (1, 3))
    assert three.layers["moe"].flops["attn.core"] == pytest.approx(2 * one.layers["moe"].flops["attn.core"])  # 4 vs 2
    draft_one, draft_three = one.stages[0].terms_s["mtp_draft"], three.stages[0].terms_s["mtp_draft"]
    assert draft_three > 2.9 * draft_one            # three drafter runs, each at least the first one's work
    assert three.tokens_per_step == pytest.approx(3.186625)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_commands_carry_the_draft_depth_and_the_engines_accept_them(cli, tmp_path, engine):
    r = cli("plan", "-m", "deepseek-v3", "-t", "8xh200", "-e", engine, "--mtp", "--mtp-draft-tokens", "3", "--json")
    assert r.exit_code in (0, 1), r.output
    (tmp_path / "plan.json").write_text(r.stdout)
    plan = read_plan(tmp_path / "plan.json")
    assert plan.candidates[0].knobs.mtp_draft_tokens == 3
    assert any("drafts 3 tokens per step" in why for why in json.loads(r.stdout)["candidates"][0]["reasons"])
    cmd = next(c for c in build(launch_inputs(plan, plan.candidates[0], "native"), engine) if c.runs_engine)
    words = cmd.engine_args
    if engine == "vllm":
        assert json.loads(words[words.index("--speculative-config") + 1])["num_speculative_tokens"] == 3
    else:
        assert words[words.index("--speculative-num-steps") + 1] == "3"
        assert words[words.index("--speculative-num-draft-tokens") + 1] == "4"
    assert check_command(words, engine, "sm90", model_max_len=plan.spec.max_position_embeddings) == [], words


@pytest.mark.parametrize("args, needle", [
    (("plan", "--mtp-draft-tokens", "3"), "--mtp-draft-tokens needs --mtp"),
    (("plan", "--mtp", "--mtp-draft-tokens", "0"), "--mtp-draft-tokens must be 1 to 32, got 0"),
])
def test_bad_draft_input_is_one_line(cli, args, needle):
    r = cli(*args)
    assert r.exit_code == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.output


FLASH = "tests/fixtures/hf/DeepSeek-V4-Flash-0731"


def test_a_dspark_checkpoint_drafts_with_its_dspark_draft():
    """V4-Flash-0731 ships DSpark (3 window-only layers, a block of 5) and no MTP layer: --mtp drafts with DSpark,
    its layers once per step for the whole block (not once per token), k rows of logits per sequence."""
    spec = load_model(FLASH).spec
    assert (spec.drafter, spec.draft_layers, spec.default_draft_tokens, spec.has_mtp_head) == ("dspark", 3, 5, False)
    topo = load_topology("8xh200")
    calib = load_calibration(None, topo)
    kn = Knobs(engine="vllm", kv_cache_dtype="fp8_ds_mla", block_size=256, mtp=True, mtp_draft_tokens=5)
    d = decode_step(spec, topo, Layout(tp=8), kn, 16, 4096, calib)
    moe = d.layers["moe"]
    draft = d.stages[0].terms_s["mtp_draft"]
    # three layers once, plus its projections, Markov head and 5 x 16 rows of logits: not the MTP way's five runs
    assert 3 * moe.total_s < draft < 4 * moe.total_s
    assert d.layers["moe"].flops["attn.proj"] == pytest.approx(6 * decode_step(
        spec, topo, Layout(tp=8), Knobs(engine="vllm", kv_cache_dtype="fp8_ds_mla", block_size=256), 16, 4096,
        calib).layers["moe"].flops["attn.proj"])                              # verifies 1 + 5 tokens per sequence


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_dspark_commands_and_memory(cli, tmp_path, engine):
    r = cli("plan", "-m", FLASH, "-t", "8xb200", "-e", engine, "--mtp", "--json")
    assert r.exit_code in (0, 1), r.output
    (tmp_path / "plan.json").write_text(r.stdout)
    plan = read_plan(tmp_path / "plan.json")
    cand = plan.candidates[0]
    assert cand.knobs.mtp and cand.knobs.mtp_draft_tokens == 5
    assert any("the DSpark draft" in why for why in json.loads(r.stdout)["candidates"][0]["reasons"])
    words = next(c for c in build(launch_inputs(plan, cand, "native"), engine) if c.runs_engine).engine_args
    if engine == "vllm":
        assert json.loads(words[words.index("--speculative-config") + 1]) == {"method": "dspark",
                                                                              "num_speculative_tokens": 5}
        own = {"model_backend": "FLASHMLA_SPARSE_DSV4"}
    else:
        assert words[words.index("--speculative-algorithm") + 1] == "DSPARK"
        assert words[words.index("--speculative-dspark-block-size") + 1] == "5"
        assert "--speculative-num-steps" not in words
        own = {}
    assert check_command(words, engine, "sm100", model_max_len=plan.spec.max_position_embeddings, **own) == [], words
    mem = json.loads(cli("memory", "-m", FLASH, "-t", "8xh200", "--tp", "8", "--mtp", "--json").stdout)
    plain = json.loads(cli("memory", "-m", FLASH, "-t", "8xh200", "--tp", "8", "--json").stdout)
    draft = mem["per_gpu"][0]["terms"].get("weights/dspark", 0)
    assert draft > 1e9 and "weights/mtp" not in mem["per_gpu"][0]["terms"]      # its experts split over the 8 GPUs
    buffers = [m["per_gpu"][0]["terms"].get("model_buffers", 0) for m in (plain, mem)]   # vLLM's, drafting or not
    assert plain["per_gpu"][0]["weights_bytes"] - buffers[0] + draft == \
        pytest.approx(mem["per_gpu"][0]["weights_bytes"] - buffers[1])


def test_memory_and_compare_take_the_draft_depth_and_default_to_the_drafters(cli):
    """`memory` and `compare` take --mtp-draft-tokens as `plan` does, and without it use the drafter's own depth:
    DeepSeek-V4-Flash-0731's DSpark block (5), where they used to price one drafted token whatever the checkpoint."""
    def knobs(*argv):
        r = cli(*argv, "--json")
        assert r.exit_code in (0, 1), r.output
        data = json.loads(r.stdout)
        return data["knobs"] if "knobs" in data else data["layouts"][0]["knobs"]
    v4 = ("-m", "deepseek-v4-flash", "-t", "8xb200", "--mtp")
    assert knobs("memory", *v4, "--tp", "8")["mtp_draft_tokens"] == 5
    assert knobs("compare", *v4, "-l", "tp=8")["mtp_draft_tokens"] == 5
    v3 = ("-m", "deepseek-v3", "-t", "8xh200", "--mtp", "--mtp-draft-tokens", "3")
    assert knobs("memory", *v3, "--tp", "8")["mtp_draft_tokens"] == 3
    assert knobs("compare", *v3, "-l", "tp=8")["mtp_draft_tokens"] == 3
    r = cli("memory", "-m", "deepseek-v3", "-t", "8xh200", "--tp", "8", "--mtp-draft-tokens", "3")
    assert r.exit_code == 2 and "needs --mtp" in r.stderr


@pytest.mark.parametrize("command", [("plan",), ("memory", "--tp", "8"), ("compare", "-l", "tp=8")])
def test_the_draft_depth_is_bounded(cli, command):
    """A depth past any drafter's is refused in one line, where a huge one ran plan and compare for minutes (QA)."""
    r = cli(command[0], "-m", "deepseek-v4-flash", "-t", "8xh200", *command[1:], "--mtp", "--mtp-draft-tokens",
            "99999999999999999999")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "1 to 32" in r.stderr
