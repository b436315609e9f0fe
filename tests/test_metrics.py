"""The five metrics: the seed article's scenario, the constraints they respect, and end-to-end sanity
points from the LMSYS large-scale EP blog (2025-05-05) and DeepSeek's profile it quotes (within 2x). Batch search,
stalls and queueing: test_metrics_stalls.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mla_planner.core.errors import PlanError
from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.perf.metrics import evaluate, tokens_per_request
from mla_planner.perf.step import decode_step, mean_network_s, step_breakdown_s
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout, parse_layout
from mla_planner.specs.topology import Topology, load_topology

WORKLOAD = Workload(input_len=2048, output_len=512, tpot_ms=50, ttft_ms=3000)


def _seed(workload: Workload, topology: str | Topology = "2x8xh100-ib") -> dict:
    """DeepSeek-V2 (BF16) on 2 x 8 H100 with 400 Gb/s IB, vLLM defaults (the seed article's cluster; by
    default the rail-optimised reading, one 400 Gb/s NIC per GPU)."""
    spec = load_model("deepseek-v2").spec
    topo = topology if isinstance(topology, Topology) else load_topology(topology)
    cal = load_calibration(None, topo)
    knobs = engine_default_knobs("vllm", spec, topo, max_model_len=workload.max_context_len)
    return {text: evaluate(spec, topo, parse_layout(text), knobs, workload, cal) for text in ("tp=16", "tp=8,pp=2")}


@pytest.fixture(scope="module")
def seed():
    return _seed(WORKLOAD)


def test_seed_scenario_tp8_pp2_beats_tp16(seed):
    """The direction of the seed article's table, computed (efficiency.yaml defaults, 2048 in / 512 out,
    TPOT <= 50 ms). The model produces: TP16 228 requests (TPOT-bound), 4.6k tok/s, 38.6 ms step, 36.8 %
    network wait over the serving run (28.7 % in a decode step without a prefill chunk), 37.4 % effective
    memory; TP8xPP2 305 requests (TPOT-bound: a token takes two stage steps, and a prefill chunk stalls
    both stages), 6.1k tok/s, 18.2 ms step, 10.2 % network wait (6.3 %), 38.3 %.
    The article's 58 % network share for TP16 is not reproduced at the concurrency TP16 sustains: its 120
    cross-node all-reduces of 2.3 MB cost ~90 us each (a tree under NCCL's LL128 protocol; within 15-20 % of
    published 2-node nccl-tests, test_comm) against ~28 ms of HBM-bound work per step; the rounds that carry
    a 2048-token prefill chunk add all-reduces of 23.3 MB (~225 us each) (docs/step-model.md, section 9).
    This is the rail-optimised reading of the article's "400 Gbps" (a NIC per GPU); with fewer NICs per node
    TP16's share passes 40 % (the two tests below)."""
    tp16, pp2 = seed["tp=16"], seed["tp=8,pp=2"]
    assert pp2.concurrency > tp16.concurrency
    assert pp2.throughput_tokens_per_s > 1.05 * tp16.throughput_tokens_per_s
    assert pp2.throughput_tokens_per_s_per_gpu > tp16.throughput_tokens_per_s_per_gpu
    assert pp2.step_s < 0.6 * tp16.step_s
    assert pp2.network_wait_share < 0.15 < 0.30 < tp16.network_wait_share < 0.40
    assert pp2.decode_network_wait_share < 0.10 < 0.20 < tp16.decode_network_wait_share < 0.30
    assert pp2.memory_utilization > tp16.memory_utilization
    assert tp16.concurrency_limit == "tpot" and pp2.concurrency_limit == "tpot"
    assert tp16.meets_targets and pp2.meets_targets


def test_seed_scenario_with_one_400g_link_per_node():
    """The article says only "400 Gbps RoCE or InfiniBand" between its two nodes. Read as the node's link
    (topologies/2x8xh100-ib-1nic.yaml: one NDR NIC shared by 8 GPUs), with no efficiency factor changed, the
    model produces: TP16 97 requests (TPOT-bound), 1.9k tok/s, 35.8 ms step, 57.1 % network wait over the
    run (44.7 % in a decode step alone), 35.8 % effective memory; TP8xPP2 299 requests, 6.0k tok/s,
    18.1 ms, 10.6 % (6.4 %), 38.2 %. TP16's all-reduce of 97 rows (0.99 MB) over the two nodes costs ~130 us
    here (76 us with a NIC per GPU), while PP2's hand-off (hidden state + residual, 3.1 MB per
    micro-batch, 1/8 of it per GPU) barely notices the narrower link."""
    tp16, pp2 = _seed(WORKLOAD, "2x8xh100-ib-1nic").values()
    assert pp2.concurrency > 2.5 * tp16.concurrency
    assert pp2.throughput_tokens_per_s > 2.5 * tp16.throughput_tokens_per_s
    assert pp2.step_s < 0.6 * tp16.step_s
    assert pp2.network_wait_share < 0.15 and 0.50 < tp16.network_wait_share < 0.65
    assert tp16.decode_network_wait_share > 0.40
    assert pp2.memory_utilization > tp16.memory_utilization
    assert tp16.meets_targets and pp2.meets_targets


def test_seed_network_share_follows_the_nics_per_node():
    """Same cluster with 1, 2, 4 and 8 NDR NICs per node. TP16's share over the run falls as NICs are added
    (model: 54.7, 48.7, 43.3, 35.6 %) and its concurrency rises (91, 129, 164, 215 requests), while TP8xPP2
    stays within a few tenths of a point (9.8 .. 9.4 %): its only cross-node traffic is the hand-off. The
    share is above 40 % on every node with fewer NICs than GPUs."""
    base = load_topology("2x8xh100-ib")
    rows = []
    for nics in (1, 2, 4, 8):
        inter = replace(base.inter_node, nics_per_node=nics, ib_hca=None)
        rows.append(_seed(WORKLOAD, replace(base, inter_node=inter)))
    tp16 = [r["tp=16"] for r in rows]
    pp2 = [r["tp=8,pp=2"] for r in rows]
    shares = [m.network_wait_share for m in tp16]
    assert shares == sorted(shares, reverse=True) and len(set(shares)) == 4
    assert [m.concurrency for m in tp16] == sorted(m.concurrency for m in tp16)
    assert all(s > 0.40 for s in shares[:3]) and shares[3] < 0.40
    assert max(m.network_wait_share for m in pp2) - min(m.network_wait_share for m in pp2) < 0.01
    assert all(b.concurrency > a.concurrency for a, b in zip(tp16, pp2))


@pytest.mark.parametrize("text", ["tp=16", "tp=8,pp=2"])
def test_network_share_of_the_run_mixes_decode_and_prefill_rounds(seed, text):
    """Over the run, a round either decodes only or also carries a prefill chunk (2048 tokens fit one chunk
    of the 8192-token budget). The run's share must lie strictly between the two kinds of round, and a
    chunk's extra collectives are part of (not more than) the stall it causes."""
    m = seed[text]
    d, p = m.decode, m.prefill
    assert p.chunks == 1 and 0 < p.stall_network_s < p.stall_s
    net = d.micro_batches * mean_network_s(d.stages)     # a GPU's collectives per round, stage mean
    decode_round = net / d.tpot_s
    chunk_round = (net + p.stall_network_s) / (d.tpot_s + p.stall_s)
    assert decode_round == pytest.approx(m.decode_network_wait_share)
    assert decode_round < m.network_wait_share < chunk_round


def test_seed_scenario_throughput_oriented():
    """With a looser latency target both layouts fill their KV pools, and PP's halved per-GPU cache
    (each stage holds 30 of 60 layers) doubles the requests: 274 vs 552, 4.9k vs 7.9k tok/s. The price of
    PP: each token waits for both stages (69.5 vs 55.5 ms per token)."""
    tp16, pp2 = _seed(Workload(input_len=2048, output_len=512, tpot_ms=100)).values()
    assert tp16.concurrency_limit == pp2.concurrency_limit == "kv"
    assert pp2.concurrency > 1.9 * tp16.concurrency
    assert pp2.throughput_tokens_per_s > 1.3 * tp16.throughput_tokens_per_s
    assert pp2.memory_utilization > tp16.memory_utilization
    assert pp2.tokens_per_s_per_user < tp16.tokens_per_s_per_user


def test_tp16_is_network_bound_when_lightly_loaded(seed):
    """At one request TP16 spends most of its step in cross-node all-reduces (latency-bound)."""
    m = seed["tp=16"]
    spec, topo = load_model("deepseek-v2").spec, load_topology("2x8xh100-ib")
    alone = decode_step(spec, topo, m.layout, m.memory.knobs, 1, WORKLOAD.mean_decode_context,
                        load_calibration(None, topo))
    assert alone.network_share > 0.4 and alone.tpot_s == pytest.approx(m.alone_tpot_s)


@pytest.mark.parametrize("text", ["tp=16", "tp=8,pp=2"])
def test_concurrency_respects_kv_and_tpot(seed, text):
    m = seed[text]
    assert m.concurrency_per_dp_rank * tokens_per_request(WORKLOAD, m.memory.knobs.block_size) \
        <= m.memory.kv_capacity_tokens
    assert m.tpot_s <= WORKLOAD.tpot_ms / 1e3
    # throughput is over the engine's serving round, which carries every prefill's chunks; a user's TPOT
    # carries the other requests' only: one request's prefill stall / output_len less (one DP rank here)
    assert m.throughput_tokens_per_s < m.concurrency / m.tpot_s
    assert m.concurrency / m.throughput_tokens_per_s - m.tpot_s == pytest.approx(m.prefill.stall_s / WORKLOAD.output_len)
    assert m.tokens_per_s_per_user == pytest.approx(1 / m.tpot_s)
    assert 0 < m.memory_utilization < m.memory_in_use <= 1
    assert 0 < m.ttft_s < WORKLOAD.ttft_ms / 1e3


def test_unreachable_tpot_target_is_reported():
    spec, topo = load_model("deepseek-v2").spec, load_topology("2x8xh100-ib")
    knobs = engine_default_knobs("vllm", spec, topo, max_model_len=2560)
    m = evaluate(spec, topo, parse_layout("tp=16"), knobs, Workload(tpot_ms=1), load_calibration(None, topo))
    assert m.concurrency == 0 and m.throughput_tokens_per_s == 0 and not m.meets_targets
    assert any("TPOT target" in n for n in m.notes)


def test_impossible_layout_is_a_plan_error():
    spec, topo = load_model("deepseek-v2").spec, load_topology("2x8xh100-ib")
    with pytest.raises(PlanError, match="not divisible"):
        evaluate(spec, topo, parse_layout("tp=3"), engine_default_knobs("vllm", spec, topo), WORKLOAD,
                 load_calibration(None, topo))


def _cluster(gpu: str, nodes: int) -> Topology:
    return Topology(name=f"{nodes}x8", nodes=nodes, gpus_per_node=8, gpu=gpu,
                    inter_node={"fabric": "infiniband", "nics_per_node": 8, "nic_gbit_per_s": 400})


@pytest.mark.parametrize("gpu, nodes, batch, context, per_node", [
    # e2e-sglang-96h100-decode: 9 x 8 H100, EP72 + DP attention, batch 256 per GPU, KV 2000: 22,282 tok/s/node
    ("H100-SXM-80G", 9, 256, 2000, 22282),
    # same entry, DeepSeek's own profile: 16 x 8 H800, batch 128, KV 4096: 18,598 tok/s/node
    ("H800-SXM-80G", 16, 128, 4096, 18598),
])
def test_wide_ep_decode_within_2x_of_published(gpu, nodes, batch, context, per_node):
    """Sanity only: those systems overlap communication with compute (two-batch overlap), which this
    model does not, and place 256 experts with redundancy on 72/128 GPUs (E/ep is fractional here). Both
    run the dense MLP layers and the lm_head on each rank's own tokens (SGLang --moe-dense-tp-size 1
    --enable-dp-lm-head, sgl-project/sglang#6017, #6669): 1.04x and 0.93x of the published tok/s per node.
    SGLang's defaults (both split over all 72/128 GPUs, every rank's tokens gathered) price far slower."""
    from dataclasses import replace
    spec, topo = load_model("deepseek-v3").spec, _cluster(gpu, nodes)
    n = nodes * 8
    knobs = engine_default_knobs("sglang", spec, topo)
    cal = load_calibration(None, topo)
    recipe = decode_step(spec, topo, Layout(tp=1, dp=n, ep=n), replace(knobs, dense_per_rank=True), batch, context, cal)
    predicted = batch / recipe.tpot_s * 8
    assert per_node / 2 < predicted < per_node * 2
    split = decode_step(spec, topo, Layout(tp=1, dp=n, ep=n), knobs, batch, context, cal)
    assert split.tpot_s > 1.15 * recipe.tpot_s


@pytest.mark.parametrize("text", ["tp=16", "tp=8,pp=2"])
def test_step_breakdown_sums_to_the_step(seed, text):
    """compare's breakdown row: attention core + other kernels + collectives + launch = the decode step
    (the slowest stage, which sets the round here), and TP16 (replicated latent, 8 heads per GPU over the
    whole cache) spends more in the attention kernel per step than a TP8xPP2 stage (half the layers, half
    the sequences per micro-batch), while per layer and sequence the two cost about the same: under either
    layout every GPU reads each sequence's whole latent cache (heads are split, the latent is not)."""
    d = seed[text].decode
    parts = step_breakdown_s(d)
    assert sum(parts.values()) == pytest.approx(d.step_s) == pytest.approx(d.stages[d.bottleneck_stage].total_s)
    assert all(v >= 0 for v in parts.values()) and parts["collectives_s"] == pytest.approx(d.network_s)
    if text == "tp=16":
        other = seed["tp=8,pp=2"].decode
        other_s = step_breakdown_s(other)["attention_core_s"]
        assert parts["attention_core_s"] > 2 * other_s
        stage, other_stage = d.stages[d.bottleneck_stage], other.stages[other.bottleneck_stage]
        per_row_s = parts["attention_core_s"] / (stage.layers * d.micro_batch)
        assert per_row_s == pytest.approx(other_s / (other_stage.layers * other.micro_batch), rel=0.1)


def test_fewer_requests_than_stages():
    """One request on TP8xPP2: one micro-batch crosses both stages, so the step (= time per token) is the sum
    of the stages and the split adds up to it; a GPU of either stage is idle while the other works, so its
    share of time in collectives is its stage's collectives over the whole round."""
    spec, topo = load_model("deepseek-v2").spec, load_topology("2x8xh100-ib")
    cal = load_calibration(None, topo)
    knobs = engine_default_knobs("vllm", spec, topo, max_model_len=WORKLOAD.max_context_len)
    d = decode_step(spec, topo, parse_layout("tp=8,pp=2"), knobs, 1, WORKLOAD.mean_decode_context, cal)
    total = sum(s.total_s for s in d.stages)
    assert d.micro_batches == 1 and d.step_s == pytest.approx(total)
    assert sum(step_breakdown_s(d).values()) == pytest.approx(total)
    assert step_breakdown_s(d)["collectives_s"] == pytest.approx(sum(s.network_s for s in d.stages))
    assert d.network_share == pytest.approx(mean_network_s(d.stages) / total)


@pytest.mark.parametrize("text", ["tp=16", "tp=8,pp=2"])
def test_littles_law_ties_requests_in_flight_to_their_latencies(seed, text):
    """Requests in flight / requests served per second = TTFT + (output_len - 1) x mean TPOT, the TTFT less its
    part outside the engine's forwards (ttft_host_s: the engine holds a request from its prefill on): the TTFT
    includes the wait behind other requests' prompts (a review found the model's TTFT leaving ~10 s of a
    prompt-heavy workload's time in the system unaccounted)."""
    m = seed[text]
    host = load_calibration(None, load_topology("2x8xh100-ib")).ttft_host_s
    in_system = m.concurrency / (m.throughput_tokens_per_s / WORKLOAD.output_len)
    assert in_system == pytest.approx(m.ttft_s - host + (WORKLOAD.output_len - 1) * m.tpot_s, rel=1e-6)
    assert m.ttft_s > m.prefill.ttft_s          # a queue, small at this load (the prefill alone: ~60 ms)
