"""The all-reduce the engines run inside one NVLink or Infinity Fabric domain (perf/custom_all_reduce.py): their own
one-shot and two-shot / multimem kernels below 64 MiB, NCCL's model above it, over PCIe and across domains. The
published kernel figures are validate's `engine-ar-*` rows; here the dispatch."""

from dataclasses import replace

import pytest

from mla_planner.core.errors import PlanError
from mla_planner.perf.comm import collective
from mla_planner.perf.custom_all_reduce import engine_all_reduce, kernel_time_s
from mla_planner.perf.layer_comm import attention_comm
from mla_planner.perf.layer_work import Batch
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

KIB, MIB = 1024, 1024 * 1024


def setting(name: str):
    topo = load_topology(name)
    return topo, load_calibration(None, topo)


def test_decode_sizes_run_the_engines_kernels_below_nccls_latency():
    topo, calib = setting("8xh200")
    one_token = 7168 * 2                                   # DeepSeek's hidden state, bf16
    kernel, seconds = engine_all_reduce(one_token, 8, topo, calib)
    assert kernel == "one_shot" and seconds == pytest.approx(5.8e-6 + one_token / 55.3e9)
    assert seconds < 0.6 * collective("all_reduce", one_token, 8, topo, calib).time_s      # NCCL's ~12 us
    assert engine_all_reduce(4 * MIB, 8, topo, calib)[0] == "two_shot"                      # multimem past ~0.4 MiB
    big = engine_all_reduce(32 * MIB, 8, topo, calib)                                      # past the 16 MiB cap
    assert big[0] not in ("one_shot", "two_shot")
    assert big[1] == collective("all_reduce", 32 * MIB, 8, topo, calib).time_s


def test_the_switch_is_where_two_shot_gets_faster():
    topo, _ = setting("8xh100")
    sizes = [2 ** k for k in range(11, 26)]
    faster = [kernel_time_s("two_shot", s, topo) < kernel_time_s("one_shot", s, topo) for s in sizes]
    assert faster == sorted(faster) and not faster[0] and faster[-1]        # one switch, from one-shot to two-shot


def test_pcie_and_groups_across_nodes_stay_with_nccl():
    l4, calib = setting("4xl4")
    assert engine_all_reduce(16 * KIB, 4, l4, calib)[1] == collective("all_reduce", 16 * KIB, 4, l4, calib).time_s
    two, calib2 = setting("2x8xh100-ib")
    across = engine_all_reduce(16 * KIB, 16, two, calib2)
    assert across[1] == collective("all_reduce", 16 * KIB, 16, two, calib2, True).time_s
    rack, calib3 = setting("gb200-nvl72")
    assert engine_all_reduce(16 * KIB, 8, rack, calib3)[0] == "one_shot"       # two trays of one NVLink domain
    tp16 = engine_all_reduce(16 * KIB, 16, rack, calib3)                      # past the engines' 8-GPU kernels
    assert tp16[1] == collective("all_reduce", 16 * KIB, 16, rack, calib3, False).time_s


def test_amd_prices_its_own_line_and_names_what_it_lacks():
    topo, calib = setting("8xmi355x")
    assert engine_all_reduce(192 * KIB, 8, topo, calib) == ("two_shot", pytest.approx(10.03e-6, rel=0.01))
    with pytest.raises(PlanError, match="no one_shot all-reduce line for amd"):
        kernel_time_s("one_shot", 24 * KIB, topo)


def test_the_step_models_tp_all_reduce_is_the_engines():
    topo, calib = setting("8xh200")
    spec = load_model("deepseek-v3").spec
    comm = attention_comm(spec, Layout(tp=8), Batch(4, 2048), topo, calib)
    assert comm["attn.tp_all_reduce"] == engine_all_reduce(4 * 7168 * 2, 8, topo, calib)[1]
    pcie = replace(topo, intra_node=replace(topo.intra_node, kind="pcie"))
    slow = attention_comm(spec, Layout(tp=8), Batch(4, 2048), pcie, calib)["attn.tp_all_reduce"]
    assert slow == collective("all_reduce", 4 * 7168 * 2, 8, pcie, calib, False).time_s > comm["attn.tp_all_reduce"]


def test_fewer_gpus_move_fewer_bytes_and_a_faster_link_moves_them_sooner():
    """At g GPUs a one-shot GPU reads g - 1 peers' buffers, a two-shot one moves 2 (g - 1) / g of the message: the
    8-GPU lines' bandwidth terms scale by that; and by the link against H100's 450 GB/s."""
    h100, _ = setting("8xh100")
    size = 1 * MIB
    for kernel, moved in (("one_shot", 1 / 7), ("two_shot", 1 / 1.75)):
        latency = kernel_time_s(kernel, 0, h100, 2)
        assert kernel_time_s(kernel, size, h100, 2) - latency == pytest.approx(
            moved * (kernel_time_s(kernel, size, h100, 8) - latency))
    b200, _ = setting("8xb200")
    latency = kernel_time_s("two_shot", 0, b200)
    assert kernel_time_s("two_shot", size, b200) - latency == pytest.approx((kernel_time_s("two_shot", size, h100)
                                                                             - latency) / 2)
