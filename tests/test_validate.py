"""`mla-plan validate` (issue 22): every published measurement of mla_planner/data/validation.yaml through the
commands' own code, fit and held-out points apart; the README's validation tables are its output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from mla_planner.audit.validate import load_points
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

README = Path(__file__).resolve().parents[1] / "README.md"
EFFICIENCY = Path(__file__).resolve().parents[1] / "mla_planner" / "data" / "efficiency.yaml"


def test_the_readme_tables_are_validates_output(cli):
    r = cli("validate", "--markdown")
    assert r.exit_code == 0
    section = re.search(r"<!-- validate:begin -->\n(.*?)\n<!-- validate:end -->", README.read_text(), re.S).group(1)
    assert section == r.stdout.strip()


def test_fit_and_held_out_points_are_kept_apart(cli):
    data = json.loads(cli("validate", "--json").stdout)
    roles = {(s["category"], s["role"]) for s in data["summary"]}
    assert ("collective", "fit") in roles and ("decode_tpot", "held_out") in roles and ("kv_capacity", "held_out") in roles
    factors = yaml.safe_load(EFFICIENCY.read_text())
    kernels = yaml.safe_load((EFFICIENCY.parent / "custom_all_reduce.yaml").read_text())
    for p in load_points():
        line = p.role.removeprefix("fit: custom_all_reduce.").split(".")
        assert p.role == "held_out" or p.role.removeprefix("fit: ") in factors or \
            p.role.startswith("fit: platform_memory.group.") or \
            (len(line) == 2 and line[1] in kernels.get(line[0], {}).get("kernels", {})), p.id
        assert p.source.startswith("https://") and p.quote, p.id
    held = [p for p in data["points"] if p["role"] == "held_out"]
    assert len(held) > 40 and all(p["predicted"] > 0 for p in data["points"])


def test_a_point_is_predicted_as_compare_prices_it(cli):
    """The same number `compare` prints for the same configuration: validate calls the commands' code."""
    point = next(p for p in json.loads(cli("validate", "--category", "decode_tpot", "--json").stdout)["points"]
                 if p["id"] == "tpot-sglang0512-r1-h200-8k1k-c16")
    row = json.loads(cli("compare", "-m", "deepseek-r1", "-t", "8xh200", "-e", "sglang", "-l", "tp=8", "--input-len",
                         "8192", "--output-len", "1024", "--tpot-ms", "1000", "--max-num-seqs", "16",
                         "--json").stdout)["layouts"][0]
    assert point["predicted"] == row["tpot_s"] * 1e3


def test_bad_points_files_are_one_line(cli, tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("points:\n  - {id: x, category: collective, role: held_out, regime: r, source: s, quote: q, "
                   "published: 1, unit: us, run: {what: time_us, topology: 8xh100, kind: all_reduce, gpus: 8}}\n")
    for args, words in ((["--points", str(bad)], "run needs 'bytes' for time_us"),
                        (["--points", str(tmp_path / "none.yaml")], "no such file"),
                        (["--category", "latency"], "--category must be one of")):
        r = cli("validate", *args)
        assert r.exit_code == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_the_plans_bands_come_from_the_held_out_residuals(cli):
    """data/bands.yaml is validate's --bands output: the plan's bands are the held-out points' error ranges."""
    r = cli("validate", "--bands")
    assert r.exit_code == 0
    assert r.stdout == (Path(__file__).resolve().parents[1] / "mla_planner" / "data" / "bands.yaml").read_text()


def test_a_band_is_what_a_deployment_would_measure():
    """The model leans optimistic on TPOT (most held-out single-node points measured slower, the vLLM INT4 ones on
    H200 faster), so the band of a predicted TPOT reaches further above it than below, and the band of a predicted
    throughput further below; a TP group spanning NVLink domains has one published point, so its band is its
    category's whole range."""
    from mla_planner.perf.bands import band, error_range
    lo, hi = error_range("decode_tpot", "tp_in_domain")
    assert lo < 0 < hi
    tpot_low, tpot_high = band(0.050, (lo, hi))
    assert tpot_low < 0.050 < tpot_high and tpot_high > 0.060 and tpot_high - 0.050 > 0.050 - tpot_low
    tput_low, tput_high = band(1000.0, (lo, hi), inverse=True)
    assert tput_low < tput_high and tput_low < 850.0
    wide = error_range("decode_tpot", "tp_across_domains")
    assert wide[0] < lo and wide[1] == hi


def test_band_coverage_is_reported_leave_one_out(cli):
    data = json.loads(cli("validate", "--json").stdout)
    tpot, ttft = data["band_coverage"]["decode_tpot"], data["band_coverage"]["ttft"]
    assert tpot["points"] == 36 and tpot["covered"] / tpot["points"] >= 0.8
    assert ttft["points"] == 19 and ttft["covered"] / ttft["points"] >= 0.8     # two set ttft_host_s


def test_an_amd_tp_group_across_nodes_carries_both_bands():
    """On AMD with TP across nodes both the ROCm kernels' and the cross-node TP's published misses apply: the band is
    the widest of the two (perf.bands.tpot_errors)."""
    from mla_planner.perf.bands import error_range, tpot_errors
    two = load_topology("2x8xmi355x-roce")
    rocm, across = error_range("decode_tpot", "rocm"), error_range("decode_tpot", "tp_across_domains")
    assert tpot_errors(Layout(tp=16), two) == (min(rocm[0], across[0]), max(rocm[1], across[1]))
    assert tpot_errors(Layout(tp=8), two) == rocm
    assert tpot_errors(Layout(tp=16), load_topology("2x8xh100-ib")) == across


def test_amd_gpus_have_a_tpot_band_of_their_own():
    """The published AMD decode sweeps (SGLang's DeepSeek-R1 on MI325X, GLM-5.1 on MI300X) measured 1.2-2.8x the
    model's TPOT even with AMD's kernel factors: AMD plans carry that one-sided band, NVIDIA plans keep theirs."""
    from mla_planner.perf.bands import error_range, tpot_regime
    assert tpot_regime(Layout(tp=8), load_topology("8xmi300x")) == "rocm"
    assert tpot_regime(Layout(tp=8), load_topology("8xh200")) == "tp_in_domain"
    rocm, cuda = error_range("decode_tpot", "rocm"), error_range("decode_tpot", "tp_in_domain")
    assert rocm[1] < -0.1 and rocm[0] < -0.6
    assert cuda[0] > -0.25 and cuda[1] > 0


def test_collective_times_carry_the_band_of_their_regime(cli):
    """A collective's band comes from the nccl-tests / rccl-tests residuals as errors in its time (a bus bandwidth's
    error inverted: a bus bandwidth predicted 56 % high is a time predicted 36 % low), by regime: across NVLink
    domains, Infinity Fabric (RCCL's all-reduce, MoRI's EP8 dispatch / combine times and the engines' own all-reduce
    kernels), NVLink inside a node (the engines' kernels: nccl-tests' NVLink points only set factors)."""
    from mla_planner.perf.bands import collective_regime, error_range
    assert collective_regime(load_topology("2x8xh100-ib"), 16) == "across_domains"
    assert collective_regime(load_topology("2x8xh100-ib"), 8) == "nvlink"
    assert collective_regime(load_topology("8xmi300x"), 8) == "xgmi"
    xgmi, nvlink = error_range("collective", "xgmi"), error_range("collective", "nvlink")
    assert xgmi[0] == pytest.approx(1 / 1.564 - 1, abs=2e-3)     # the 16 MB all-reduce's busbw +56.4 %
    assert xgmi[1] == pytest.approx(8.255 / 6.3 - 1, abs=2e-3)    # the AMD kernel line at 24 KiB (one-stage's range)
    assert nvlink[0] == pytest.approx(10.18 / 12.98 - 1, abs=2e-3)  # two GPUs' fused one-shot at 1.6 MiB
    assert nvlink[1] == pytest.approx(28.10 / 27.0 - 1, abs=2e-3)   # multimem at 4 MiB on 8 x H100
    rows = json.loads(cli("compare", "-t", "2x8xh100-ib", "-l", "tp=16", "-l", "tp=8,pp=2", "--json").stdout)["layouts"]
    for r in rows:
        assert r["collectives_s"] == r["step_breakdown_s"]["collectives_s"]
        assert r["collectives_s_low"] < r["collectives_s"] < r["collectives_s_high"]


def test_cuda_graph_memory_rows_are_the_memory_models_graph_term(cli):
    """validate prices a logged graph memory with `memory`'s cuda_graph term for the same run (docs/memory.md
    section 1: SGLang before 0.5.0 kept every captured size's logits)."""
    points = [p for p in json.loads(cli("validate", "--json").stdout)["points"] if p["category"] == "cuda_graph_memory"]
    assert points and all(p["role"] == "held_out" and p["unit"] == "GiB" for p in points)
    b200 = next(p for p in points if p["id"] == "graph-sglang-r1-b200x8-tp8ep8")
    d = json.loads(cli("memory", "-m", "deepseek-r1", "-t", "8xb200", "--tp", "8", "--ep", "8", "-e", "sglang",
                       "--engine-version", "0.4.10", "--mem-fraction-static", "0.821", "--max-num-batched-tokens",
                       "16384", "--cuda-graph-max-bs", "512", "--block-size", "1", "--json").stdout)
    assert b200["predicted"] == pytest.approx(d["per_gpu"][0]["terms"]["cuda_graph"] / 2**30)
