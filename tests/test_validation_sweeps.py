"""The step model's mean TPOT held against published SGLang sweeps of DeepSeek-R1 FP8 on one 8-GPU node."""

import pytest


# SemiAnalysisAI/InferenceX#870 (2026-03-05): DeepSeek-R1-0528 FP8 on 8 x H200, SGLang v0.5.7, TP8, 1,024 in /
# 1,024 out, a closed loop at each concurrency: mean TPOT in ms. Cited here with its source.
INFERENCEX_R1_H200_TPOT_MS = {8: 12.8, 16: 17.2, 32: 25.6, 64: 34.6}
# Later runs of the same harness (InferenceX's published baselines, quoted in the bodies of its PRs #3288 and
# #3363, 2026-09): R1-0528 FP8, SGLang v0.5.12, TP8 EP1, no speculative decoding; (topology, in, out) -> TPOT ms.
INFERENCEX_SGLANG_0512_TPOT_MS = {
    ("8xh200", 1024, 1024): {4: 9.7, 8: 11.73, 16: 15.28, 32: 21.8, 64: 29.77},       # PR #3288
    ("8xh200", 8192, 1024): {4: 10.94, 8: 13.88, 16: 20.02, 32: 31.37, 64: 49.33},    # PR #3288
    ("8xb200", 1024, 1024): {1: 7.18, 2: 7.93, 4: 8.82, 8: 10.96, 16: 13.09, 32: 16.21, 64: 21.73},  # PR #3363
}
SWEEP_POINTS = [("v0.5.7", ("8xh200", 1024, 1024), c, ms) for c, ms in sorted(INFERENCEX_R1_H200_TPOT_MS.items())] + [
    ("v0.5.12", key, c, ms) for key, table in INFERENCEX_SGLANG_0512_TPOT_MS.items() for c, ms in sorted(table.items())]


def _sweep_row(cli, key, concurrency, *extra):
    import json
    topology, isl, osl = key
    return json.loads(cli("compare", "-m", "deepseek-r1", "-t", topology, "-e", "sglang", "-l", "tp=8",
                          "--input-len", str(isl), "--output-len", str(osl), "--tpot-ms", "1000",
                          "--max-num-seqs", str(concurrency), *extra, "--json").stdout)["layouts"][0]


FIT = ("v0.5.12", ("8xh200", 1024, 1024))    # graph_kernel_overhead_s is fit to this sweep (efficiency.yaml)


@pytest.mark.parametrize("release, key, concurrency, measured_ms", SWEEP_POINTS)
def test_mean_tpot_against_published_sglang_sweeps(cli, release, key, concurrency, measured_ms):
    """The step model leaves out scheduler and sampler CPU time beyond a per-step fixed cost and assumes ideal
    kernels at their roofline efficiency, so it is optimistic. The launch gap (graph_kernel_overhead_s) is fit to
    SGLang v0.5.12's H200 1k/1k sweep: those five points within 8 % either way; the held-out ones 0-20 % below the
    measured TPOT, never more than 1 % above it (README, Validation)."""
    row = _sweep_row(cli, key, concurrency)
    assert row["concurrency"] == concurrency
    predicted = row["tpot_s"] * 1e3
    if (release, key) == FIT:
        assert predicted == pytest.approx(measured_ms, rel=0.08)
    else:
        assert 0.75 * measured_ms <= predicted <= 1.01 * measured_ms


@pytest.mark.parametrize("concurrency, measured_ms", sorted(INFERENCEX_R1_H200_TPOT_MS.items()))
def test_the_moe_gemm_factor_through_a_calibration_file_meets_the_sweep(cli, tmp_path, concurrency, measured_ms):
    """moe_hbm_efficiency 0.60 (the fit efficiency.yaml cites, made with the former 2.0 us launch gap) brings the
    same sweep within 10 %: the routed experts' grouped GEMMs are what the default leaves fast."""
    calib = tmp_path / "moe.yaml"
    calib.write_text("format: mla-plan-calibration/1\n"
                     "efficiency: {moe_hbm_efficiency: 0.60, graph_kernel_overhead_s: 2.0e-6}\n")
    row = _sweep_row(cli, ("8xh200", 1024, 1024), concurrency, "--calibration", str(calib))
    assert row["tpot_s"] * 1e3 == pytest.approx(measured_ms, rel=0.10)


def test_the_one_published_cross_node_tp16_point(cli, tmp_path):
    """tenstorrent/tt-inference-server#356: DeepSeek-R1-0528 FP8 on 2 x 8 H100 with InfiniBand, SGLang (mid-2025),
    one request, 128 in: 23.1 ms per token. The defaults give 11.9 ms (README, Validation: the 2025 engines were
    ~3x slower on one node too, so the gap is not pinned on the network). If it is the network, a cross-node
    all-reduce inside the engine costs ~95 us more than nccl-tests' hot loop: `internode_latency_s` 110 us
    reproduces the point within 5 %, and then the seed comparison's TP16 spends over half its run in collectives."""
    import json
    from mla_planner.specs.calibration import dump_calibration
    args = ("compare", "-m", "deepseek-r1", "-t", "2x8xh100-ib", "-e", "sglang", "-l", "tp=16", "--input-len", "128",
            "--output-len", "128", "--tpot-ms", "1000", "--max-num-seqs", "1", "--json")
    default = json.loads(cli(*args).stdout)["layouts"][0]
    assert default["tpot_s"] * 1e3 < 0.55 * 23.1
    cal = tmp_path / "engine-ib.yaml"
    cal.write_text(dump_calibration({"internode_latency_s": 1.1e-4}, gpu="H100-SXM-80G", topology="2x8xh100-ib"))
    slow = json.loads(cli(*args, "--calibration", str(cal)).stdout)["layouts"][0]
    assert slow["tpot_s"] * 1e3 == pytest.approx(23.1, rel=0.05)
    seed = json.loads(cli("compare", "-m", "deepseek-v2", "-l", "tp=16", "-l", "tp=8,pp=2", "--json",
                          "--calibration", str(cal)).stdout)["layouts"]
    assert seed[0]["network_wait_share"] > 0.5 > 0.15 > seed[1]["network_wait_share"]
