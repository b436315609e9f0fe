"""`mla-plan verify --device cpu`, its parts checked alone: the calibration arithmetic (efficiency, latency
evidence, the cross-node all-reduce), the FP8 GEMM runner on the CPU, ranks to stages, and --print-launch
(per-node commands, one node, absolute paths for the other nodes)."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from mla_planner.perf.comm import collective
from mla_planner.specs.calibration import dump_calibration, load_calibration
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology
from mla_planner.verify import calibrate
from mla_planner.verify.check import Check
from mla_planner.verify.collectives import _evidence
from mla_planner.verify.gemms import Gemm, fp8_runner


def test_efficiency_is_total_work_over_total_time():
    def timed(factor, amount, seconds, peak=1e12):
        return Check("x", 1.0, 1.0, "s", 1.0, "", True, extra={"evidence": {
            "factor": factor, "amount": amount, "seconds": seconds, "peak": peak}})
    checks = [timed("hbm_efficiency", 6e8, 1e-3), timed("hbm_efficiency", 2e8, 1e-3),
              timed("nic_efficiency", 5e9, 1e-3)]
    written, clipped = calibrate.factors(checks)
    assert written == {"hbm_efficiency": pytest.approx(0.4), "nic_efficiency": 1.0}
    assert clipped == {"nic_efficiency": pytest.approx(5.0)}            # measured above 1, written as 1


def test_latency_evidence_is_averaged_not_capped():
    def lat(value):
        return Check("x", 1.0, 1.0, "s", 1.0, "", True, extra={"evidence": {
            "factor": "internode_latency_s", "value": value, "seconds": 1e-4}})
    assert calibrate.factors([lat(30e-6), lat(50e-6)])[0] == {"internode_latency_s": pytest.approx(40e-6)}


def test_cross_node_all_reduce_calibrates_the_internode_latency():
    """A decode all-reduce over 16 GPUs on 2 nodes (2.8 MB: latency-bound) measured at 140 us implies the
    internode latency that, fed back through a calibration, predicts exactly 140 us; a bandwidth-bound
    1 GiB one calibrates nothing (its bandwidth term mixes NVLink and NIC rates), nor does one faster than
    the model's latency without the internode term. Only the timing inside a step calibrates it (what the
    step model prices, verify/in_step.py); the back-to-back one, nccl-tests style, does not."""
    topo = load_topology("2x8xh100-ib")
    cal = load_calibration(None, topo)
    small = collective("all_reduce", 274 * 5120 * 2, 16, topo, cal)
    assert small.nodes == 2 and small.latency_s >= small.bandwidth_s
    assert _evidence(topo, cal, small, 140e-6) is None
    ev = _evidence(topo, cal, small, 140e-6, in_step=True)
    assert ev["factor"] == "internode_latency_s" and ev["value"] > cal.internode_latency_s
    again = collective("all_reduce", 274 * 5120 * 2, 16, topo, replace(cal, internode_latency_s=ev["value"]))
    assert again.time_s == pytest.approx(140e-6)
    big = collective("all_reduce", 2**30, 16, topo, cal)
    assert big.latency_s < big.bandwidth_s and _evidence(topo, cal, big, 2 * big.time_s, in_step=True) is None
    too_fast = 0.5 * (small.time_s - cal.internode_latency_s)
    assert _evidence(topo, cal, small, too_fast, in_step=True) is None


def test_fp8_gemm_runner_on_cpu():
    run, check = fp8_runner(Gemm("wq_a", 1, 5, 64, 32), torch.device("cpu"))
    out = run()
    assert out.shape == (16, 32) and out.dtype == torch.bfloat16   # rows padded to 16
    assert check(out).ok and not check(out * 1.05).ok               # checked against the fp64 product


def test_print_launch_per_node_commands_shell_quoted(cli, tmp_path):
    cal = tmp_path / "my cal.yaml"
    cal.write_text(dump_calibration({"hbm_efficiency": 0.8}))
    r = cli("verify", "--model", "deepseek-v3", "--topology", "2x8xh200-ib", "--layout", "tp=8,pp=2",
            "--calibration", str(cal), "--quick", "--print-launch", "--port", "29511")
    assert r.exit_code == 0, r.output
    commands = [ln for ln in r.stdout.splitlines() if not ln.startswith("#")]
    assert len(commands) == 2 and shlex.quote(str(cal)) in commands[0]
    for k, line in enumerate(commands):
        words = shlex.split(line.replace('"${HEAD_IP}"', "10.1.2.3"))
        env = words[:words.index("python3")]     # the network variables the serving scripts export
        assert "NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7" in env, env
        words = words[len(env):]
        # torchrun's own options, through verify's launcher (a failing rank in one line: test_verify_trust_dist.py)
        assert words[:15] == ["python3", "-m", "mla_planner.verify.launcher", "--nnodes", "2", "--nproc-per-node",
                              "8", "--node-rank", str(k), "--rdzv-endpoint", "10.1.2.3:29511", "-m", "mla_planner.cli",
                              "verify", "--topology"]
        assert words[words.index("--layout") + 1] == "tp=8,pp=2" and "--quick" in words
        assert "--print-launch" not in words and words[words.index("--calibration") + 1] == str(cal)


def test_rank_to_stage_follows_the_engines_placement():
    """vLLM with DP and PP keeps each DP rank's tp x pp GPUs together (perf.layer_comm.dp_rank_blocks); SGLang
    packs each stage. verify must check rank r against the stage that rank really serves."""
    from mla_planner.verify.target import rank_stage
    lay = Layout(tp=1, pp=2, dp=8, ep=8)
    assert [rank_stage(r, lay, "vllm") for r in range(4)] == [0, 1, 0, 1]
    assert [rank_stage(r, lay, "sglang") for r in (0, 7, 8, 15)] == [0, 0, 1, 1]


def test_print_launch_on_one_node_needs_no_head_address(cli):
    r = cli("verify", "--model", "deepseek-v3", "--topology", "8xh200", "--layout", "tp=8", "--print-launch")
    assert r.exit_code == 0, r.output
    commands = [ln for ln in r.stdout.splitlines() if not ln.startswith("#")]
    assert len(commands) == 1 and "HEAD_IP" not in r.stdout
    assert shlex.split(commands[0])[:6] == ["python3", "-m", "mla_planner.verify.launcher", "--standalone",
                                            "--nproc-per-node", "8"]


def test_print_launch_gives_other_nodes_absolute_paths(cli, tmp_path, monkeypatch):
    """The other nodes start in other folders: a relative --plan becomes absolute, as emit's paths are."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.json").write_text(cli("plan", "-t", "2x8xh200-ib", "--json").stdout)
    r = cli("verify", "--plan", "plan.json", "--print-launch", "--head", "10.0.0.1")
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.stdout.splitlines() if "mla_planner.verify.launcher" in ln and ln[0] != "#")
    words = shlex.split(line)
    assert words[words.index("--plan") + 1] == str(tmp_path / "plan.json")
