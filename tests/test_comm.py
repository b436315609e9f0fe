"""Collective costs against published nccl-tests / DeepEP figures (NVIDIA/nccl-tests#212, #290, #326,
NVIDIA/nccl#1455, deepseek-ai/DeepEP docs/legacy.md).

Large messages: busbw within 20 % of the published figure (this project's tolerance).
Small messages: latency-bound, time ~ constant and equal to alpha.
"""

from __future__ import annotations

import pytest

from mla_planner.core.errors import PlanError
from mla_planner.perf.comm import collective, collective_time_s, tree_correction
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.topology import load_topology

GB = 1e9
LARGE = 4 * 2**30   # nccl-tests runs to 4-16 GB to reach peak ("256M is too small", nccl-tests #212)


@pytest.fixture(scope="module")
def h100():
    topo = load_topology("8xh100")
    return topo, load_calibration(None, topo)


def _busbw(kind, group, topo, cal, **kw):
    return collective(kind, LARGE, group, topo, cal, **kw).busbw_bytes_per_s / GB


def test_h100_large_messages_match_nccl_tests(h100):
    topo, cal = h100
    # coll-h100-nvls-allreduce: ~480 GB/s busbw (NVLS, default), ~370 with NCCL_ALGO=RING
    assert _busbw("all_reduce", 8, topo, cal) == pytest.approx(480, rel=0.2)
    assert collective("all_reduce", LARGE, 8, topo, cal).algorithm == "nvls"
    assert _busbw("all_reduce", 8, topo, cal, algorithm="ring") == pytest.approx(370, rel=0.2)
    # coll-h100-allgather: 360 GB/s all_gather busbw
    assert _busbw("all_gather", 8, topo, cal) == pytest.approx(360, rel=0.2)
    assert _busbw("reduce_scatter", 8, topo, cal) == pytest.approx(360, rel=0.2)


@pytest.mark.parametrize("gpus, nvls_busbw", [(5, 420), (6, 440), (7, 460), (8, 480)])
def test_h100_nvls_scaling_and_ring_flat(h100, gpus, nvls_busbw):
    topo, cal = h100   # coll-h100-ring-vs-nvls-scaling (NVIDIA/nccl #1455)
    assert _busbw("all_reduce", gpus, topo, cal) == pytest.approx(nvls_busbw, rel=0.2)
    assert _busbw("all_reduce", gpus, topo, cal, algorithm="ring") == pytest.approx(367, rel=0.2)


@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"])
def test_small_messages_are_latency_bound(h100, kind):
    topo, cal = h100
    tiny, small = (collective(kind, n, 8, topo, cal) for n in (8, 1024))
    assert small.time_s == pytest.approx(tiny.time_s, rel=0.01)
    assert tiny.time_s == pytest.approx(tiny.latency_s, rel=0.001)
    assert 3e-6 < tiny.time_s < 30e-6     # NCCL small-message latencies inside a node: a few to ~20 us
    big = collective(kind, LARGE, 8, topo, cal)
    assert big.bandwidth_s > 100 * big.latency_s


def test_nic_share_and_cross_node_latency():
    topo = load_topology("2x8xh100-ib")
    cal = load_calibration(None, topo)
    # coll-h100-singlenode-476-and-ndr-nic: 46-48 GB/s per NDR NIC; one GPU's hand-off uses its own NIC
    p2p = collective("p2p", LARGE, 2, topo, cal, spans_nodes=True)
    assert 46 <= p2p.algbw_bytes_per_s / GB <= 48
    inside = collective_time_s("all_reduce", 8, 8, topo, cal)
    across = collective("all_reduce", 8, 16, topo, cal)
    assert across.nodes == 2 and across.time_s > inside
    # NVIDIA/nccl #1244: 2 nodes x 8 GPUs, NVLSTree, 46-47 us at 4 B (no CUDA graph); ours is graph-captured
    assert 30e-6 < across.time_s < 50e-6
    # a flat ring over 2 nodes is bounded by the node's 8 NICs and by NVLink: ~370 GB/s busbw
    assert _busbw("all_reduce", 16, topo, cal) == pytest.approx(370, rel=0.2)


def test_deepep_all_to_all_bandwidths():
    topo = load_topology("4x8xh800-roce")
    cal = load_calibration(None, topo)
    # coll-deepep-v1-intranode: 153 GB/s NVLink bottleneck bandwidth at EP8 (H800)
    intra = collective("all_to_all", LARGE, 8, topo, cal)
    assert (7 / 8) * LARGE / intra.bandwidth_s / GB == pytest.approx(153, rel=0.2)
    # coll-deepep-v1-internode: 43 GB/s RDMA bottleneck bandwidth at EP16
    inter = collective("all_to_all", LARGE, 16, topo, cal)
    assert (8 / 16) * LARGE / inter.bandwidth_s / GB == pytest.approx(43, rel=0.2)


def test_time_grows_with_size_and_trivial_groups(h100):
    topo, cal = h100
    times = [collective_time_s("all_reduce", n, 8, topo, cal) for n in (1e3, 1e5, 1e7, 1e9)]
    assert times == sorted(times)
    assert collective_time_s("all_reduce", 1e9, 1, topo, cal) == 0.0


@pytest.mark.parametrize("call, message", [
    (lambda t, c: collective("broadcast", 8, 8, t, c), "unknown collective"),
    (lambda t, c: collective("all_reduce", 8, 16, t, c), "one NVLink domain"),
    (lambda t, c: collective("all_reduce", 8, 8, t, c, spans_nodes=True), "one NVLink domain"),
    (lambda t, c: collective("all_reduce", 8, 8, t, c, algorithm="tree"), "not available"),
])
def test_bad_requests_raise_plan_error(h100, call, message):
    with pytest.raises(PlanError, match=message):
        call(*h100)


# Published nccl-tests all_reduce_perf tables, 2 nodes x 8 Hopper GPUs, one 400 Gb/s NIC per GPU, default
# algorithm, no CUDA graphs; out-of-place time in us by message size in bytes. Quoted as published.
TWO_NODE_ALL_REDUCE_US = {
    # NVIDIA/nccl-tests #309, opening post (qoofyk, 2025-05): Dell XE9680, 8x H100, 8x CX7 InfiniBand 400G,
    # NCCL 2.26.2; NVIDIA's reply: "Your numbers look good to me".
    "nccl-tests#309 H100 IB": ({2**20: 71.93, 2**21: 76.24, 2**22: 94.38, 2**23: 132.6, 2**24: 185.4}, 0.15),
    # same thread (gj-aion, 2025-06-18): 2 of their 8 H100 nodes, "IB 400G".
    "nccl-tests#309 H100 IB (2)": ({2**20: 93.25, 2**21: 94.22, 2**22: 110.9, 2**23: 151.6, 2**24: 201.6}, 0.20),
    # Red Hat "Spectrum-X Host Configuration on OpenShift": Dell, 8x H200, 8x BlueField-3 400GbE RoCE,
    # NCCL 2.30.4 (16 MB: the in-place time; the out-of-place 304 us is a glitch next to it).
    "Red Hat H200 RoCE": ({2**20: 76.86, 2**21: 86.37, 2**22: 106.13, 2**23: 149.76, 2**24: 207.61}, 0.20),
}


@pytest.mark.parametrize("source", sorted(TWO_NODE_ALL_REDUCE_US))
def test_two_node_all_reduce_follows_published_nccl_tests(source):
    """Across two nodes NCCL runs 1-16 MB all-reduces as a tree under its LL128 protocol (more latency than LL,
    most of the bandwidth): the model prices each (algorithm, protocol) with NCCL's own tuning.cc constants
    and its tree correction factors (data/nccl_protocols.yaml) and lands within the table's tolerance at
    every size (15 % of the table NVIDIA called good, 20 % of the other two). Pairing LL's latency with
    Simple's bandwidth, as the model once did, gave times 28-48 % below these tables (2.8 MB, a TP16 decode
    all-reduce of DeepSeek-V2: 58 us; now 95 us; the tables: ~83-101 us)."""
    topo = load_topology("2x8xh100-ib")
    cal = load_calibration(None, topo)
    table, tolerance = TWO_NODE_ALL_REDUCE_US[source]
    for size, measured_us in table.items():
        cost = collective("all_reduce", size, 16, topo, cal)
        assert cost.nodes == 2 and cost.algorithm == "tree/LL128"
        assert cost.time_s * 1e6 == pytest.approx(measured_us, rel=tolerance), (size, cost.algorithm)


def test_tree_correction_factors_bring_the_model_closer_to_the_tables():
    """NCCL's treeCorrectionFactor ("trees are not perfectly sticking to the model for medium sizes") cuts
    the tree's bandwidth to 60-90 % at 1-16 MB. Without it the model's mean error over the 15 published
    points is 12 % (mostly too fast); with it, under 10 %."""
    topo = load_topology("2x8xh100-ib")
    cal = load_calibration(None, topo)
    errors, uncorrected = [], []
    for table, _ in TWO_NODE_ALL_REDUCE_US.values():
        for size, measured_us in table.items():
            cost = collective("all_reduce", size, 16, topo, cal)
            errors.append(abs(cost.time_s * 1e6 / measured_us - 1))
            raw_s = cost.latency_s + cost.bandwidth_s * tree_correction("LL128", size)
            uncorrected.append(abs(raw_s * 1e6 / measured_us - 1))
    assert sum(errors) / len(errors) < 0.10 < sum(uncorrected) / len(uncorrected)
    assert [tree_correction("LL128", s) for s in (63, 2**20, 2**22, 2**24, 2**30)] == [1.0, 0.6, 0.8, 0.9, 1.0]


def test_protocols_trade_latency_for_bandwidth_between_nodes():
    """NCCL's choice as its tuner makes it: LL for small messages (lowest latency), LL128 in the middle, a
    full-bandwidth protocol for large ones; each (algorithm, protocol) priced alone costs more latency and
    less bandwidth time the further it is from LL, and the pick is the cheapest of them."""
    topo = load_topology("2x8xh100-ib")
    cal = load_calibration(None, topo)
    picks = [collective("all_reduce", s, 16, topo, cal).algorithm for s in (8, 2**21, LARGE)]
    assert [p.split("/")[1] for p in picks] == ["LL", "LL128", "Simple"]
    names = [f"{a}/{p}" for a in ("ring", "tree") for p in ("LL", "LL128", "Simple")] + ["hierarchical/Simple"]
    for size in (8, 2**16, 2**21, 2**24, LARGE):
        each = {name: collective("all_reduce", size, 16, topo, cal, algorithm=name) for name in names}
        best = collective("all_reduce", size, 16, topo, cal)
        assert best.time_s == min(c.time_s for c in each.values()) and best.algorithm in each
    for algorithm in ("ring", "tree"):
        ll, ll128, simple = (collective("all_reduce", 2**21, 16, topo, cal, algorithm=f"{algorithm}/{p}")
                             for p in ("LL", "LL128", "Simple"))
        assert ll.latency_s < ll128.latency_s and ll.latency_s < simple.latency_s
        assert ll.bandwidth_s > ll128.bandwidth_s >= simple.bandwidth_s
    # the small-message latency is LL's, as before the protocols were priced
    small = collective("all_reduce", 8, 16, topo, cal)
    assert small.latency_s == pytest.approx(small.time_s, rel=1e-3)


def test_no_ll128_where_a_node_has_no_nvlink():
    """NCCL enables LL128 by default only where the node's GPUs share NVLink: not on a PCIe box."""
    topo = load_topology("2x8xl40s-eth")
    cal = load_calibration(None, topo)
    picks = {collective("all_reduce", s, 16, topo, cal).algorithm for s in (2**10, 2**17, 2**20, 2**23, LARGE)}
    assert picks and not any(p.endswith("/LL128") for p in picks)
    with pytest.raises(PlanError, match="not available"):
        collective("all_reduce", 2**20, 16, topo, cal, algorithm="tree/LL128")


# 8 x MI300X RCCL all_reduce busbw, Azure ND MI300X v5 (RCCL 2.22.3; samuel-bohman/AI-benchmarking-guide, a fork of
# Azure/AI-benchmarking-guide, Azure_Results/ND_MI300X_v5_results.md): 8 GB sets xgmi_ring_efficiency; the others
# were not used to set anything
MI300X_FIT = {8e9: 316.82}
MI300X_HELD_OUT = {2**30: 313.92, 268e6: 302.80, 16 * 2**20: 171.46}


def test_infinity_fabric_all_reduce_against_published_rccl_tests():
    """Large all-reduces on 8 x MI300X land within 5 % of the published busbw, fit and held-out points alike; at 16 MiB
    the model is ~1.6x too fast (RCCL's per-step latency on Infinity Fabric is not modelled: docs/comm.md)."""
    topo = load_topology("8xmi300x")
    calib = load_calibration(None, topo)
    busbw = {S: collective("all_reduce", S, 8, topo, calib).busbw_bytes_per_s / 1e9
             for S in {**MI300X_FIT, **MI300X_HELD_OUT}}
    for S, published in {**MI300X_FIT, 2**30: 313.92, 268e6: 302.80}.items():
        assert busbw[S] == pytest.approx(published, rel=0.05), S
    assert 1.3 < busbw[16 * 2**20] / MI300X_HELD_OUT[16 * 2**20] < 1.8


def test_deepep_normal_kernels_cross_rdma_once_per_other_node():
    """DeepEP's normal kernels send a token once to each other node holding one of its experts (then NVLink): under
    uniform routing of 8 of 256 experts over 4 nodes that is 3 x (1 - C(192, 8) / C(256, 8)) = 2.7 nodes, fewer than
    the 6 expert copies (8 x 3/4) a per-expert all-to-all sends off the node; SGLang's prefill forward across nodes
    is priced so, vLLM's (the low-latency kernels for every batch) as before."""
    from math import comb

    from mla_planner.perf.node_limited import nodes_touched
    from mla_planner.perf.layer_comm import ffn_comm
    from mla_planner.perf.layer_work import Batch
    from mla_planner.specs.calibration import load_calibration
    from mla_planner.specs.catalogue import load_model
    from mla_planner.specs.layout import Layout
    from mla_planner.specs.topology import load_topology
    assert nodes_touched(256, 8, 4) == pytest.approx(3 * (1 - comb(192, 8) / comb(256, 8)))
    assert nodes_touched(256, 8, 1) == 0 and nodes_touched(256, 1, 4) == pytest.approx(0.75)
    spec, topo = load_model("deepseek-v3").spec, load_topology("4x8xh200-ib")
    calib, layout = load_calibration(None, topo), Layout(tp=1, dp=32, ep=32)
    prefill = Batch(0, 0, 16384, 0)
    sglang = ffn_comm(spec, layout, prefill, topo, calib, True, "sglang")
    vllm = ffn_comm(spec, layout, prefill, topo, calib, True, "vllm")
    assert sglang["moe.dispatch"] < 0.6 * vllm["moe.dispatch"]
    decode = Batch(64, 4096)
    assert ffn_comm(spec, layout, decode, topo, calib, True, "sglang") == \
        ffn_comm(spec, layout, decode, topo, calib, True, "vllm")
