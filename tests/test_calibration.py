"""Efficiency defaults, their precedence (defaults < topology < calibration file) and the file format."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from mla_planner.core.errors import InputError
from mla_planner.specs.calibration import Calibration, dump_calibration, load_calibration
from mla_planner.specs.efficiency import default_sources, default_units, default_values, factor_names
from mla_planner.specs.topology import Topology, load_topology


def _topo(**efficiency) -> Topology:
    return Topology(name="t", nodes=1, gpus_per_node=8, gpu="H100-SXM-80G", efficiency=efficiency)


def test_every_factor_has_a_default_with_unit_and_source():
    assert set(default_values()) == set(factor_names())
    for name in factor_names():
        assert default_sources()[name].strip() and default_units()[name].strip(), name
    cal = load_calibration(None, load_topology("8xh100"))
    assert isinstance(cal, Calibration) and cal.origin == {}
    # published figures the defaults come from (NVIDIA/nccl-tests#212, #290): 370/450 ring, 47/50 per NDR NIC
    assert cal.nvlink_ring_efficiency == pytest.approx(370 / 450, rel=0.01)
    assert cal.nic_efficiency == pytest.approx(47 / 50, rel=0.01)
    assert "ai-bot-pro/achatbot#123" in cal.source("attention_hbm_efficiency")


def test_precedence_defaults_topology_file(tmp_path):
    topo = _topo(hbm_efficiency=0.9, nic_efficiency=0.5)
    path = tmp_path / "cal.yaml"
    path.write_text(dump_calibration({"hbm_efficiency": 0.8}, gpu="H100-SXM-80G", tool="test"))
    cal = load_calibration(path, topo)
    assert cal.hbm_efficiency == 0.8 and cal.origin["hbm_efficiency"].startswith("calibration")
    assert cal.nic_efficiency == 0.5 and cal.origin["nic_efficiency"] == "topology t"
    assert cal.tensor_core_efficiency == default_values()["tensor_core_efficiency"]
    assert cal.source("hbm_efficiency").endswith(str(path)) and not cal.notes


def test_calibration_file_round_trip_and_gpu_mismatch_note(tmp_path):
    path = tmp_path / "cal.yaml"
    text = dump_calibration({"kernels_per_layer": 40, "eager_layer_host_s": 1.2e-3}, gpu="H200-SXM-141G",
                            measurements={"attention_core": {"predicted_s": 1e-4, "measured_s": 1.1e-4}})
    assert yaml.safe_load(text)["format"] == "mla-plan-calibration/1"
    path.write_text(text)
    cal = load_calibration(path, _topo())
    # measured on another GPU: noted, and its factors are not applied (efficiencies belong to a GPU)
    assert "H200-SXM-141G" in cal.notes[0] and "not applied" in cal.notes[0]
    assert cal.kernels_per_layer == load_calibration(None, _topo()).kernels_per_layer
    path.write_text(text.replace("H200-SXM-141G", _topo().gpu.name))
    same = load_calibration(path, _topo())
    assert same.kernels_per_layer == 40 and same.eager_layer_host_s == 1.2e-3 and not same.notes


@pytest.mark.parametrize("body, expect", [
    ({"format": "mla-plan-calibration/1", "efficiency": {"hbm_efficency": 0.9}}, "did you mean 'hbm_efficiency'"),
    ({"format": "mla-plan-calibration/1", "efficiency": {}, "measurement": {}}, "did you mean 'measurements'"),
    ({"format": "mla-plan-calibration/2", "efficiency": {}}, "format"),
    ({"format": "mla-plan-calibration/1", "efficiency": {"hbm_efficiency": 1.5}}, "(0, 1]"),
    ({"format": "mla-plan-calibration/1", "efficiency": {"kernels_per_layer": 2.5}}, "whole number in [1, 10,000]"),
    ({"format": "mla-plan-calibration/1", "efficiency": {"nccl_base_latency_s": -1}}, "in seconds: between"),
])
def test_bad_calibration_files_are_one_line_errors(tmp_path, body, expect):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(body))
    with pytest.raises(InputError) as err:
        load_calibration(path, _topo())
    assert expect in str(err.value) and "\n" not in str(err.value)


def test_unknown_topology_efficiency_key_is_rejected():
    with pytest.raises(InputError, match="did you mean 'nic_efficiency'"):
        load_calibration(None, _topo(nic_eficiency=0.9))


def test_amd_gpus_take_their_kernels_factors_below_a_topology_and_a_file(tmp_path):
    """On an AMD topology the three factors AITER's kernel timings set (data/efficiency_vendor.yaml) replace NVIDIA's
    defaults, with their own sources; an NVIDIA topology keeps the defaults; a topology's mapping and a calibration
    file still win."""
    amd = load_calibration(None, load_topology("8xmi355x"))
    assert (amd.graph_kernel_overhead_s, amd.moe_hbm_efficiency, amd.attention_hbm_efficiency) == (4.5e-6, 0.71, 0.45)
    assert amd.hbm_efficiency == default_values()["hbm_efficiency"]
    assert "aiter" in amd.source("moe_hbm_efficiency") and "PR #5456" in amd.source("attention_hbm_efficiency")
    nvidia = load_calibration(None, load_topology("8xh100"))
    assert nvidia.moe_hbm_efficiency == default_values()["moe_hbm_efficiency"] and nvidia.origin == {}
    topo = replace(load_topology("8xmi355x"), efficiency={"moe_hbm_efficiency": 0.5})
    assert load_calibration(None, topo).moe_hbm_efficiency == 0.5
    path = tmp_path / "cal.yaml"
    path.write_text(dump_calibration({"attention_hbm_efficiency": 0.6}, gpu="MI355X-288G"))
    assert load_calibration(path, load_topology("8xmi355x")).attention_hbm_efficiency == 0.6
