"""The engine's host work between decode steps (perf/host.py): hidden behind the GPU when the engine overlaps the two
(vLLM's async scheduling, SGLang's overlap scheduler: engines/scheduling.py), a round's wait when it does not or when
the host outlasts the GPU; held by validate to each point's engine release, priced by lint for the flags that turn
the overlap off."""

import json
from dataclasses import replace

import pytest

from mla_planner.audit.validate import _setting
from mla_planner.core.errors import PlanError
from mla_planner.engines.scheduling import overlaps_host
from mla_planner.perf.host import exposed_host_s, host_round_s
from mla_planner.perf.step import decode_step, round_s, step_breakdown_s
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology


@pytest.mark.parametrize("engine, version, pp, overlapped", [
    ("vllm", None, 4, True),                                       # the release the planner targets (0.33)
    ("vllm", "0.8.4", 1, False), ("vllm", "0.11.1", 1, False),     # before async scheduling by default
    ("vllm", "0.14.0", 1, True), ("vllm", "0.14.0", 2, False),     # on by default, not yet with PP
    ("vllm", "0.16.0", 2, True), ("vllm", "v0.21.0rc2", 1, True),
    ("sglang", "0.3.6", 1, False), ("sglang", "0.4.0", 1, True),   # the overlap scheduler from v0.4
    ("sglang", "0.5.23", 2, True),                                 # PP's own loop overlaps the results
])
def test_which_releases_overlap_their_host_work(engine, version, pp, overlapped):
    assert overlaps_host(engine, version, pp) is overlapped


def test_a_version_that_is_no_release_is_an_error():
    with pytest.raises(PlanError, match="expected a release number"):
        overlaps_host("vllm", "latest")


def test_overlapped_host_work_costs_only_what_outlasts_the_gpu():
    assert exposed_host_s(0.030, 0.010, True) == 0.0
    assert exposed_host_s(0.010, 0.030, True) == pytest.approx(0.020)
    assert exposed_host_s(0.030, 0.010, False) == 0.010


@pytest.fixture(scope="module")
def r1_h200():
    topo = load_topology("8xh200")
    return load_model("deepseek-r1").spec, topo, load_calibration(None, topo)


def test_without_the_overlap_every_round_waits_for_all_of_it(r1_h200):
    spec, topo, calib = r1_h200
    on = decode_step(spec, topo, Layout(tp=8), Knobs(engine="sglang"), 64, 2048, calib)
    off = decode_step(spec, topo, Layout(tp=8), Knobs(engine="sglang", host_overlap=False), 64, 2048, calib)
    host = 64 * calib.host_per_request_s
    assert off.round_s - on.round_s == pytest.approx(host_round_s(64, calib)) == pytest.approx(host)
    assert sum(step_breakdown_s(off).values()) == pytest.approx(off.step_s)
    assert step_breakdown_s(off)["launch_s"] - step_breakdown_s(on)["launch_s"] == pytest.approx(host)


def test_pipeline_micro_batches_share_one_round_of_host_work(r1_h200):
    """A round steps every request of the rank once, however many micro-batches carry them."""
    spec, topo, calib = r1_h200
    on = decode_step(spec, topo, Layout(tp=4, pp=2), Knobs(engine="vllm"), 64, 2048, calib)
    off = decode_step(spec, topo, Layout(tp=4, pp=2), Knobs(engine="vllm", host_overlap=False), 64, 2048, calib)
    assert on.micro_batches == 2 and off.round_s - on.round_s == pytest.approx(64 * calib.host_per_request_s)
    assert sum(step_breakdown_s(off).values()) == pytest.approx(off.step_s)


def test_r1_at_tp8_hides_its_host_work_up_to_256_requests(r1_h200):
    """R1 at TP8 on H200: 256 requests' host work (5.4 ms) is far inside the GPU's step."""
    spec, topo, calib = r1_h200
    free = replace(calib, host_per_request_s=1e-12)
    for batch in (1, 64, 256):
        priced = decode_step(spec, topo, Layout(tp=8), Knobs(engine="vllm"), batch, 2048, calib)
        assert priced.tpot_s == decode_step(spec, topo, Layout(tp=8), Knobs(engine="vllm"), batch, 2048, free).tpot_s


def test_a_small_model_at_a_huge_batch_is_host_bound():
    """DeepSeek-V2-Lite alone on one H200: past ~1,000 requests a step is the scheduler's, not the GPU's."""
    spec, topo = load_model("deepseek-v2-lite").spec, load_topology("8xh200")
    calib = load_calibration(None, topo)
    knobs = Knobs(engine="vllm", kv_cache_dtype="fp8")
    step = decode_step(spec, topo, Layout(tp=1), knobs, 4096, 2048, calib)
    gpu = decode_step(spec, topo, Layout(tp=1), knobs, 4096, 2048, replace(calib, host_per_request_s=1e-12))
    assert gpu.round_s < host_round_s(4096, calib)
    assert step.round_s == pytest.approx(host_round_s(4096, calib))
    assert round_s(step.stages, 1) < step.round_s


def test_validate_prices_each_point_with_its_release_overlap():
    run = {"what": "mean_tpot", "model": "deepseek-r1", "topology": "8xh200", "layout": "tp=8", "engine": "vllm",
           "input_len": 1024, "output_len": 1024, "concurrency": 64}
    assert _setting(run)[3].host_overlap
    assert not _setting({**run, "engine_version": "0.8.4"})[3].host_overlap
    assert _setting({**run, "engine_version": "0.21.0"})[3].host_overlap


def lint(cli, *words, topology="8xh200"):
    r = cli("lint", "-t", topology, "--json", "--", *words)
    return json.loads(r.stdout)["findings"]


V2LITE = ("vllm", "serve", "deepseek-ai/DeepSeek-V2-Lite")
R1_SGLANG = ("python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-R1")


def test_lint_prices_the_flags_that_turn_the_overlap_off(cli):
    (f,) = lint(cli, *V2LITE, "--no-async-scheduling", "--max-num-seqs", "512")
    assert f["level"] == "warn" and f["flag"] == "--no-async-scheduling"
    assert "512 requests running" in f["text"] and "ms per token instead of" in f["text"]
    # the engine's own default cap when none is given (vLLM 0.33: 1024 on this GPU)
    assert "1,024 requests running" in lint(cli, *V2LITE, "--no-async-scheduling")[0]["text"]
    (f,) = lint(cli, *R1_SGLANG, "--tp", "8", "--dp", "8", "--enable-dp-attention", "--disable-overlap-schedule",
                "--max-running-requests", "1024")
    assert f["flag"] == "--disable-overlap-schedule" and "128 requests running per DP rank" in f["text"]


@pytest.mark.parametrize("words", [("--no_async_scheduling",), ("--no-async-sched",),
                                   ("--async-scheduling", "--no-async-scheduling")])
def test_lint_reads_the_flag_as_the_engine_parser_does(cli, words):
    assert [f["flag"] for f in lint(cli, *V2LITE, *words)] == ["--no-async-scheduling"]


@pytest.mark.parametrize("words", [("--no-async-scheduling", "--async-scheduling"), ("--async-scheduling",), ()])
def test_lint_leaves_the_overlap_on_alone(cli, words):
    assert lint(cli, *V2LITE, *words) == []


def test_lint_on_commands_that_keep_or_lose_the_overlap_otherwise(cli):
    flags = [f["flag"] for f in lint(cli, *R1_SGLANG, "--tp", "8", "--disable-overlap")]
    assert flags == ["--disable-overlap-schedule"]
    # PP sets it itself and overlaps in its own loop
    node = ("--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000")
    assert lint(cli, *R1_SGLANG, "--tp", "8", "--pp-size", "2", *node, "--disable-overlap-schedule",
                topology="2x8xh200-ib") == []
    # vLLM's V1 model runner does not run async scheduling with PP
    pp = ("vllm", "serve", "deepseek-ai/DeepSeek-R1", "-tp", "8", "-pp", "2", "--nnodes", "2", "--node-rank", "0",
          "--master-addr", "10.0.0.1")
    assert [f["flag"] for f in lint(cli, "VLLM_USE_V2_MODEL_RUNNER=0", *pp, topology="2x8xh200-ib")] == [
        "VLLM_USE_V2_MODEL_RUNNER"]
    assert lint(cli, *pp, topology="2x8xh200-ib") == []


def test_a_command_the_engine_refuses_gets_its_error_not_the_price(cli):
    (f,) = lint(cli, *R1_SGLANG, "--tp", "8", "--disable_overlap_schedule")
    assert f["level"] == "error" and "unrecognized arguments" in f["text"]
    (f,) = lint(cli, *V2LITE, "--no-async-scheduling", "--max-num-seqs", "1k")
    assert f["level"] == "error" and "invalid int value" in f["text"]


def test_a_host_bound_round_is_named_for_the_user():
    from mla_planner.search.candidate_warnings import host_bound_note
    spec, topo = load_model("deepseek-v2-lite").spec, load_topology("8xh200")
    calib, knobs = load_calibration(None, topo), Knobs(engine="vllm", kv_cache_dtype="fp8")
    step = decode_step(spec, topo, Layout(tp=1), knobs, 4096, 2048, calib)
    note = host_bound_note(step, step.tpot_s)
    assert note.startswith("host-bound: at 4,096 running requests per DP rank")
    assert f"{4096 * calib.host_per_request_s * 1e3:.1f} ms a round" in note
    assert host_bound_note(step, 2 * step.tpot_s) == ""      # prefill chunks fill the idle time and more
    small = decode_step(spec, topo, Layout(tp=1), knobs, 64, 2048, calib)
    assert host_bound_note(small, small.tpot_s) == ""



@pytest.mark.parametrize("batch", [64, 4096])
def test_prefill_chunks_fill_the_gpus_idle_time_and_never_speed_a_round_up(batch):
    """Overlapped, a decode round with other requests' prefill chunks takes max(GPU work with the chunks, host work):
    the chunks hide in the time the GPUs wait for the host, the host in the GPUs' time, so pricing the host never
    makes a round or a TTFT shorter (perf/request_times.py hidden_stall_s, perf/prefill.py)."""
    from mla_planner.perf.request_times import mean_tpot_s
    from mla_planner.specs.knobs import Workload
    spec, topo = load_model("deepseek-v2-lite").spec, load_topology("8xh200")
    calib, knobs = load_calibration(None, topo), Knobs(engine="sglang", kv_cache_dtype="fp8")
    free, work = replace(calib, host_per_request_s=1e-12), Workload(input_len=2048, output_len=256)
    with_host, d, p = mean_tpot_s(spec, topo, Layout(tp=1), knobs, work, calib, batch)
    gpu_only, _, q = mean_tpot_s(spec, topo, Layout(tp=1), knobs, work, free, batch)
    assert max(gpu_only, host_round_s(batch, calib)) <= with_host * (1 + 1e-9)
    assert with_host <= gpu_only + host_round_s(batch, calib)
    assert p.ttft_s >= q.ttft_s and p.stall_s == pytest.approx(q.stall_s)
    assert (d.idle_s > 0) == (batch == 4096)


def test_lint_prices_as_many_requests_as_the_command_lets_run(cli):
    # SGLang with a drafter defaults to 48 running requests (speculative_hook.py)
    (f,) = lint(cli, *R1_SGLANG, "--tp", "8", "--disable-overlap-schedule", "--speculative-algorithm", "EAGLE",
                "--speculative-num-steps", "1", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2")
    assert "48 requests running" in f["text"]
    # no more than the KV pool holds at 2k tokens of context, however large the cap
    r1 = ("vllm", "serve", "deepseek-ai/DeepSeek-R1", "-tp", "8", "--no-async-scheduling")
    default, huge = (lint(cli, *r1, *cap)[0]["text"] for cap in ((), ("--max-num-seqs", "99999999")))
    assert default == huge and "1,024 requests" not in default
    assert "8 requests running" in lint(cli, *V2LITE, "--no-async-scheduling", "--max-num-seqs", "+8")[0]["text"]
    assert lint(cli, *V2LITE, "--no-async-scheduling", "--max-num-seqs", "1") == []    # nothing to wait for


def test_an_abbreviated_enforce_eager_is_read_as_the_engine_reads_it(cli):
    assert [f["flag"] for f in lint(cli, *V2LITE, "--enforce", "--no-async-scheduling")] == [
        "--enforce-eager", "--no-async-scheduling"]


def test_a_chunk_hides_only_in_its_own_rounds_idle_time():
    from mla_planner.perf.prefill import Prefill
    from mla_planner.perf.request_times import hidden_stall_s
    spec, topo = load_model("deepseek-v2-lite").spec, load_topology("8xh200")
    calib = load_calibration(None, topo)
    d = decode_step(spec, topo, Layout(tp=1), Knobs(engine="vllm", kv_cache_dtype="fp8"), 4096, 2048, calib)
    assert d.idle_s > 0
    def chunk(seconds):
        return Prefill(2048, 2048, 1, seconds, seconds)
    assert hidden_stall_s(0.5, chunk(d.idle_s * 2), d) == pytest.approx(0.5 * d.idle_s)   # half the rounds carry one
    assert hidden_stall_s(3, chunk(d.idle_s), d) == pytest.approx(2 * d.idle_s)          # three share one round
    assert hidden_stall_s(1, chunk(d.idle_s / 2), d) == 0.0
