"""A GPU's vendor and architecture are first-class (issue 20): an NVIDIA GPU by its compute capability, an AMD Instinct
by its gfx target; a compute capability that is no NVIDIA architecture (an MI300X given as "9.4") is refused at load,
and what the planner does not model on an AMD GPU yet (verify, sparse and V4 attention) is refused in one line."""

from __future__ import annotations

import json

import pytest
import yaml

MI300X = {"name": "MI300X", "vendor": "amd", "gfx_arch": "gfx942", "memory_bytes": 205822885888,
          "hbm_bytes_per_s": 5.3e12, "bf16_flops_per_s": 1307.4e12, "fp8_flops_per_s": 2614.9e12}


def topology(tmp_path, gpu: dict, kind: str = "xgmi") -> str:
    path = tmp_path / "topo.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "nodes": 1, "gpus_per_node": 8, "gpu": gpu,
                                    "intra_node": {"kind": kind, "gbytes_per_s": 64}}))
    return str(path)


def test_show_prints_vendor_and_architecture(cli, tmp_path):
    text = cli("show", "-t", "8xh200").stdout
    assert "NVIDIA sm90, hopper" in text
    amd = topology(tmp_path, MI300X)
    assert "AMD gfx942, cdna3" in cli("show", "-t", amd).stdout
    data = json.loads(cli("show", "-t", amd, "--json").stdout)
    assert (data["gpu"]["vendor"], data["gpu_arch"], data["gpu_arch_id"]) == ("amd", "cdna3", "gfx942")
    assert json.loads(cli("show", "-t", "8xb200", "--json").stdout)["gpu_arch_id"] == "sm100"


@pytest.mark.parametrize("gpu, words", [
    ({**{k: v for k, v in MI300X.items() if k not in ("vendor", "gfx_arch")}, "compute_capability": "9.4"},
     "compute_capability 9.4 is not an NVIDIA architecture"),
    ({**MI300X, "gfx_arch": "gfx1100"}, "gfx_arch gfx1100 is not an AMD Instinct architecture"),
    ({**MI300X, "compute_capability": "9.0"}, "compute_capability is a CUDA figure"),
    ({k: v for k, v in MI300X.items() if k not in ("vendor", "gfx_arch")}, "compute_capability is required"),
])
def test_a_gpu_that_is_not_what_it_says_is_refused_at_load(cli, tmp_path, gpu, words):
    result = cli("show", "-t", topology(tmp_path, gpu))
    assert result.exit_code == 2 and words in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("model, args", [("deepseek-r1", ["verify", "--device", "cpu", "--layout", "tp=8", "--quick"]),
                                         ("deepseek-v3.2", ["verify", "--device", "cpu", "--layout", "tp=8",
                                                            "--quick"]),
                                         ("deepseek-v4-flash", ["verify", "--device", "cpu", "--layout", "tp=8",
                                                                "--quick"])])
def test_what_rocm_does_not_model_yet_is_refused_in_one_line(cli, tmp_path, model, args):
    """Dense, sparse and compressed MLA on AMD are planned (tests/test_amd.py, tests/test_amd_sparse.py); verify has
    never run on ROCm: one line, never a measurement taken as an AMD one."""
    result = cli(args[0], "-m", model, "-t", topology(tmp_path, MI300X), *args[1:])
    assert result.exit_code == 2, result.output
    assert "AMD Instinct GPU (gfx942, cdna3)" in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("how", [["--quick"], ["--plan", "PLAN", "--quick"], ["--plan", "PLAN", "--print-launch",
                                                                            "--head", "10.0.0.1"]])
def test_verify_refuses_an_amd_plan_however_the_candidate_is_named(cli, tmp_path, how):
    """Not only a --layout: candidate 1 of a fresh plan, of a plan file, and the torchrun commands for one are refused
    alike (they ran a rehearsal, and printed the commands, before)."""
    plan = tmp_path / "plan.json"
    plan.write_text(cli("plan", "-m", "deepseek-r1", "-t", "8xmi300x", "--no-disagg", "--json").stdout)
    args = [str(plan) if a == "PLAN" else a for a in how]
    named = [] if "--plan" in how else ["-m", "deepseek-r1", "-t", "8xmi300x"]
    result = cli("verify", "--device", "cpu", *named, *args)
    assert result.exit_code == 2, result.output
    assert "AMD Instinct GPU (gfx942, cdna3)" in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("topology, arch", [("4xl4", "NVIDIA sm89, ada"), ("8xb300", "NVIDIA sm103, blackwell"),
                                            ("8xmi300x", "AMD gfx942, cdna3"), ("8xmi355x", "AMD gfx950, cdna4")])
def test_the_new_built_in_topologies_show_their_gpus(cli, topology, arch):
    result = cli("show", "-t", topology)
    assert result.exit_code == 0 and arch in result.stdout


def test_amd_links_are_infinity_fabric_and_nvidia_links_are_not(cli, tmp_path):
    data = json.loads(cli("show", "-t", "8xmi355x", "--json").stdout)
    assert data["intra_node"]["kind"] == "xgmi" and data["intra_bytes_per_s"] == 537.6e9
    nvidia = {"name": "X", "compute_capability": "9.0", "memory_bytes": 80 * 10 ** 9, "hbm_bytes_per_s": 3e12,
              "bf16_flops_per_s": 1e15, "fp8_flops_per_s": 2e15, "nvlink_bytes_per_s": 4.5e11}
    result = cli("show", "-t", topology(tmp_path, nvidia, kind="xgmi"))
    assert result.exit_code == 2 and "xgmi does not go with an NVIDIA GPU" in result.stderr
