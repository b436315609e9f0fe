"""SGLang's dense parts under DP attention: split over the stage (its default) or per rank
(--moe-dense-tp-size 1 --enable-dp-lm-head, the large-scale EP recipe), and its shared experts under DeepEP.

Sources: SGLang 0.5.23 models/deepseek_v2.py (shared experts parallel_group "replicated" when the MoE
all-to-all backend is deepep; the dense MLP "replicated" when moe_dense_tp_size == 1), layers/logits_processor.py
(enable_dp_lm_head: the lm_head over the attention-TP group, no gather across DP ranks); sgl-project/sglang#6669
(a maintainer: "use moe dense tp size 1 and dp lm head", the decode command of #6017).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from mla_planner.engines.parser.check import check_command
from launch_cases import make_plan

from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.launch.build import build, launch_inputs
from mla_planner.memory.weights import stage_weight_terms
from mla_planner.perf.step import decode_step
from mla_planner.search.run import search
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology
from mla_planner.specs.weights import bytes_of, inventory

V3 = load_model("deepseek-v3").spec
WIDE = Layout(tp=1, dp=16, ep=16)
GiB = 2**30


def _group_bytes(group: str) -> float:
    return sum(bytes_of(t, V3.weight_block_size) for t in inventory(V3) if t.group == group)


def _weights(layout: Layout, engine: str, per_rank: bool = False) -> dict:
    return stage_weight_terms(V3, layout, range(V3.num_hidden_layers), True, True, engine, dense_per_rank=per_rank)


def test_per_rank_holds_the_dense_mlp_and_lm_head_whole():
    split, per_rank = _weights(WIDE, "sglang"), _weights(WIDE, "sglang", True)
    assert per_rank["weights/dense_ffn"] == pytest.approx(_group_bytes("dense_ffn"), rel=1e-3)
    assert per_rank["weights/lm_head"] == pytest.approx(_group_bytes("lm_head"), rel=1e-3)
    assert split["weights/dense_ffn"] == pytest.approx(_group_bytes("dense_ffn") / 16, rel=0.02)
    extra = sum(per_rank.values()) - sum(split.values())
    assert 2.0 * GiB < extra < 3.5 * GiB          # 3 dense MLPs in FP8 + a 129k x 7168 bf16 head, less 1/16 of them
    assert _weights(WIDE, "vllm", True) == _weights(WIDE, "vllm")   # vLLM: the knob means nothing


def test_shared_experts_run_whole_on_every_rank_under_deepep_only():
    whole = _group_bytes("shared_experts")
    assert _weights(WIDE, "sglang")["weights/shared_experts"] == pytest.approx(whole, rel=1e-3)   # DeepEP
    no_ep = Layout(tp=1, dp=16, ep=1)                  # DP attention, MoE tensor-parallel over the stage
    assert _weights(no_ep, "sglang")["weights/shared_experts"] == pytest.approx(whole / 16, rel=0.02)


def test_per_rank_drops_the_gathers_around_the_dense_layers_and_the_head():
    topo = load_topology("2x8xh200-ib")
    cal = load_calibration(None, topo)
    knobs = engine_default_knobs("sglang", V3, topo, WIDE.dp, True)
    split = decode_step(V3, topo, WIDE, knobs, 64, 2304, cal)
    per_rank = decode_step(V3, topo, WIDE, replace(knobs, dense_per_rank=True), 64, 2304, cal)
    assert "ffn.dp_gather" in split.layers["dense"].terms_s
    assert not any(k.startswith("ffn.dp") for k in per_rank.layers["dense"].terms_s)
    # the whole head read per rank (1.85 GB) against every rank's rows and logits gathered over two nodes
    assert per_rank.stages[-1].terms_s["lm_head"] < 0.6 * split.stages[-1].terms_s["lm_head"]
    assert per_rank.layers["moe"].terms_s == split.layers["moe"].terms_s    # MoE layers untouched
    assert per_rank.step_s < split.step_s


def test_per_rank_launches_with_the_recipes_flags():
    plan = make_plan("2x8xh200-ib", WIDE, Knobs(engine="sglang", dense_per_rank=True))
    head, _ = build(launch_inputs(plan, plan.candidates[0], "native"), "sglang")
    a = head.argv
    assert a[a.index("--moe-dense-tp-size") + 1] == "1" and "--enable-dp-lm-head" in a
    assert check_command(head.engine_args, "sglang", "sm90") == []
    plan = make_plan("2x8xh200-ib", WIDE, Knobs(engine="sglang"))
    head, _ = build(launch_inputs(plan, plan.candidates[0], "native"), "sglang")
    assert "--moe-dense-tp-size" not in head.argv and "--enable-dp-lm-head" not in head.argv


def test_plan_tunes_both_and_keeps_the_better_with_its_reason():
    topo = load_topology("2x8xh200-ib")
    result = search(V3, topo, Workload(input_len=1000, output_len=1000, tpot_ms=100), load_calibration(None, topo),
                    ("sglang",), "fp8", [WIDE])
    (option,) = result.options                        # one row per layout: the other way is in the reason
    assert option.tuned.knobs.dense_per_rank
    why = option.tuned.reasons["dense_per_rank"]
    assert why.startswith("on (--moe-dense-tp-size 1 --enable-dp-lm-head") and "split over the stage was tuned too" in why
    other = float(why.rsplit("tuned too: ", 1)[1].split()[0].replace(",", ""))
    assert other < option.tuned.metrics.throughput_tokens_per_s_per_gpu


def test_a_near_tie_keeps_sglangs_default():
    """Inside one node the gathers are cheap: per rank serves within 1 %, so the default (no flags, less
    memory) stays, and the reason says what the other way served."""
    topo = load_topology("2x8xh200-ib")
    result = search(V3, topo, Workload(), load_calibration(None, topo), ("sglang",), "fp8",
                    [Layout(tp=1, dp=8, ep=8, replicas=2)])
    (option,) = result.options
    assert not option.tuned.knobs.dense_per_rank
    why = option.tuned.reasons["dense_per_rank"]
    assert why.startswith("off (SGLang's default)") and "per rank was tuned too" in why
    assert "within 1 %, SGLang's default is kept" in why


def test_compare_flag(cli):
    args = ("compare", "-m", "deepseek-v3", "-t", "2x8xh200-ib", "-e", "sglang", "-l", "tp=1,dp=16,ep=16",
            "-l", "tp=8,pp=2", "--tpot-ms", "100", "--json")
    on = json.loads(cli(*args, "--dense-per-rank").stdout)["layouts"]
    off = json.loads(cli(*args).stdout)["layouts"]
    assert on[0]["knobs"]["dense_per_rank"] and not off[0]["knobs"]["dense_per_rank"]
    assert on[0]["throughput_tokens_per_s"] > off[0]["throughput_tokens_per_s"]
    assert not on[1]["knobs"]["dense_per_rank"] and any("does not apply" in n for n in on[1]["notes"])
    r = cli("compare", "-l", "tp=1,dp=16,ep=16", "--dense-per-rank")    # vLLM
    assert r.exit_code == 2 and "SGLang's choice" in r.stderr and "Traceback" not in r.output


def test_tensor_parallel_attention_is_tuned_one_way_only():
    """At tp > 1 SGLang's per-rank MLP would also scatter the tokens over the attention-TP group, which is not
    priced: those layouts are tuned the engine's way only (a plan file saying otherwise: the next test)."""
    from mla_planner.search.tuning import dense_variants
    assert dense_variants(Layout(tp=2, dp=8, ep=16), "sglang") == (False,)
    assert dense_variants(WIDE, "vllm") == (False,) and dense_variants(WIDE, "sglang") == (False, True)


def test_a_plan_file_cannot_ask_for_it_where_it_does_not_apply(tmp_path, cli):
    from mla_planner.search.planfile import plan_to_dict
    plan = make_plan("8xh200", Layout(tp=8), Knobs(engine="sglang", dense_per_rank=True))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_dict(plan)))
    r = cli("emit", "--plan", str(path), "--out", str(tmp_path / "out"))
    assert r.exit_code == 2 and "candidates.0.knobs.dense_per_rank" in r.stderr and "tp8" in r.stderr


def test_the_mtp_note_tunes_the_candidate_the_way_it_was_planned():
    """The MTP note re-tunes #1 with MTP in #1's own way (per rank here: 660 tok/s per GPU with MTP), not
    SGLang's default split (615)."""
    from mla_planner.search.tuning import Overrides
    from mla_planner.search.mtp import mtp_hint
    topo = load_topology("2x8xh200-ib")
    workload = Workload(input_len=1000, output_len=1000, tpot_ms=100)
    cal = load_calibration(None, topo)
    result = search(V3, topo, workload, cal, ("sglang",), "fp8", [WIDE])
    assert result.options[0].tuned.knobs.dense_per_rank
    hint = mtp_hint(V3, topo, result.options, workload, cal, Overrides())
    (with_mtp,) = search(V3, topo, workload, cal, ("sglang",), "fp8", [WIDE], pinned=Overrides(mtp=True)).options
    assert with_mtp.tuned.knobs.dense_per_rank and "split over the stage was tuned too" in with_mtp.tuned.reasons[
        "dense_per_rank"]
    assert hint.data["with_mtp"]["throughput_tokens_per_s_per_gpu"] == pytest.approx(
        with_mtp.tuned.metrics.throughput_tokens_per_s_per_gpu)


def test_memory_prices_it_too(cli):
    """`memory --dense-per-rank`: the same extra weights the plan's reason quotes; refused where it does not apply."""
    base = ("memory", "-m", "deepseek-v3", "-t", "4x8xh800-roce", "-e", "sglang", "--tp", "1", "--dp", "16",
            "--ep", "16", "--json")      # 16 ways: the FP8 dense MLP split over the stage still loads (1,152 a GPU)
    split, per_rank = (json.loads(cli(*base, *extra).stdout) for extra in ((), ("--dense-per-rank",)))
    extra = sum(per_rank["per_gpu"][0]["terms"].get(g, 0) - split["per_gpu"][0]["terms"].get(g, 0)
                for g in ("weights/dense_ffn", "weights/lm_head"))
    assert 2.0 * GiB < extra < 3.5 * GiB and per_rank["knobs"]["dense_per_rank"]
    r = cli("memory", "-m", "deepseek-v3", "-t", "2x8xh100-ib", "--tp", "16", "--dense-per-rank")
    assert r.exit_code == 2 and "--dense-per-rank applies to SGLang" in r.stderr
