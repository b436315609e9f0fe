"""NCCL's NVLink SHARP buffers in vLLM's memory (memory.terms.nvls_buffer_bytes): sized by the rule of the NCCL
vLLM 0.8 ran, which allocates them as each communicator is created, and absent where NVLS is off."""

from dataclasses import replace

import pytest
from memory_cases import GiB, V3, knobs_for

from mla_planner.engines.memory_rules import engine_rules
from mla_planner.memory.report import memory_report
from mla_planner.memory.terms import comm_groups, nccl_buffer_bytes, nvls_buffer_bytes, profiled_communicator_bytes
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

MiB = 2 ** 20
NCCL_2_21 = 3          # MiB per channel and head: 1 MiB of data + 2 MiB of head and tail (nvls.cc at v2.21.5-1)


def test_the_size_is_channels_x_2_x_the_mib_per_channel_head_x_the_communicators_gpus_on_a_host():
    h100, h800 = load_topology("8xh100"), load_topology("4x8xh800-roce")
    assert nvls_buffer_bytes(h100, 8, 8, NCCL_2_21) == 24 * 2 * 3 * MiB * 8        # 1.125 GiB
    assert nvls_buffer_bytes(h100, 4, 4, NCCL_2_21) == 24 * 2 * 3 * MiB * 4
    assert nvls_buffer_bytes(h800, 8, 8, NCCL_2_21) == 16 * 2 * 3 * MiB * 8        # 0.75 GiB


def test_across_hosts_the_heads_are_bound_by_the_nics_and_the_channels_by_the_network():
    """search.cc: a multi-node NVLS graph's heads are GPU:NIC pairs; NVIDIA/nccl#1453 rings 16 channels across
    3 x 8 H100 where one host rings 24."""
    eight_nics, one_nic = load_topology("2x8xh100-ib"), load_topology("2x8xh100-ib-1nic")
    assert eight_nics.inter_node.nics_per_node == 8
    assert nvls_buffer_bytes(eight_nics, 16, 16, NCCL_2_21) == 16 * 2 * 3 * MiB * 8
    assert nvls_buffer_bytes(one_nic, 16, 16, NCCL_2_21) == 16 * 2 * 3 * MiB * 1
    assert nvls_buffer_bytes(one_nic, 8, 8, NCCL_2_21) == 24 * 2 * 3 * MiB * 8       # inside one host: no NIC


def test_no_nvls_where_nccl_keeps_it_off():
    """ncclNvlsInit: not with 2 or fewer of the communicator's GPUs on a host (it counts the communicator's own), nor
    without multicast (PCIe, AMD, or a topology that says nvls: false), nor where the NCCL allocates at first use."""
    h100 = load_topology("8xh100")
    assert nvls_buffer_bytes(h100, 2, 2, NCCL_2_21) == 0.0
    assert nvls_buffer_bytes(h100, 2, 8, NCCL_2_21) == 0.0                 # a PP pair 4 GPUs apart
    assert nvls_buffer_bytes(h100, 4, 8, NCCL_2_21) > 0                    # PP 4 over TP 2: 4 GPUs on the host
    assert nvls_buffer_bytes(h100, 8, 8, 0.0) == 0.0
    assert nvls_buffer_bytes(load_topology("4xl4"), 4, 4, NCCL_2_21) == 0.0
    assert nvls_buffer_bytes(load_topology("8xmi300x"), 8, 8, NCCL_2_21) == 0.0
    off = replace(h100, intra_node=replace(h100.intra_node, nvls=False))
    assert nvls_buffer_bytes(off, 8, 8, NCCL_2_21) == 0.0


def test_a_vllm_dp_groups_gpus_lie_tp_x_pp_apart():
    """vLLM numbers ranks DP-major, then PP, then TP (parallel_state.py), so at DP 4 x PP 2 x TP 2 on 16 GPUs a DP
    group spans all 16 and holds 2 GPUs of each host: no NVLS there."""
    groups = {name: (size, span) for name, size, span in comm_groups(Layout(tp=2, pp=2, dp=4))}
    assert groups["dp"] == (4, 16) and groups["pp"] == (2, 4) and groups["tp"] == (2, 2)
    assert nvls_buffer_bytes(load_topology("2x8xh100-ib"), *groups["dp"], NCCL_2_21) == 0.0


def test_the_mib_per_channel_head_follows_the_nccl_each_vllm_release_ran():
    """vLLM 0.8.x ran NCCL 2.21.5 (1 MiB + 2 MiB at creation); 0.9.0's NCCL 2.26.2 allocates at first use; SGLang
    turns NVLS off."""
    versions = ("0.8.0", "0.8.4", "0.8.5", "0.9.0", "0.11.1", "0.33.0")
    assert [engine_rules("vllm", v).nvls_at_init_mib for v in versions] == [3, 3, 3, 0, 0, 0]
    assert engine_rules("sglang", "0.4.3").nvls_at_init_mib == 0
    h100, layout = load_topology("8xh100"), Layout(tp=8)
    nvls = nvls_buffer_bytes(h100, 8, 8, NCCL_2_21)
    assert nccl_buffer_bytes(layout, h100, "vllm", nvls_mib=NCCL_2_21) - nccl_buffer_bytes(layout, h100, "vllm") == \
        pytest.approx(nvls)
    assert profiled_communicator_bytes(layout, h100, NCCL_2_21) - profiled_communicator_bytes(layout, h100) == \
        pytest.approx(nvls)


def test_vllm_0_8_charges_both_communicators_nvls_buffers_to_the_kv_budget():
    """On 8 x H200 at TP8, vLLM 0.8.4's pool is smaller by two communicators' NVLS buffers (its own TP communicator
    and the one torch creates in the profile run) than with NVLS off; 0.9's is not."""
    h200 = load_topology("8xh200")
    off = replace(h200, intra_node=replace(h200.intra_node, nvls=False))
    knobs = knobs_for("vllm", h200, memory_fraction=0.9, max_model_len=4096)
    def pool(topo, version):
        return memory_report(V3, topo, Layout(tp=8), knobs, engine_version=version).per_gpu[0].kv_pool_bytes
    assert pool(h200, "0.8.4") > 0
    assert pool(off, "0.8.4") - pool(h200, "0.8.4") == pytest.approx(2 * nvls_buffer_bytes(h200, 8, 8, NCCL_2_21),
                                                                      abs=knobs.block_size * 70_272)
    assert pool(off, "0.9.0") == pool(h200, "0.9.0")
    assert 2 * nvls_buffer_bytes(h200, 8, 8, NCCL_2_21) == 2.25 * GiB
