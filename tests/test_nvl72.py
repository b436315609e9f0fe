"""Rack-scale NVLink (issue 20): a GB200 NVL72 is 18 hosts of 4 GPUs in one NVLink domain (NVIDIA multi-node NVLink
tuning guide: 18 compute trays x 4 GPUs, 9 switch trays). Collectives and DeepEP inside the domain go over NVLink,
TP / EP / DP attention may span trays, and the launch scripts stay one per 4-GPU host."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from mla_planner.perf.layer_comm import _ct
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.topology import load_topology


def test_show_says_how_the_hosts_form_the_domain(cli):
    text = cli("show", "-t", "gb200-nvl72").stdout
    assert "18 hosts x 4 GPUs = 72 GPUs (1 domain)" in text
    data = json.loads(cli("show", "-t", "gb300-nvl72", "--json").stdout)
    assert (data["nvlink_domain_nodes"], data["domain_gpus"], data["gpu"]["name"]) == (18, 72, "GB300")


def test_a_group_across_trays_is_priced_over_nvlink_not_the_nics():
    """The same 8-GPU all-reduce over two 4-GPU hosts: inside an NVL72 over NVLink, between two ordinary hosts over
    their NICs (several times slower at a bandwidth-bound size)."""
    rack = load_topology("gb200-nvl72")
    hosts = replace(rack, nvlink_domain_nodes=1)
    nbytes = 64 * 2 ** 20
    over_nvlink = _ct("all_reduce", nbytes, 8, rack, load_calibration(None, rack))
    over_nics = _ct("all_reduce", nbytes, 8, hosts, load_calibration(None, hosts))
    assert over_nics > 3 * over_nvlink


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    from click.testing import CliRunner
    from mla_planner.cli.app import app
    folder = tmp_path_factory.mktemp("nvl72")
    result = CliRunner().invoke(app, ["plan", "-m", "deepseek-r1", "-t", "gb200-nvl72", "--explain", "--json"])
    assert result.exit_code in (0, 1), result.output
    (folder / "plan.json").write_text(result.stdout)
    return folder, json.loads(result.stdout)


def test_plan_considers_tp_ep_and_dp_attention_across_trays(plan):
    _, data = plan
    across = [c for c in data["candidates"] if c["layout"]["tp"] * c["layout"]["dp"] > 4]
    assert any(c["layout"]["dp"] > 4 and c["layout"]["ep"] > 4 for c in across)     # DP attention + wide EP
    assert any(c["layout"]["dp"] == 1 and c["layout"]["tp"] >= 8 for c in across)   # TP over two trays
    # TP inside the domain is not the cross-node TP the model warns about (every all-reduce over the NICs)
    assert not any("tensor parallelism spans" in w for c in across for w in c["warnings"])


def test_emit_writes_one_script_per_host_and_none_claims_more_than_its_gpus(plan, cli):
    folder, data = plan
    out = folder / "emit"
    result = cli("emit", "-p", str(folder / "plan.json"), "-o", str(out))
    assert result.exit_code == 0, result.output
    scripts = sorted(Path(out).glob("node-*.sh"))
    assert len(scripts) == 18
    for script in scripts:
        text = script.read_text()
        assert "NCCL_MNNVL_ENABLE=1" in text and "IMEX" in text
        for word in text.split():
            if word.startswith("CUDA_VISIBLE_DEVICES="):
                assert all(int(g) < 4 for g in word.split("=", 1)[1].strip("'\"").split(","))


@pytest.mark.parametrize("update, words", [({"nvlink_domain_nodes": 5}, "is not a whole number of NVLink domains"),
                                           ({"intra_node": {"kind": "pcie"}}, "only over NVLink switches")])
def test_a_domain_that_cannot_be_is_refused(cli, tmp_path, update, words):
    data = yaml.safe_load(Path("topologies/gb200-nvl72.yaml").read_text()) | update
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    result = cli("show", "-t", str(path))
    assert result.exit_code == 2 and words in result.stderr
