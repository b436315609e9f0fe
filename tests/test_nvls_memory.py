"""NCCL's NVLink SHARP buffers in vLLM's memory (memory.terms.nvls_buffer_bytes): sized by NCCL 2.21's rule where
NCCL allocates them as each communicator is created (vLLM < 0.9), and absent where NVLS is off."""

from dataclasses import replace

import pytest
from memory_cases import GiB, V3, knobs_for

from mla_planner.engines.memory_rules import engine_rules
from mla_planner.memory.report import memory_report
from mla_planner.memory.terms import nccl_buffer_bytes, nvls_buffer_bytes, profiled_communicator_bytes
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

MiB = 2 ** 20


def test_the_size_is_nccls_channels_x_2_x_3_mib_x_the_communicators_gpus_on_a_host():
    """nvls.cc at v2.21.5-1: comm->nChannels x 2 x (1 MiB + 2 MiB) x nHeads, one head per GPU of the node."""
    h100, h800 = load_topology("8xh100"), load_topology("4x8xh800-roce")
    assert nvls_buffer_bytes(h100, 8, 8) == 24 * 2 * 3 * MiB * 8        # 1.125 GiB
    assert nvls_buffer_bytes(h100, 4, 4) == 24 * 2 * 3 * MiB * 4
    assert nvls_buffer_bytes(h800, 8, 8) == 16 * 2 * 3 * MiB * 8        # 0.75 GiB
    assert nvls_buffer_bytes(h800, 16, 16) == nvls_buffer_bytes(h800, 8, 8)    # 8 heads per node across nodes


def test_no_nvls_where_nccl_keeps_it_off():
    """ncclNvlsInit: not with 2 or fewer of the communicator's GPUs on a host, nor without multicast (PCIe, AMD,
    or a topology that says nvls: false)."""
    h100 = load_topology("8xh100")
    assert nvls_buffer_bytes(h100, 2, 2) == 0.0
    assert nvls_buffer_bytes(h100, 2, 8) == 0.0                 # a PP pair 4 GPUs apart
    assert nvls_buffer_bytes(h100, 4, 8) > 0                    # PP 4 over TP 2: 4 GPUs of the group on the host
    assert nvls_buffer_bytes(load_topology("4xl4"), 4, 4) == 0.0
    assert nvls_buffer_bytes(load_topology("8xmi300x"), 8, 8) == 0.0
    off = replace(h100, intra_node=replace(h100.intra_node, nvls=False))
    assert nvls_buffer_bytes(off, 8, 8) == 0.0


def test_only_vllm_before_0_9_allocates_them_with_each_communicator():
    """vLLM 0.8.x ran NCCL 2.21.5 (torch 2.6.0's pin); NCCL 2.22 and later allocate at a communicator's first NVLS
    collective, and SGLang turns NVLS off."""
    assert [engine_rules("vllm", v).nvls_at_init for v in ("0.8.4", "0.8.5", "0.9.0", "0.11.1", "0.33.0")] == \
        [True, True, False, False, False]
    assert not engine_rules("sglang", "0.4.3").nvls_at_init
    h100, layout = load_topology("8xh100"), Layout(tp=8)
    group = nccl_buffer_bytes(layout, h100, "vllm")
    assert nccl_buffer_bytes(layout, h100, "vllm", nvls=True) - group == pytest.approx(nvls_buffer_bytes(h100, 8, 8))
    assert profiled_communicator_bytes(layout, h100, nvls=True) - profiled_communicator_bytes(layout, h100) == \
        pytest.approx(nvls_buffer_bytes(h100, 8, 8))


def test_vllm_0_8_charges_both_communicators_nvls_buffers_to_the_kv_budget():
    """On 8 x H200 at TP8, vLLM 0.8.4's pool is smaller by two communicators' NVLS buffers (its own TP communicator
    and the one torch creates in the profile run) than with NVLS off; 0.9's is not."""
    h200 = load_topology("8xh200")
    off = replace(h200, intra_node=replace(h200.intra_node, nvls=False))
    knobs = knobs_for("vllm", h200, memory_fraction=0.9, max_model_len=4096)
    def pool(topo, version):
        return memory_report(V3, topo, Layout(tp=8), knobs, engine_version=version).per_gpu[0].kv_pool_bytes
    assert pool(h200, "0.8.4") > 0
    assert pool(off, "0.8.4") - pool(h200, "0.8.4") == pytest.approx(2 * nvls_buffer_bytes(h200, 8, 8),
                                                                      abs=knobs.block_size * 70_272)
    assert pool(off, "0.9.0") == pool(h200, "0.9.0")
    assert 2 * nvls_buffer_bytes(h200, 8, 8) == 2.25 * GiB
