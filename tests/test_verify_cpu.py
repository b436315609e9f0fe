"""`mla-plan verify --device cpu` end to end, and how it fails: the CPU rehearsal of every check but the
GPU-only judgements, the calibration it writes and the planner reads back, a topology GPU that is not
the real one, out of memory, a collective group that never forms, and no half-written calibration.
The parts checked alone: test_verify_cpu_parts.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from ports import free_port

torch = pytest.importorskip("torch")

from mla_planner.core import files as core_files
from mla_planner.search import planfile
from mla_planner.search.candidate import Performance
from mla_planner.specs.attention.cost import absorbed_core_bytes, absorbed_core_flops
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.gpu import gpu_table
from mla_planner.specs.topology import load_topology
from mla_planner.verify import env

ROOT = Path(__file__).resolve().parent.parent
SMALL = ("--device", "cpu", "--model", "deepseek-v2-lite", "--topology", "8xh200", "--layout", "tp=8", "--quick")


def run_json(cli, *args):
    r = cli("verify", *SMALL, "--json", *args)
    assert "Traceback" not in r.output, r.output
    return r, (json.loads(r.stdout) if r.stdout.strip() else None)


def by_name(data: dict) -> dict:
    return {c["name"]: c for c in data["checks"]}



def test_cpu_rehearsal_end_to_end_with_calibration(cli, tmp_path):
    cal = tmp_path / "cal.yaml"
    r, data = run_json(cli, "--write-calibration", str(cal))
    assert r.exit_code == 0, r.output
    assert {"verdict", "exit_status", "device", "target", "ranks", "checks", "calibration"} <= set(data)
    assert data["verdict"] == "rehearsal" and data["exit_status"] == 0 and data["ranks"] == [0]   # CPU: none judged
    checks = by_name(data)
    for name in ("env.gpu", "memory.fit", "attention", "gemm.attn.proj", "gemm.ffn.dense", "gemm.moe.gate",
                 "gemm.moe.shared", "gemm.moe.experts"):
        assert checks[name]["status"] == "info", (name, checks[name])   # measured, not judged on a CPU
    assert checks["collectives"]["status"] == "skip"
    # the routed experts calibrate the step model's own factor for them, not the dense GEMMs' one
    assert checks["gemm.moe.experts"]["extra"]["evidence"]["factor"] in ("moe_hbm_efficiency", "tensor_core_efficiency")
    assert data["target"]["heads_per_rank"] == 2 and data["target"]["context_len"] == 2048 + 512 // 2
    # the attention check's rates come from specs.attention.cost at the capped shape (B=2, T=128, fp32 cache)
    att = checks["attention"]["extra"]
    assert att["bytes"] == absorbed_core_bytes(2, 2, 2 * 128, 576 * 4, act_bytes=4)
    assert att["flops"] == absorbed_core_flops(2, 2 * 128)
    assert att["achieved_bytes_per_s"] == pytest.approx(att["bytes"] / checks["attention"]["measured"])
    # a time's ratio > 1 is slower; speed_vs_predicted reads the same way for times and rates (> 1 faster)
    assert checks["attention"]["speed_vs_predicted"] == pytest.approx(1 / checks["attention"]["ratio"])
    # the calibration file: the planner's loader reads it, and it says where it was measured
    topo = load_topology("8xh200")
    calib = load_calibration(cal, topo)
    assert data["calibration"]["written"] is True
    assert "hbm_efficiency" in data["calibration"]["efficiency"]
    # the attention check timed the project's fallback (no engine kernel on a CPU): it calibrates nothing, and says so
    assert checks["attention"]["extra"]["kernel"] == "fallback" and "evidence" not in checks["attention"]["extra"]
    assert not any(k.startswith("attention_") for k in data["calibration"]["efficiency"])
    assert any(line.startswith("attention (rank 0): timed the project's fallback kernel")
               for line in data["calibration"]["left_out"])
    # a CPU rehearsal's efficiencies are noted and not applied to an H200 plan
    assert "measured on cpu" in calib.notes[0] and "not applied" in calib.notes[0]
    assert calib.hbm_efficiency == load_calibration(None, topo).hbm_efficiency
    # the same file as a GPU run would write it (gpu = the topology's): read back, applied, and a second
    # run of the planner shows what changed (a CPU's efficiencies make every step much slower)
    on_gpu = tmp_path / "on_gpu.yaml"
    on_gpu.write_text(cal.read_text().replace("gpu: cpu", f"gpu: {topo.gpu.name}"))
    applied = load_calibration(on_gpu, topo)
    for name, value in data["calibration"]["efficiency"].items():
        assert getattr(applied, name) == pytest.approx(value) and applied.origin[name].startswith("calibration")
    base = cli("compare", "--model", "deepseek-v2-lite", "--topology", "8xh200", "--layout", "tp=8", "--json")
    again = cli("compare", "--model", "deepseek-v2-lite", "--topology", "8xh200", "--layout", "tp=8", "--json",
                "--calibration", str(on_gpu))
    assert base.exit_code == 0 and again.exit_code == 0, again.output
    step = lambda res: json.loads(res.stdout)["layouts"][0]["alone_tpot_s"]  # noqa: E731
    # Exactly: each calibrated GEMM's time is its bytes at the written efficiency of the H200's HBM rate (a CPU's
    # factors, ~0.004-0.01, make every GEMM memory-bound), whatever this CPU's speed.
    layer = json.loads(again.stdout)["layouts"][0]["detail"]["layers"]["moe"]
    eff, hbm = data["calibration"]["efficiency"], topo.gpu.hbm_bytes_per_s
    for op, factor in (("attn.proj", "hbm_efficiency"), ("moe.experts", "moe_hbm_efficiency")):
        assert layer["terms_s"][op] == pytest.approx(layer["bytes"][op] / (hbm * eff[factor]), rel=1e-9), op
    # Roughly: the step grows by the GEMMs' share. It used to grow > 10x when the attention factor came from the
    # CPU's fallback kernel too; without it (the fallback calibrates nothing) it grew 8.7x-11.5x over four runs
    # here (two cores), and less on a faster CPU (higher factors): > 3x says the file was applied, not how fast
    # this CPU is
    assert step(again) > 3 * step(base)


def test_table_output_and_plan_file_candidate(cli, tmp_path):
    spec, topo = load_model("deepseek-v2-lite").spec, load_topology("8xh200")
    cands = [planfile.Candidate(Layout(tp=tp), Knobs(block_size=64, max_model_len=2560, memory_fraction=0.9),
                                performance=Performance(concurrency_per_dp_rank=7)) for tp in (8, 4)]
    plan = planfile.Plan(spec, "deepseek-ai/DeepSeek-V2-Lite", topo, Workload(), cands)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(planfile.plan_to_dict(plan)))
    r = cli("verify", "--plan", str(path), "--candidate", "2", "--device", "cpu", "--quick", "--only", "attention")
    assert r.exit_code == 0, r.output
    for needle in ("tp4 on 8xh200", "candidate 2", "batch 7 per DP rank", "block 64", "attention", "INFO",
                   "REHEARSAL RAN", "achieved (predicted)"):
        assert needle in r.stdout, needle
    assert "gemm.attn.proj" not in r.stdout
    bad = cli("verify", "--plan", str(path), "--candidate", "3", "--device", "cpu")
    assert bad.exit_code == 2 and "out of range 1..2" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    both = cli("verify", "--plan", str(path), "--layout", "tp=8", "--device", "cpu")
    assert both.exit_code == 2 and "not both" in both.stderr


def test_topology_gpu_mismatch_stops_the_gpu_checks(cli, monkeypatch):
    fake = env.DeviceInfo("cuda", "NVIDIA A100-SXM4-80GB", 85_000_000_000, "8.0", torch.__version__, "12.4",
                          True, False)
    monkeypatch.setattr(env, "probe_device", lambda device, local_rank=0: fake)
    r = cli("verify", *SMALL, "--json")
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["verdict"] == "fail"
    checks = by_name(data)
    assert checks["env.gpu"]["status"] == "fail"
    assert "A100" in checks["env.gpu"]["detail"] and "H200-SXM-141G" in checks["env.gpu"]["detail"]
    for name in ("fit", "attention", "gemms"):
        assert checks[name]["status"] == "skip" and "not the topology's" in checks[name]["detail"]
    h200 = gpu_table()["H200-SXM-141G"]
    real = replace(fake, name="NVIDIA H200", memory_bytes=143771 * 2**20, compute_capability="9.0")
    assert env.gpu_mismatches(real, h200) == []
    assert env.gpu_mismatches(replace(real, name="NVIDIA H20"), h200)            # H20 is not H200
    assert env.gpu_mismatches(replace(real, name="NVIDIA H100 PCIe", memory_bytes=85 * 10**9),
                              gpu_table()["H100-SXM-80G"])


def test_out_of_memory_is_a_failed_check(cli):
    r, data = run_json(cli, "--only", "fit", "--memory-limit-gib", "40")
    assert r.exit_code == 1 and data["verdict"] == "fail"
    fit = by_name(data)["memory.fit"]
    assert fit["status"] == "fail" and fit["error"] is None
    assert "simulated out of memory" in fit["detail"] and "does not fit this GPU" in fit["detail"]


def test_collective_group_that_never_forms(cli, monkeypatch, tmp_path):
    """WORLD_SIZE=2 but only rank 0 ever starts: the rendezvous times out -> an errored check, exit 1, and
    an existing calibration file is left exactly as it was."""
    cal = tmp_path / "cal.yaml"
    cal.write_text("keep me\n")
    for key, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(key, value)
    r, data = run_json(cli, "--only", "collectives", "--timeout", "2", "--write-calibration", str(cal))
    assert r.exit_code == 1 and data["verdict"] == "error"
    err = by_name(data)["collectives"]["error"]
    assert "rank 0 of 2" in err and "did not form within 2 s" in err and "\n" not in err
    assert data["calibration"]["written"] is False and "errored" in data["calibration"]["reason"]
    assert cal.read_text() == "keep me\n" and sorted(os.listdir(tmp_path)) == ["cal.yaml"]


def test_calibration_write_failure_leaves_nothing(cli, monkeypatch, tmp_path):
    def refuse(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(core_files.os, "replace", refuse)   # core/files.atomic_write writes the file
    cal = tmp_path / "cal.yaml"
    r = cli("verify", *SMALL, "--only", "gemms", "--write-calibration", str(cal))
    assert r.exit_code == 2 and "No space left on device" in r.stderr and "Traceback" not in r.output
    assert os.listdir(tmp_path) == []
    nothing = cli("verify", *SMALL, "--only", "fit", "--write-calibration", str(cal))
    assert nothing.exit_code == 2 and "no passing check measured an efficiency factor" in nothing.stderr
    fallback = cli("verify", *SMALL, "--only", "attention", "--write-calibration", str(cal))   # the fallback kernel
    assert fallback.exit_code == 2 and "timed the project's fallback kernel" in fallback.stderr
    assert os.listdir(tmp_path) == []


def test_an_unwritable_calibration_path_fails_before_any_check(cli, tmp_path, monkeypatch):
    """A folder (or a missing parent) for --write-calibration is bad input found up front, not after the
    minutes the checks take on a cluster."""
    from mla_planner.verify import checks
    monkeypatch.setattr(checks, "run_checks", lambda *a, **k: pytest.fail("checks ran"))
    for where in (tmp_path, tmp_path / "missing" / "cal.yaml"):
        r = cli("verify", *SMALL, "--write-calibration", str(where))
        assert r.exit_code == 2 and "--write-calibration" in r.stderr and "Traceback" not in r.output


def test_no_torch_no_gpu_and_bad_flags(cli, monkeypatch):
    bad = cli("verify", *SMALL, "--only", "nonsense")
    assert bad.exit_code == 2 and "unknown check 'nonsense'" in bad.stderr
    nothing = cli("verify", "--device", "cpu", "--model", "deepseek-v3", "--topology", "8xh100")  # plans: no fit
    assert nothing.exit_code == 2 and "no candidates" in nothing.stderr
    if not torch.cuda.is_available():
        r = cli("verify", "--model", "deepseek-v2-lite", "--topology", "8xh200", "--layout", "tp=8")
        assert r.exit_code == 2 and "no CUDA GPU is visible" in r.stderr and "Traceback" not in r.output
    monkeypatch.setitem(sys.modules, "torch", None)
    r = cli("verify", *SMALL)
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "verify needs torch: pip install 'mla-plan[verify]'" in r.stderr


def test_a_hung_collective_ends_with_one_line():
    code = ("import time\nfrom mla_planner.verify.collectives import watchdog\n"
            "with watchdog(0.5, 'collective all_reduce'):\n    time.sleep(30)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr.strip().splitlines() == [
        "error: collective all_reduce did not finish within 0.5 s (a rank is missing, or a collective hung); "
        "verify gave up"]


def test_without_plan_or_layout_verify_plans_with_the_same_options(cli):
    r = cli("verify", "--device", "cpu", "--model", "deepseek-v2-lite", "--topology", "8xh200", "--quick",
            "--only", "attention", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert "candidate 1 of the plan for deepseek-v2-lite on 8xh200" in json.dumps(data)


def test_a_batch_beyond_the_kv_pool_is_noted(cli):
    r = cli("verify", *SMALL, "--only", "attention", "--batch", "100000000", "--json")
    assert r.exit_code in (0, 1), r.output
    assert "more than the KV pool holds" in r.stdout
