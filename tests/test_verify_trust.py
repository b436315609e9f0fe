"""What `verify` can be trusted for (issue 23), on a CPU: an fp8 plan's attention check reads an fp8 cache and
checks its output against the naive fp64 reference, and a planted wrong kernel fails it with its max error; the
engine's kernel is timed where importable (a planted stand-in here) and only it calibrates the engine's factor;
a FAILed check writes no factor and a factor clipped to 1 is reported; the verdict needs attention and every
collective group of the layout measured (an env-only run is NOT VERIFIED); `--layout` fits at the plan's own
memory fraction. The torchrun runs: test_verify_trust_dist.py."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import yaml

torch = pytest.importorskip("torch")

from mla_planner.core.errors import PlanError
from mla_planner.search import planfile
from mla_planner.search.candidate import Performance
from mla_planner.specs.attention.cost import absorbed_core_bytes
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology
from mla_planner.verify import attention, calibrate, env, report, sparse_bench
from mla_planner.verify.bench import project_kernel
from mla_planner.verify.check import Check
from mla_planner.verify.coverage import missing
from mla_planner.verify.engine_kernels import EngineKernel, engine_kernel
from mla_planner.verify.kernel import absorbed_core
from mla_planner.verify.launcher import exit_status, failure_lines
from mla_planner.verify.target import Chosen, make_target

SMALL = ("--device", "cpu", "--model", "deepseek-v2-lite", "--topology", "8xh200", "--layout", "tp=8", "--quick")
V32 = "tests/fixtures/hf/DeepSeek-V3.2"


def fp8_plan(tmp_path, kv: str = "fp8") -> str:
    """A plan file whose candidate is what `plan` gives an H200 by default: vLLM, FLASHMLA, an fp8 KV cache."""
    spec, topo = load_model("deepseek-v2-lite").spec, load_topology("8xh200")
    knobs = Knobs(block_size=64, kv_cache_dtype=kv, attention_backend="FLASHMLA", max_model_len=2560,
                  memory_fraction=0.9)
    cand = planfile.Candidate(Layout(tp=8), knobs, performance=Performance(concurrency_per_dp_rank=7))
    path = tmp_path / f"plan-{kv}.json"
    path.write_text(json.dumps(planfile.plan_to_dict(
        planfile.Plan(spec, "deepseek-ai/DeepSeek-V2-Lite", topo, Workload(), [cand]))))
    return str(path)


def attention_of(cli, *args):
    r = cli("verify", *args, "--only", "attention", "--json")
    assert "Traceback" not in r.output, r.output
    data = json.loads(r.stdout)
    return r, data, next(c for c in data["checks"] if c["name"] == "attention")


def test_an_fp8_plan_times_an_fp8_cache_and_checks_its_output(cli, tmp_path):
    r, data, att = attention_of(cli, "--plan", fp8_plan(tmp_path), "--device", "cpu", "--quick")
    assert r.exit_code == 0 and att["status"] == "info" and data["verdict"] == "rehearsal"
    extra = att["extra"]
    assert extra["kv_cache"].startswith("float8_e4m3fn cache (per-tensor scale 2^")
    assert extra["output_check"]["ok"] and extra["output_check"]["max_abs_err"] < 1e-6
    assert "checked against the naive fp64 reference" in att["detail"]
    # the cache's bytes at 1 B a value (B=2 x T=128 at the CPU cap, 2 heads per rank, fp32 q and o)
    assert extra["bytes"] == absorbed_core_bytes(2, 2, 2 * 128, 576, act_bytes=4)
    # the fallback dequantises the whole fp8 cache (4 blocks of 64) in the call: what it moved is said beside it
    assert extra["moved_bytes"] == 4 * 64 * 576 * (1 + 4) + absorbed_core_bytes(2, 2, 2 * 128, 576 * 4, act_bytes=4)
    assert "the fp8 cache is dequantised to the query's dtype inside the timed call" in att["detail"]
    _, _, bf16 = attention_of(cli, "--plan", fp8_plan(tmp_path, "bf16"), "--device", "cpu", "--quick")
    assert bf16["extra"]["bytes"] == absorbed_core_bytes(2, 2, 2 * 128, 576 * 4, act_bytes=4)
    # no engine kernel on a CPU: the project's, labelled, not judged, calibrating nothing
    assert extra["kernel"] == "fallback" and extra["engine_backend"] == "FLASHMLA (vllm)" and "evidence" not in extra
    assert "CPU rehearsal" in extra["fallback_reason"] and "calibrates no factor" in att["detail"]


def scale_dropped(inp, scale):
    """A kernel that reads the fp8 bytes but forgets the cache's scale."""
    return lambda: absorbed_core(inp.q, inp.kv.cache.to(inp.q.dtype), inp.block_table, inp.seqlens, scale)


def one_percent_off(inp, scale):
    right = project_kernel()(inp, scale)
    return lambda: (lambda o, lse: (o * 1.01, lse))(*right())


@pytest.mark.parametrize("kv, planted", [("fp8", scale_dropped), ("bf16", one_percent_off)])
def test_a_planted_wrong_kernel_fails_with_its_max_error_and_calibrates_nothing(cli, monkeypatch, tmp_path, kv,
                                                                                 planted):
    monkeypatch.setattr(attention, "project_kernel", lambda: planted)
    cal = tmp_path / "cal.yaml"
    r, data, att = attention_of(cli, "--plan", fp8_plan(tmp_path, kv), "--device", "cpu", "--quick",
                                "--write-calibration", str(cal))
    assert r.exit_code == 1 and data["verdict"] == "fail" and att["status"] == "fail"
    assert att["measured"] is None and "does NOT match the naive fp64 reference" in att["detail"]
    assert "max abs error" in att["detail"] and not att["extra"]["output_check"]["ok"]
    assert data["calibration"]["written"] is False and not cal.exists()


def fake_engine(build, runs="FlashMLA (a stand-in for this test)"):
    return lambda knobs, spec, device_type: EngineKernel("FLASHMLA (vllm)", build, runs, "", False)


def test_the_engines_kernel_is_timed_where_importable_and_alone_calibrates_attention(cli, monkeypatch, tmp_path):
    """A stand-in engine kernel (the plain torch core behind the engine-kernel seam): timed, its output checked,
    its evidence calibrates attention_hbm_efficiency. A wrong one fails; one that raises falls back, saying so."""
    cal = tmp_path / "cal.yaml"
    monkeypatch.setattr(attention, "engine_kernel", fake_engine(project_kernel(impl="torch")))
    r, data, att = attention_of(cli, *SMALL, "--write-calibration", str(cal))
    assert r.exit_code == 0 and att["extra"]["kernel"] == "engine" and "stand-in" in att["detail"]
    assert att["extra"]["evidence"]["factor"] == "attention_hbm_efficiency"
    assert "attention_hbm_efficiency" in data["calibration"]["efficiency"] and not data["calibration"]["left_out"]
    monkeypatch.setattr(attention, "engine_kernel", fake_engine(one_percent_off))
    r, data, att = attention_of(cli, *SMALL)
    assert r.exit_code == 1 and att["status"] == "fail" and att["extra"]["kernel"] == "engine"

    def raises(inp, scale):
        raise TypeError("flash_mla_with_kvcache() got an unexpected keyword argument 'causal'")
    monkeypatch.setattr(attention, "engine_kernel", fake_engine(raises))
    r, data, att = attention_of(cli, *SMALL)
    assert r.exit_code == 0 and att["extra"]["kernel"] == "fallback"
    assert "raised TypeError: flash_mla_with_kvcache() got an unexpected keyword" in att["extra"]["fallback_reason"]


def test_which_engine_kernel_and_why_not():
    spec, sparse = load_model("deepseek-v2-lite").spec, load_model(V32).spec
    flashmla = Knobs(attention_backend="FLASHMLA", kv_cache_dtype="fp8")
    assert "CPU rehearsal" in engine_kernel(flashmla, spec, "cpu").why_not
    assert "no adapter for CUTLASS_MLA (vllm)" in engine_kernel(Knobs(attention_backend="CUTLASS_MLA"), spec,
                                                                "cuda").why_not
    assert "sparse kernel" in engine_kernel(Knobs(attention_backend="FLASHMLA_SPARSE"), sparse, "cuda").why_not
    on_gpu = engine_kernel(flashmla, spec, "cuda")   # FlashMLA's dense fp8 kernel is vLLM's own build
    if on_gpu.build is None:
        assert "vLLM's own" in on_gpu.why_not
    sglang = engine_kernel(Knobs(engine="sglang", attention_backend="flashmla", kv_cache_dtype="fp8"), spec, "cuda")
    assert sglang.build is None and "SGLang's fp8 FlashMLA" in sglang.why_not


def test_a_sparse_fp8_ds_mla_plan_is_checked_and_a_wrong_indexer_fails(cli, monkeypatch):
    args = ("--device", "cpu", "--quick", "-m", V32, "-t", "8xh200", "--layout", "tp=8", "--kv-cache-dtype", "fp8")
    r, data, att = attention_of(cli, *args)
    assert r.exit_code == 0 and data["target"]["knobs"]["kv_cache_dtype"] == "fp8_ds_mla"
    assert att["extra"]["kv_cache"].startswith("fp8_ds_mla cache (656-B rows") and att["extra"]["output_check"]["ok"]
    # the CPU cap (128 tokens) is below V3.2's top-2048, where every token is chosen: a top-16 shows the indexer
    spec = replace(load_model(V32).spec, index_topk=16)
    right = sparse_bench.sparse_attention_benchmark(spec, Layout(tp=8), 2, 100, 64, torch.float32, "cpu", 0, 1,
                                                    "fp8_ds_mla")
    assert right["output_check"].ok and right["time_s"] > 0
    real = sparse_bench.sparse_decode_core
    monkeypatch.setattr(sparse_bench, "sparse_decode_core",        # an indexer that keeps the lowest scores
                        lambda q, q_index, weights, *rest: real(q, q_index, -weights, *rest))
    wrong = sparse_bench.sparse_attention_benchmark(spec, Layout(tp=8), 2, 100, 64, torch.float32, "cpu", 0, 1,
                                                    "fp8_ds_mla")
    assert not wrong["output_check"].ok and wrong["time_s"] is None
    assert "sequence 0: the indexer chose a token scoring" in wrong["output_check"].text


def test_a_wrong_gemm_or_v4_kernel_fails_its_output_check(cli, monkeypatch):
    from mla_planner.verify import compressed_bench, gemms

    real_runner = gemms._runner
    monkeypatch.setattr(gemms, "_runner", lambda g, dtype, device: (
        lambda run, check: ((lambda: run() * 1.01) if g.name == "wkv_a" else run, check))(*real_runner(g, dtype, device)))
    r = cli("verify", *SMALL, "--only", "gemms", "--json")
    proj = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "gemm.attn.proj")
    assert r.exit_code == 1 and proj["status"] == "fail" and proj["measured"] is None
    assert "output does NOT match the fp64 product on a slice (wkv_a: max abs error" in proj["detail"]
    spec = replace(load_model("tests/fixtures/hf/DeepSeek-V4-Flash-0731").spec, num_attention_heads=8,
                   index_n_heads=4, index_topk=8, sliding_window=16)
    right = compressed_bench.compressed_attention_benchmark(spec, Layout(tp=1), 2, 300, torch.float32, "cpu", 0, 1)
    assert right["output_check"].ok and right["time_s"] > 0
    real = compressed_bench.compressed_decode
    monkeypatch.setattr(compressed_bench, "compressed_decode",          # a sink that never joins the softmax
                        lambda q, cache, ratio, sink, *rest: real(q, cache, ratio, sink - 30.0, *rest))
    wrong = compressed_bench.compressed_attention_benchmark(spec, Layout(tp=1), 2, 300, torch.float32, "cpu", 0, 1)
    assert not wrong["output_check"].ok and wrong["time_s"] is None and "max abs error" in wrong["output_check"].text


def target_of(layout: Layout):
    spec, topo = load_model("deepseek-v2-lite").spec, load_topology("4x8xh800-roce")
    knobs = Knobs(block_size=64, max_model_len=2560, attention_backend="FLASHMLA")
    return make_target(Chosen(spec, topo, layout, knobs, Workload(), load_calibration(None, topo), "test", 8))


def judged(name, **extra):
    return Check(name, 1.0, 1.0, "s", 1.0, "ratio 0.67-1.5", True, extra=extra)


def test_the_verdict_needs_attention_and_every_collective_group_measured():
    t = target_of(Layout(tp=2, pp=4))
    tp = [[r, r + 1] for r in range(0, 8, 2)]
    pairs = [[r, r + 2] for r in range(6)]        # every adjacent stage pair at each TP position: 0->2 ... 5->7
    full = ([judged("env.gpu"), judged("attention", kernel="engine")]
            + [judged(f"collective.{k}", members=g, group_size=2) for k in ("all_reduce", "all_gather") for g in tp]
            + [judged("collective.p2p", members=p, group_size=2) for p in pairs])
    assert missing(t, full) == [] and report.verdict(full, missing(t, full)) == ("pass", 0)
    assert "PLAN HOLDS" in report.headline(full, [])
    env_only = full[:1]                            # never PLAN HOLDS
    gaps = missing(t, env_only)
    assert report.verdict(env_only, gaps) == ("not_verified", 1) and len(gaps) == 4
    assert gaps[0] == "attention (not measured on the plan's GPU)"
    no_pair = [c for c in full if c.extra.get("members") != [3, 5]]
    assert missing(t, no_pair) == ["collective.p2p: pipeline pair(s) 3->5 of 6"]
    fallback = [c if c.name != "attention" else Check("attention", 1.0, 1.0, "s", 1.0, "-", None, extra={
        "kernel": "fallback", "engine_backend": "FLASHMLA (vllm)", "fallback_reason": "no FlashMLA build"})
        for c in full]
    assert missing(t, fallback)[0].startswith("attention with the engine's kernel (FLASHMLA (vllm)): only the "
                                              "project's fallback was timed (no FlashMLA build)")
    assert "NOT VERIFIED" in report.headline(fallback, missing(t, fallback))


def test_an_env_only_run_on_the_plans_gpu_is_not_verified(cli, monkeypatch):
    h200 = env.DeviceInfo("cuda", "NVIDIA H200", 143771 * 2**20, "9.0", torch.__version__, "12.8", True, False)
    monkeypatch.setattr(env, "probe_device", lambda device, local_rank=0: h200)
    args = ("verify", "--device", "cuda", "--model", "deepseek-v2-lite", "--topology", "8xh200", "--layout", "tp=8",
            "--only", "env")
    r = cli(*args, "--json")
    data = json.loads(r.stdout)
    assert data["checks"][0]["status"] == "pass" and r.exit_code == 1 and data["verdict"] == "not_verified"
    assert data["missing"][:2] == ["attention (not measured on the plan's GPU)",
                                   "collective.all_reduce over 8 ranks: 1 of 1 group(s)"]
    text = cli(*args)
    assert text.exit_code == 1 and "NOT VERIFIED" in text.stdout and "PLAN HOLDS" not in text.stdout


def evidence(name, factor, amount, seconds, passed=True, ratio=1.0):
    return Check(name, 1.0, ratio, "s", ratio, "ratio 0.5-2", passed, extra={"evidence": {
        "factor": factor, "amount": amount, "peak": 1e12, "seconds": seconds}})


def test_a_failed_check_writes_no_factor_and_a_clipped_one_is_reported(tmp_path):
    cal = tmp_path / "cal.yaml"
    checks = [evidence("gemm.attn.proj", "hbm_efficiency", 5e8, 1e-3),
              evidence("attention", "attention_hbm_efficiency", 2.8e8, 1e-3, passed=False, ratio=3.0),
              evidence("collective.p2p", "nic_efficiency", 1.68e9, 1e-3)]
    info = calibrate.write_calibration(cal, checks, "H200-SXM-141G", "8xh200", "test")
    assert info["efficiency"] == {"hbm_efficiency": pytest.approx(0.5), "nic_efficiency": 1.0}
    assert info["clipped"] == {"nic_efficiency": pytest.approx(1.68)}
    assert info["left_out"] == ["attention (rank 0): FAIL, ratio 3.00: a check outside its band writes no factor"]
    written = yaml.safe_load(cal.read_text())
    assert "attention_hbm_efficiency" not in written["efficiency"]
    assert written["measurements"]["clipped/nic_efficiency"] == {"measured": pytest.approx(1.68), "written": 1.0}
    text = report.calibration_text(info)
    assert "nic_efficiency: measured 1.68, written as 1" in text and "not used: attention (rank 0): FAIL" in text
    with pytest.raises(PlanError, match="no passing check measured an efficiency factor"):
        calibrate.write_calibration(tmp_path / "none.yaml", checks[1:2], "H200-SXM-141G", "8xh200", "test")
    assert not (tmp_path / "none.yaml").exists()


def test_memory_fit_under_layout_holds_the_gpu_to_the_plans_fraction(cli):
    plan = json.loads(cli("plan", "-m", "deepseek-v2-lite", "-t", "2x8xh100-ib", "--json").stdout)
    chosen = next(c for c in plan["candidates"] if c["layout"]["tp"] == 1 and c["layout"]["pp"] == 2
                  and c["knobs"]["engine"] == "vllm" and c["knobs"]["kv_cache_dtype"] == "fp8")
    r = cli("verify", "--device", "cpu", "--quick", "-m", "deepseek-v2-lite", "-t", "2x8xh100-ib",
            "--layout", "tp=1,pp=2", "--kv-cache-dtype", "fp8", "--only", "fit", "--json")
    data = json.loads(r.stdout)
    fraction = data["target"]["knobs"]["memory_fraction"]
    assert fraction == chosen["knobs"]["memory_fraction"] != 0.92
    fit = next(c for c in data["checks"] if c["name"] == "memory.fit")
    assert f"the engine's budget, {fraction:g} x" in fit["detail"]
    assert any("the one `plan` picks for this layout" in n for n in data["target"]["notes"])
    given = cli("verify", "--device", "cpu", "--quick", "-m", "deepseek-v2-lite", "-t", "2x8xh100-ib",
                "--layout", "tp=1,pp=2", "--gpu-memory-utilization", "0.8", "--only", "fit", "--json")
    assert json.loads(given.stdout)["target"]["knobs"]["memory_fraction"] == 0.8


def test_a_rank_and_a_failed_launch_say_one_line_each():
    err = Check("collective.p2p", None, None, "", None, "-", False, error="rank 2, ranks [2, 3]: RuntimeError: "
                "Timed out waiting 5000ms for recv")
    assert report.rank_line(2, 4, [err]) == ("error: rank 2 of 4: collective.p2p: rank 2, ranks [2, 3]: "
                                             "RuntimeError: Timed out waiting 5000ms for recv", 1)
    wrong = Check("attention", 1.0, None, "s", None, "-", False)     # rank 0's report will not show it: named here
    assert report.rank_line(1, 2, [judged("env.gpu"), wrong]) == (
        "error: rank 1 of 2: 2 check(s), not gathered by rank 0; failed: attention", 1)
    failures = {1: SimpleNamespace(local_rank=1, pid=11, exitcode=-15), 0: SimpleNamespace(local_rank=0, pid=10,
                                                                                           exitcode=2)}
    assert failure_lines(failures) == ["error: rank 0 (local rank 0, pid 10) exited with status 2",
                                       "error: rank 1 (local rank 1, pid 11) was ended by SIGTERM (torchrun stops the "
                                       "other ranks once one fails)"]
    assert exit_status(failures) == 2 and exit_status({1: failures[1]}) == 1 and exit_status({}) == 0
    assert exit_status({**failures, 2: SimpleNamespace(local_rank=2, pid=12, exitcode=1)}) == 1
