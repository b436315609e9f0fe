"""The decode step model: its work terms follow docs/step-model.md section 2 and specs.attention.cost exactly, and the
pipeline, eager, prefill and communication terms behave as documented in docs/step-model.md."""

from __future__ import annotations

from dataclasses import replace
from math import ceil

import pytest

from mla_planner.perf.layer_work import Batch, attention_ops, experts_hit, ffn_ops, layer_weights
from mla_planner.perf.prefill import prefill, prefill_time_s
from mla_planner.perf.step import decode_step, forward_stages, op_time_s
from mla_planner.specs.attention import cost as attention_cost
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout, parse_layout
from mla_planner.specs.sizing import kv_bytes_per_token_layer
from mla_planner.specs.topology import load_topology


@pytest.fixture(scope="module")
def v2():
    topo = load_topology("2x8xh100-ib")
    return load_model("deepseek-v2").spec, topo, load_calibration(None, topo)


@pytest.fixture(scope="module")
def v3():
    return load_model("deepseek-v3").spec


@pytest.mark.parametrize("layout, batch, proj_gflop, core_gflop, attn_weights_mb, kv_read_mb", [
    ("tp=1", 64, 23.9, 73.0, 187.1, 302.0),
    ("tp=8", 64, 4.7, 9.1, 36.6, 302.0),
    ("tp=1,dp=8", 8, 3.0, 9.1, 187.1, 37.7),
])
def test_attention_work_matches_mla_math_worked_example(v3, layout, batch, proj_gflop, core_gflop,
                                                        attn_weights_mb, kv_read_mb):
    """A hand-worked example (this project's arithmetic on DeepSeek-V3's config.json): DeepSeek-V3, FP8
    weights, bf16 cache, T = 4096."""
    lay = parse_layout(layout)
    proj, core = attention_ops(v3, lay, Knobs(), Batch(batch, 4096), layer_weights(v3, lay))
    assert proj.flops / 1e9 == pytest.approx(proj_gflop, rel=0.02)
    assert core.flops / 1e9 == pytest.approx(core_gflop, rel=0.02)
    assert proj.bytes / 1e6 == pytest.approx(attn_weights_mb, rel=0.01)
    assert batch * 4096 * 1152 / 1e6 == pytest.approx(kv_read_mb, rel=0.01)


def test_attention_core_terms_are_attention_cost(v2):
    """The step model's attention core is specs.attention.cost's (what `verify` reports against)."""
    spec, topo, cal = v2
    d = decode_step(spec, topo, parse_layout("tp=8,pp=2"), Knobs(), 64, 2304, cal)
    moe = d.layers["moe"]
    heads, total = spec.num_attention_heads // 8, d.micro_batch * 2304
    assert moe.flops["attn.core"] == attention_cost.absorbed_core_flops(heads, total)
    assert moe.bytes["attn.core"] == attention_cost.absorbed_core_bytes(
        d.micro_batch, heads, total, kv_bytes_per_token_layer(spec, "bf16"))


def test_experts_hit_expectation():
    assert experts_hit(160, 160, 6, 0) == 0
    assert experts_hit(160, 160, 6, 1) == pytest.approx(6)
    assert experts_hit(20, 160, 6, 10_000) == pytest.approx(20)
    assert experts_hit(160, 160, 6, 64) == pytest.approx(160 * (1 - (1 - 6 / 160) ** 64))


def test_terms_sum_to_totals(v2):
    spec, topo, cal = v2
    d = decode_step(spec, topo, parse_layout("tp=16"), Knobs(), 128, 2304, cal)
    for layer in d.layers.values():
        assert sum(layer.terms_s.values()) == pytest.approx(layer.total_s)
        assert layer.compute_s + layer.network_s + layer.launch_s == pytest.approx(layer.total_s)
    for stage in d.stages:
        assert sum(stage.terms_s.values()) == pytest.approx(stage.total_s)
    assert d.step_s == d.tpot_s == d.stages[0].total_s
    assert {"attn.tp_all_reduce", "moe.all_reduce"} <= set(d.layers["moe"].terms_s)


def test_pipeline_rounds(v2):
    """Full pipeline: a token every m x step; one sequence alone crosses the stages one after another."""
    spec, topo, cal = v2
    lay = parse_layout("tp=8,pp=2")
    full = decode_step(spec, topo, lay, Knobs(), 200, 2304, cal)
    assert full.micro_batches == 2 and full.micro_batch == 100
    assert full.tpot_s == pytest.approx(2 * full.step_s)
    assert full.tpot_s == pytest.approx(2 * max(s.total_s for s in full.stages))
    alone = decode_step(spec, topo, lay, Knobs(), 1, 2304, cal)
    assert alone.micro_batches == 1
    assert alone.tpot_s == pytest.approx(sum(s.total_s for s in alone.stages))
    assert "pp_handoff" in full.stages[0].terms_s and "lm_head" in full.stages[1].terms_s


def test_eager_costs_show_when_cpu_bound(v2):
    spec, topo, cal = v2
    lay = parse_layout("tp=8,pp=2")
    graphs, eager = Knobs(), Knobs(cuda_graphs=False)
    one_g, one_e = (decode_step(spec, topo, lay, k, 1, 2304, cal) for k in (graphs, eager))
    assert one_e.tpot_s > 1.3 * one_g.tpot_s
    expected_cpu = 30 * cal.eager_layer_host_s              # the first stage's 30 layers, each its host time
    assert one_e.stages[0].total_s == pytest.approx(expected_cpu)
    quick_host = replace(cal, eager_layer_host_s=0.1e-3)      # a host that keeps ahead of a large batch's GPU work
    big_g, big_e = (decode_step(spec, topo, lay, k, 512, 2304, quick_host) for k in (graphs, eager))
    assert big_e.tpot_s == pytest.approx(big_g.tpot_s)          # GPU-bound: the host's time is hidden
    assert decode_step(spec, topo, lay, eager, 512, 2304, cal).tpot_s > big_g.tpot_s   # the default host is not



@pytest.mark.parametrize("layout, terms", [
    ("tp=8,kv=latent-sharded", {"attn.latent_exchange"}),
    ("tp=8,dcp=8", {"attn.dcp_gather_q", "attn.dcp_combine"}),
    ("tp=1,dp=8,ep=8", {"moe.dispatch", "moe.combine"}),
    ("tp=1,dp=8", {"moe.dispatch", "moe.combine"}),
    ("tp=2,dp=4,ep=1", {"attn.tp_all_reduce", "moe.dp_gather", "moe.dp_scatter"}),
])
def test_layout_specific_communication(v2, layout, terms):
    spec, _, cal = v2
    topo = load_topology("8xh100")
    d = decode_step(spec, topo, parse_layout(layout), Knobs(), 32, 2304, cal)
    assert terms <= set(d.layers["moe"].terms_s)
    assert d.network_s > 0


def test_single_gpu_has_no_network(v2):
    _, _, cal = v2
    spec, topo = load_model("deepseek-v2-lite").spec, load_topology("8xh100")
    d = decode_step(spec, topo, parse_layout("tp=1"), Knobs(), 16, 1024, cal)
    assert d.network_s == 0 and d.network_share == 0


def test_dcp_and_latent_sharding_cut_the_kv_read(v2):
    spec, topo, cal = v2
    base, dcp, shard = (decode_step(spec, topo, parse_layout(x), Knobs(), 64, 8192, cal).layers["moe"]
                        for x in ("tp=8", "tp=8,dcp=8", "tp=8,kv=latent-sharded"))
    assert dcp.bytes["attn.core"] < base.bytes["attn.core"] / 6
    assert shard.bytes["attn.core"] < base.bytes["attn.core"] / 4
    assert shard.terms_s["attn.latent_exchange"] > base.terms_s["attn.tp_all_reduce"]


def test_prefill_chunks_and_ttft(v2):
    spec, topo, cal = v2
    lay = parse_layout("tp=8,pp=2")
    small = Knobs(max_num_batched_tokens=2048)
    p = prefill(spec, topo, lay, small, 8192, cal)
    assert p.chunks == 4 and p.chunk_tokens == 2048
    assert prefill_time_s(spec, topo, lay, Knobs(), 8192, cal) < p.ttft_s   # fewer, bigger chunks win
    assert prefill_time_s(spec, topo, lay, Knobs(), 1024, cal) < prefill_time_s(spec, topo, lay, Knobs(), 4096, cal)
    busy = prefill(spec, topo, lay, small, 8192, cal, decode_batch=256, context_len=2304)
    assert busy.chunk_tokens == 2048 - 128 and busy.chunks == ceil(8192 / 1920)
    assert busy.ttft_s > p.ttft_s and busy.stall_s > 0
    lt, _ = forward_stages(spec, topo, lay, small, Batch(128, 2304, prefill=1920, prefix=0), cal)
    assert {"attn.core", "attn.prefill"} <= set(lt["moe"].terms_s)     # decodes and the chunk, both counted


def test_fp8_weights_run_on_fp8_tensor_cores(v3):
    topo = load_topology("8xh200")
    cal = load_calibration(None, topo)
    w = layer_weights(v3, parse_layout("tp=8"))
    assert w.expert_precision == w.weight_precision == "fp8"
    ops = {o.name: o for o in ffn_ops(v3, parse_layout("tp=8"), Batch(0, 1, prefill=16384), w, moe=True)}
    assert ops["moe.experts"].precision == "fp8" and ops["moe.gate"].precision == "bf16"
    _, fp8_math = op_time_s(ops["moe.experts"], topo.gpu, cal)
    _, bf16_math = op_time_s(replace(ops["moe.experts"], precision="bf16"), topo.gpu, cal)
    assert fp8_math == pytest.approx(bf16_math / 2, rel=1e-3)
    a100 = load_topology("4x8xa100-ib").gpu          # no fp8 tensor cores: bf16 rate
    bf16_op = replace(ops["moe.experts"], precision="bf16")
    assert op_time_s(ops["moe.experts"], a100, cal)[1] == op_time_s(bf16_op, a100, cal)[1]


def test_vllm_dp_with_pp_strides_the_expert_group_over_nodes():
    """vLLM keeps each DP rank's tp x pp GPUs together, so with PP the EP group of a stage spans both nodes
    of 2 x 8 (tp1·pp2·dp8: DP ranks 0-3 on node 0, 4-7 on node 1); SGLang packs each stage on one node."""
    from mla_planner.perf.layer_comm import stage_group_spans, stages_share_node
    topo = load_topology("2x8xh100-ib")
    lay = Layout(tp=1, pp=2, dp=8, ep=8)
    assert stage_group_spans(lay, topo, "vllm") and not stage_group_spans(lay, topo, "sglang")
    assert stages_share_node(lay, 0, topo, "vllm") and not stages_share_node(lay, 0, topo, "sglang")


def test_moe_collective_follows_the_deepep_rule_and_sglang_head_split():
    """The EP all-to-all only when DP attention spreads experts over the whole stage
    (engines.parallel.uses_ep_all_to_all, the rule launch/a2a.py emits flags by); otherwise DP attention gathers/scatters around the MoE.
    SGLang under DP attention splits lm_head over tp x dp (engines.parallel.dense_tp), so its step gathers
    logits over that group."""
    from mla_planner.perf.layer_comm import ffn_comm, logits_comm
    from mla_planner.perf.layer_work import Batch, head_ops
    spec, topo = load_model("deepseek-v3").spec, load_topology("2x8xh200-ib")
    calib = load_calibration(None, topo)
    full = ffn_comm(spec, Layout(tp=1, dp=8, ep=8), Batch(8, 2048), topo, calib, True, "sglang")
    part = ffn_comm(spec, Layout(tp=2, dp=4, ep=4), Batch(8, 2048), topo, calib, True, "sglang")
    assert "moe.dispatch" in full and "moe.dp_gather" in part
    lay = Layout(tp=1, dp=8, ep=8)
    assert head_ops(spec, lay, 8, "sglang")[0].bytes * 8 == head_ops(spec, lay, 8, "vllm")[0].bytes
    assert logits_comm(spec, lay, 8, topo, calib, "sglang") > 0 == logits_comm(spec, lay, 8, topo, calib, "vllm")


def test_int4_experts_stream_at_their_own_efficiency():
    """Kimi-K2.5's int4 weight-only experts run the Marlin W4A16 kernel: their op is `w4a16` and its memory side is
    priced with int4_moe_hbm_efficiency (efficiency.yaml); FP8 experts keep moe_hbm_efficiency."""
    topo = load_topology("8xh200")
    calib = load_calibration(None, topo)
    for model, factor in (("kimi-k2.5", "int4_moe_hbm_efficiency"), ("deepseek-v3", "moe_hbm_efficiency")):
        spec, layout = load_model(model).spec, Layout(tp=8)
        ops = ffn_ops(spec, layout, Batch(decode=16, context=2048), layer_weights(spec, layout), True)
        experts = next(o for o in ops if o.name == "moe.experts")
        assert experts.hbm_factor == factor
        mem_s, _ = op_time_s(experts, topo.gpu, calib)
        assert mem_s == pytest.approx(experts.bytes / (topo.gpu.hbm_bytes_per_s * getattr(calib, factor)))
    assert calib.int4_moe_hbm_efficiency < calib.moe_hbm_efficiency
