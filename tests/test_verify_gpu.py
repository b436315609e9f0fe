"""CUDA twin of test_verify_cpu: `mla-plan verify --device cuda` on this GPU at the plan's own shapes
(no CPU caps): every check runs and is judged, none errors, the calibration is written and read back,
and the fit check's out-of-memory path is a failed check. The topology is the built-in one of this GPU's
family; other GPUs skip. Whether a judged check *passes* is a finding about the model, not a test
failure, so the verdict may be pass, fail or not_verified (one process measures no TP collective; attention
timed with the project's fallback where the engine's kernel is not importable) — but never error."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.topology import load_topology

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

TOPOLOGY_OF = {"H200": "8xh200", "H100": "8xh100", "B200": "8xb200"}


@pytest.fixture(scope="module")
def topology() -> str:
    name = torch.cuda.get_device_name(0)
    match = next((topo for family, topo in TOPOLOGY_OF.items() if f"{family} " in name + " "), None)
    if match is None:
        pytest.skip(f"no built-in 8-GPU topology for {name}")
    return match


def verify(cli, topology: str, *extra: str):
    r = cli("verify", "--device", "cuda", "--model", "deepseek-v3", "--topology", topology, "--layout", "tp=8",
            "--quick", "--json", *extra)
    assert "Traceback" not in r.output, r.output
    return r, json.loads(r.stdout)


def test_verify_on_this_gpu_at_planned_shapes(cli, topology, tmp_path):
    cal = tmp_path / "cal.yaml"
    r, data = verify(cli, topology, "--write-calibration", str(cal))
    checks = {c["name"]: c for c in data["checks"]}
    assert r.exit_code in (0, 1) and data["verdict"] in ("pass", "fail", "not_verified"), \
        json.dumps(data["checks"], indent=1)
    assert not [c for c in data["checks"] if c["status"] == "error"]
    assert checks["env.gpu"]["status"] == "pass", checks["env.gpu"]["detail"]
    assert checks["memory.fit"]["status"] == "pass", checks["memory.fit"]["detail"]
    att = checks["attention"]
    assert att["extra"]["output_check"]["ok"], att["detail"]          # checked against the fp64 reference first
    if att["extra"]["kernel"] == "engine":                            # the plan's backend's own kernel: judged
        assert att["status"] in ("pass", "fail") and "evidence" in att["extra"]
    else:                                                             # the project's fallback: reported, not judged
        assert att["status"] == "info" and "triton-splitk" in att["detail"] and "evidence" not in att["extra"]
        assert any("attention with the engine's kernel" in m for m in data["missing"])
    assert f"B={data['target']['micro_batch']} x T={data['target']['context_len']}" in att["detail"]  # planned shape
    for name in ("gemm.attn.proj", "gemm.moe.gate", "gemm.moe.shared", "gemm.moe.experts"):
        assert checks[name]["status"] in ("pass", "fail") and checks[name]["measured"] > 0, name
    assert checks.get("gemm.attn.proj[fp8]", {"status": "skip"})["status"] != "error"
    assert "collective.all_reduce over 8 ranks: 1 of 1 group(s)" in data["missing"]   # one process: not verified
    timed = [c for c in data["checks"] if "evidence" in c["extra"]]      # the checks that carry a factor
    if not data["calibration"]["written"]:       # only when none of them passed: the reason names each one's FAIL
        reason = data["calibration"]["reason"]
        assert timed and not [c for c in timed if c["status"] == "pass"], reason
        assert "no passing check" in reason and all(f"{c['name']} (rank 0): FAIL" in reason for c in timed), reason
        return
    assert {c["extra"]["evidence"]["factor"] for c in timed if c["status"] == "pass"} <= \
        set(data["calibration"]["efficiency"])                        # every passing check's factor was written
    calib = load_calibration(cal, load_topology(topology))
    assert not calib.notes                                            # measured on the topology's own GPU
    for name, value in data["calibration"]["efficiency"].items():
        assert 0 < value <= 1 and getattr(calib, name) == pytest.approx(value)


def test_an_fp8_plan_reads_an_fp8_cache_on_this_gpu(cli, topology):
    """The plan's fp8 KV cache on the GPU: the engine's fp8 kernel where importable (vLLM's dense FlashMLA fp8),
    else the Triton fast path over the cache dequantised in the call; either way the output is checked."""
    r, data = verify(cli, topology, "--kv-cache-dtype", "fp8", "--block-size", "64", "--only", "attention")
    att = {c["name"]: c for c in data["checks"]}["attention"]
    assert att["status"] != "error" and att["extra"]["output_check"]["ok"], att["detail"]
    assert att["extra"]["kv_cache"].startswith("float8_e4m3fn cache") and att["measured"] > 0


def test_cuda_out_of_memory_is_a_failed_check(cli, topology):
    r, data = verify(cli, topology, "--only", "fit", "--memory-limit-gib", "20")
    fit = {c["name"]: c for c in data["checks"]}["memory.fit"]
    assert r.exit_code == 1 and fit["status"] == "fail" and "CUDA out of memory" in fit["detail"]
    assert torch.cuda.memory_allocated() < 2**30      # everything the check took was given back
