"""What `verify --layout` checks is what `plan` emits for that layout (issue 23 review, item 2), and the verdict
requires every collective the step model prices for it, over the groups the engine forms (item 3): DCP's
all-gather and reduce-scatter, DP attention's all-gather and reduce-scatter, the EP all-to-all over a stage that
vLLM strides over the instance under DP + PP. Torch-free: the collectives themselves run in
test_verify_trust_dist.py."""

from __future__ import annotations

import json

from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout, parse_layout
from mla_planner.specs.topology import load_topology
from mla_planner.verify import report
from mla_planner.verify.check import Check, skipped
from mla_planner.verify.coverage import missing
from mla_planner.verify.groups import planned_groups, required_kinds
from mla_planner.verify.target import Chosen, make_target

H200 = load_topology("8xh200")


def test_verify_layout_checks_the_knobs_plan_emits_for_that_layout(cli):
    """8 x H200, DeepSeek-V3, fp8 KV, tp=8: every knob of verify's target is the plan candidate's (FLASHMLA, block
    64, its chunk, sequences and fraction), not the engine's defaults (TRITON_MLA at block 16 before)."""
    args = ("-m", "deepseek-v3", "-t", "8xh200", "--engine", "vllm", "--kv-cache-dtype", "fp8", "--layout", "tp=8")
    plan = json.loads(cli("plan", *args, "--json").stdout)
    cand = next(c for c in plan["candidates"] if (c["layout"]["tp"], c["layout"]["pp"], c["layout"]["dp"],
                                                  c["layout"]["dcp"]) == (8, 1, 1, 1))
    r = cli("verify", *args, "--device", "cpu", "--quick", "--only", "env", "--json")
    target = json.loads(r.stdout)["target"]
    assert target["knobs"] == cand["knobs"]
    assert cand["knobs"]["attention_backend"] == "FLASHMLA" and cand["knobs"]["block_size"] == 64
    assert any(n.startswith("knobs as `plan` sets them for tp8 (vllm, fp8 KV): FLASHMLA backend, block 64")
               for n in target["notes"])
    # a pinned knob stays as given; the others are still the plan's
    pinned = json.loads(cli("verify", *args, "--max-num-seqs", "64", "--device", "cpu", "--quick", "--only", "env",
                            "--json").stdout)["target"]
    assert pinned["knobs"]["max_num_seqs"] == 64
    assert {k: v for k, v in pinned["knobs"].items() if k not in ("max_num_seqs", "memory_fraction")} == \
        {k: v for k, v in cand["knobs"].items() if k not in ("max_num_seqs", "memory_fraction")}
    assert pinned["knobs"]["memory_fraction"] <= cand["knobs"]["memory_fraction"]


def target(layout: Layout, engine: str = "vllm", model: str = "deepseek-v3"):
    knobs = Knobs(engine=engine, block_size=64, max_model_len=2560)
    return make_target(Chosen(load_model(model).spec, H200, layout, knobs, Workload(), load_calibration(None, H200),
                              "test", 8))


def judged(kind: str, members: list[int]) -> Check:
    return Check(f"collective.{kind}", 1.0, 1.0, "B/s", 1.0, "ratio 0.5-2", True,
                 extra={"members": members, "group_size": len(members)})


def test_a_dcp_layout_needs_its_dcp_collectives_measured():
    t = target(Layout(tp=8, dcp=2))
    pairs = [[0, 1], [2, 3], [4, 5], [6, 7]]                 # DCP groups: consecutive ranks inside the TP group
    assert planned_groups(t, 8) == {"all_reduce": [list(range(8))], "all_gather": [list(range(8))],
                                    "dcp_all_gather": pairs, "dcp_reduce_scatter": pairs}
    tp_only = [Check("attention", 1.0, 1.0, "s", 1.0, "-", True, extra={"kernel": "engine"}),
               judged("all_reduce", list(range(8))), judged("all_gather", list(range(8)))]
    gaps = missing(t, tp_only)
    assert gaps == ["collective.dcp_all_gather over 2 ranks: 4 of 4 group(s)",
                    "collective.dcp_reduce_scatter over 2 ranks: 4 of 4 group(s)"]
    assert report.verdict(tp_only, gaps) == ("not_verified", 1)
    full = tp_only + [judged(k, g) for k in ("dcp_all_gather", "dcp_reduce_scatter") for g in pairs]
    assert missing(t, full) == [] and report.verdict(full, []) == ("pass", 0)


def test_dp_attention_needs_its_gather_and_scatter_and_vllm_strides_a_stage_under_pp():
    # DP attention without EP: the MoE's all-gather and reduce-scatter over the stage (nothing was required before)
    assert required_kinds(target(Layout(tp=1, dp=8, ep=1))) == ["dp_all_gather", "dp_reduce_scatter"]
    # vLLM with DP and PP keeps each DP rank's tp x pp GPUs together: a stage's EP group is strided
    layout = parse_layout("tp=2,pp=2,dp=2", H200)
    assert layout.ep == 4
    vllm = planned_groups(target(layout), 8)
    assert vllm["all_to_all"] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert vllm["p2p"] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    # SGLang packs each stage's tp x dp GPUs together; its dense MLP and logits split over the stage
    sglang = planned_groups(target(layout, "sglang"), 8)
    assert sglang["all_to_all"] == sglang["dp_all_gather"] == sglang["all_gather"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert sglang["p2p"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # EP inside a TP group (dp = 1) is priced as the TP all-reduce, not an all-to-all
    assert required_kinds(target(Layout(tp=2, pp=2, ep=2))) == ["all_reduce", "all_gather", "p2p"]


def test_a_skipped_attention_check_is_missing_for_its_own_reason():
    """A layout the kernels do not cover is named as such, not as 'not measured on the plan's GPU'."""
    t = target(Layout(tp=8))
    why = "latent-sharded KV is a planning figure: no engine kernel to time"
    checks = [Check("env.gpu", 1.0, 1.0, "s", 1.0, "-", True), skipped("attention", why)]
    assert missing(t, checks)[0] == f"attention (not run: {why})"
    assert missing(t, checks[:1])[0] == "attention (not measured on the plan's GPU)"     # no attention check ran
