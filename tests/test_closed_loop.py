"""The closed-loop benchmark's first wave and SGLang's polling (perf/closed_loop.py): what validate adds to the
steady-state TTFT when it prices a published closed-loop run."""

from __future__ import annotations

import pytest

from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.perf.closed_loop import closed_loop_mean_ttft_s, first_wave, recv_wait_s
from mla_planner.perf.disagg import prefill_rate
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology


@pytest.fixture(scope="module")
def r1_h200():
    spec, topo = load_model("deepseek-r1").spec, load_topology("8xh200")
    return spec, topo, engine_default_knobs("sglang", spec, topo), load_calibration(None, topo)


def test_one_prompt_alone_waits_for_its_own_forward_only(r1_h200):
    spec, topo, knobs, calib = r1_h200
    workload = Workload(input_len=1024, output_len=1024)
    wave = first_wave(spec, topo, Layout(tp=8), knobs, workload, calib, 1, 32768)
    assert wave.forwards == 1 and wave.prompts_per_forward == 1
    alone = prefill_rate(spec, topo, Layout(tp=8), knobs, workload, calib)
    assert wave.mean_ttft_s == pytest.approx(alone.lone_s + alone.host_s)     # and the part outside the forward


def test_a_wave_larger_than_a_forward_queues_forward_after_forward(r1_h200):
    """64 prompts of 1,024 tokens under a 32,768-token budget: two full forwards of 32, the second half waiting
    for both, so the mean is 1.5 forwards; 4 prompts fit one forward priced at its own (smaller) size."""
    spec, topo, knobs, calib = r1_h200
    workload = Workload(input_len=1024, output_len=1024)
    big = first_wave(spec, topo, Layout(tp=8), knobs, workload, calib, 64, 32768)
    assert (big.prompts_per_forward, big.forwards) == (32, 2)
    assert big.mean_ttft_s == pytest.approx(1.5 * big.forward_s + calib.ttft_host_s)    # and the part outside them
    small = first_wave(spec, topo, Layout(tp=8), knobs, workload, calib, 4, 32768)
    assert small.forwards == 1 and small.mean_ttft_s - calib.ttft_host_s < big.forward_s


def test_the_mean_weights_the_wave_by_its_share_of_the_prompts(r1_h200):
    spec, topo, knobs, calib = r1_h200
    wave = first_wave(spec, topo, Layout(tp=8), knobs, Workload(input_len=1024, output_len=1024), calib, 8, 32768)
    assert closed_loop_mean_ttft_s(0.05, wave, 8, 80) == pytest.approx((8 * wave.mean_ttft_s + 72 * 0.05) / 80)
    assert closed_loop_mean_ttft_s(0.05, wave, 8, 8) == pytest.approx(wave.mean_ttft_s)


def test_polling_every_r_steps_waits_half_of_them():
    assert recv_wait_s(30, 0.02) == pytest.approx(0.3)
    assert recv_wait_s(1, 0.02) == 0.0


def test_a_remainder_forward_is_priced_at_its_own_size(r1_h200):
    """40 prompts under a 32-prompt forward: a full forward of 32, then one of 8, cheaper than a full one."""
    spec, topo, knobs, calib = r1_h200
    workload = Workload(input_len=1024, output_len=1024)
    wave = first_wave(spec, topo, Layout(tp=8), knobs, workload, calib, 40, 32768)
    assert (wave.prompts_per_forward, wave.forwards) == (32, 2)
    eight = first_wave(spec, topo, Layout(tp=8), knobs, workload, calib, 8, 32768).mean_ttft_s - calib.ttft_host_s
    assert wave.mean_ttft_s - calib.ttft_host_s == pytest.approx((32 * wave.forward_s + 8 * (wave.forward_s + eight))
                                                                 / 40)


def test_prefix_hits_shrink_what_a_forward_packs(r1_h200):
    """A prompt half served from the prefix cache computes half its tokens, so twice as many pack a forward."""
    spec, topo, knobs, calib = r1_h200
    cold = first_wave(spec, topo, Layout(tp=8), knobs, Workload(input_len=1024, output_len=1024), calib, 64, 32768)
    warm = first_wave(spec, topo, Layout(tp=8), knobs,
                      Workload(input_len=1024, output_len=1024, prefix_hit_rate=0.5), calib, 64, 32768)
    assert (cold.prompts_per_forward, warm.prompts_per_forward) == (32, 64)
    assert warm.forwards == 1 and warm.mean_ttft_s < cold.mean_ttft_s


def test_validate_adds_the_polling_wait_only_while_the_server_decodes(cli):
    """At one client the server is idle when a request arrives (SGLang polls at once); from two, a request waits for
    the next poll: the B200 points give the script's --scheduler-recv-interval."""
    import json
    rows = {r["id"]: r for r in json.loads(cli("validate", "--category", "ttft", "--json").stdout)["points"]}
    alone, two = rows["ttft-sglang0512-r1-b200-1k1k-c1"], rows["ttft-sglang0512-r1-b200-1k1k-c2"]
    assert alone["predicted"] < 30 + 115                        # the lone prefill forward (~24 ms) and ttft_host_s
    assert two["predicted"] > alone["predicted"] + 25           # half of 10 decode steps of ~7.5 ms, in 18 of 20
