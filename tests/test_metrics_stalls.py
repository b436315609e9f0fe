"""The five metrics' batch search, stalls and queueing: the largest batch under a limit, DP ranks coupled by
prefill chunks, chunk rounds, one output token and Little's law under the TTFT and TPOT targets, prompts
queueing, and the p99 prompt holding the batch."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.perf.batch_search import largest_under
from mla_planner.perf.metrics import batch_limit, evaluate
from mla_planner.perf.stalls import chunk_rounds_per_round, coupled_ranks
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import parse_layout
from mla_planner.specs.topology import load_topology


def test_largest_under_matches_a_scan():
    """The batch search (regula falsi + bisection) against a plain scan, on growing functions with kinks
    and jumps like mean TPOT's."""
    rng = random.Random(7)
    for _ in range(400):
        a, b, c = rng.uniform(1, 50), rng.uniform(0, 1), rng.uniform(0, 0.05)
        jump, cap, target = rng.choice([0, 5, 20]), rng.randint(1, 700), rng.uniform(1, 120)
        f = lambda x: a + b * x + c * x ** 1.5 + jump * (x > cap // 2) + 0.3 * math.floor(x / 64)  # noqa: E731
        exact = max([x for x in range(1, cap + 1) if f(x) <= target], default=0)
        assert largest_under(f, target, cap) == exact
        for hint in (exact, exact - 1, exact + 1, rng.randint(0, cap + 3)):   # a hint only saves evaluations
            assert largest_under(f, target, cap, hint=hint) == exact


def test_coupled_dp_ranks_wait_for_the_rank_with_most_chunks():
    """One rank: q = B x chunks / output_len chunk rounds per round. Coupled ranks: E[max of dp
    Poisson(q)], checked against a Monte Carlo draw; it grows with dp and stays below dp x q."""
    assert chunk_rounds_per_round(27, 5, 512, 1) == pytest.approx(27 * 5 / 512)
    rng = random.Random(3)

    def poisson(q):   # Knuth
        k, p, limit = 0, rng.random(), math.exp(-q)
        while p > limit:
            k, p = k + 1, p * rng.random()
        return k
    q, dp = 27 * 5 / 512, 16
    draws = [max(poisson(q) for _ in range(dp)) for _ in range(20000)]
    assert chunk_rounds_per_round(27, 5, 512, dp) == pytest.approx(sum(draws) / len(draws), rel=0.03)
    values = [chunk_rounds_per_round(27, 5, 512, n) for n in (1, 2, 4, 8, 16)]
    assert values == sorted(values) and values[-1] < 16 * q


def test_a_requests_own_prefill_does_not_stretch_its_tpot():
    """A request's own prefill comes before its first token (TTFT): what stretches its time per output
    token are the other requests' chunks, (B - 1) x chunks / output_len on its rank, and every chunk of the
    other coupled ranks. Checked against a Monte Carlo draw of max(own, others)."""
    assert chunk_rounds_per_round(1, 5, 512, 1, others_only=True) == 0
    assert chunk_rounds_per_round(27, 5, 512, 1, others_only=True) == pytest.approx(26 * 5 / 512)
    rng = random.Random(5)

    def poisson(q):
        k, p, limit = 0, rng.random(), math.exp(-q)
        while p > limit:
            k, p = k + 1, p * rng.random()
        return k
    for batch, dp in ((1, 8), (3, 16)):
        q, q_own = batch * 40 / 64, (batch - 1) * 40 / 64
        draws = [max([poisson(q_own)] + [poisson(q) for _ in range(dp - 1)]) for _ in range(20000)]
        got = chunk_rounds_per_round(batch, 40, 64, dp, others_only=True)
        assert got == pytest.approx(sum(draws) / len(draws), rel=0.03)
        assert got < chunk_rounds_per_round(batch, 40, 64, dp)


def test_chunk_rounds_for_large_q_neither_underflow_nor_stall():
    """Short outputs and small vLLM DeepEP budgets give q in the hundreds or thousands (exp(-q) underflows
    past ~745): the expected maximum still exceeds the mean, grows with q, and matches a log-space sum."""
    def reference(q, n):
        cdf, total = 0.0, 0.0
        for k in range(int(q + 40 * math.sqrt(q) + 200)):
            cdf += math.exp(-q + k * math.log(q) - math.lgamma(k + 1))
            total += 1 - min(cdf, 1.0) ** n
        return total
    for q in (200, 745, 746, 2000):
        for n in (2, 512):
            assert chunk_rounds_per_round(q, 1, 1, n) == pytest.approx(reference(q, n), rel=1e-6)
            assert chunk_rounds_per_round(q, 1, 1, n) > q
    values = [chunk_rounds_per_round(b, 1, 1, 2) for b in range(700, 800)]
    assert values == sorted(values)


def test_only_ranks_with_requests_are_coupled():
    """16 DP ranks but an offered concurrency of 20 at 10 requests per rank: 2 ranks carry requests."""
    spec = load_model("deepseek-v3").spec
    lay = parse_layout("tp=1,dp=16,ep=16")
    assert coupled_ranks(spec, lay) == 16
    assert coupled_ranks(spec, lay, 10, Workload(concurrency=20)) == 2
    assert coupled_ranks(load_model("deepseek-v2").spec, parse_layout("tp=16")) == 1


def test_one_output_token_is_held_to_the_ttft_target_by_littles_law():
    """With one output token a request's first token is its last: its TTFT is its whole time in the system. The
    batch is the largest whose time in the system meets the TTFT target (it once filled the KV pool: 423
    requests at 42 requests/s, ~10 s each, reported as a 72 ms TTFT). Little's law ties the figures: requests in
    flight / requests per second = the TTFT reported."""
    w = Workload(input_len=2048, output_len=1, ttft_ms=3000)
    spec, topo = load_model("deepseek-v3").spec, load_topology("2x8xh100-ib")
    knobs = engine_default_knobs("vllm", spec, topo, max_model_len=w.max_context_len)
    m = evaluate(spec, topo, parse_layout("tp=8,pp=2"), knobs, w, load_calibration(None, topo))
    assert m.concurrency_limit == "ttft" and m.meets_targets
    cap, _ = batch_limit(m.layout, knobs, m.memory, w, topo.gpu)
    assert 1 < m.concurrency < cap
    requests_per_s = m.throughput_tokens_per_s / w.output_len
    host = load_calibration(None, topo).ttft_host_s      # the part of the TTFT outside the engine (ttft_host_s)
    assert m.concurrency / requests_per_s == pytest.approx(m.ttft_s - host, rel=1e-6)
    assert m.ttft_s <= 3.0
    looser = evaluate(spec, topo, m.layout, knobs, Workload(input_len=2048, output_len=1, ttft_ms=6000),
                      load_calibration(None, topo))
    assert looser.concurrency > m.concurrency and looser.ttft_s > 3.0


def test_one_output_token_gains_nothing_from_mtp_and_settles_under_arrivals():
    """MTP's drafts cannot shorten a request whose one token comes with its prefill (a review found MTP doubling
    the planned one-token batch); under an open arrival stream the one-token wait is the one at the batch that
    actually runs, so Little's law ties requests in flight, arrivals and TTFT."""
    spec, topo = load_model("deepseek-v3").spec, load_topology("2x8xh100-ib")
    cal, layout = load_calibration(None, topo), parse_layout("tp=8,pp=2")
    w = Workload(input_len=2048, output_len=1, ttft_ms=3000)
    knobs = engine_default_knobs("vllm", spec, topo, max_model_len=w.max_context_len)
    plain = evaluate(spec, topo, layout, knobs, w, cal)
    mtp = evaluate(spec, topo, layout, replace(knobs, mtp=True), w, cal)
    assert mtp.concurrency <= plain.concurrency and mtp.throughput_tokens_per_s <= plain.throughput_tokens_per_s
    light = Workload(input_len=2048, output_len=1, ttft_ms=3000, request_rate_per_s=1.0)
    m = evaluate(spec, topo, layout, knobs, light, cal)
    assert m.meets_targets and m.concurrency_per_dp_rank < plain.concurrency_per_dp_rank
    assert m.ttft_s < plain.ttft_s and m.concurrency == math.ceil(1.0 * m.ttft_s - 1e-9)


def test_prompts_queue_under_a_loose_tpot_target_until_ttft_binds():
    """Two output tokens and a TPOT target that never binds: the batch grows until the prompts' queue holds a
    request past the TTFT target (it once grew to the KV pool, ~10 s in the system, reported as a 72 ms TTFT)."""
    spec, topo = load_model("deepseek-v3").spec, load_topology("2x8xh100-ib")
    cal, layout = load_calibration(None, topo), parse_layout("tp=8,pp=2")
    w = Workload(input_len=2048, output_len=2, tpot_ms=100_000, ttft_ms=3000)
    knobs = engine_default_knobs("vllm", spec, topo, max_model_len=w.max_context_len)
    m = evaluate(spec, topo, layout, knobs, w, cal)
    assert m.concurrency_limit == "ttft" and m.meets_targets and 2.5 < m.ttft_s <= 3.0
    host = load_calibration(None, topo).ttft_host_s      # outside the engine: not in its Little's law
    assert m.concurrency / (m.throughput_tokens_per_s / 2) == pytest.approx(m.ttft_s - host + m.tpot_s, rel=1e-6)


def test_the_p99_prompt_holds_the_batch_and_an_arrival_rate_is_judged_where_it_runs():
    """The TTFT target holds for the p99 prompt, whose prefill follows the same queue: the batch is cut to what
    it allows (a review found the batch filling the KV pool and the candidate then missing the target); under
    an arrival rate the verdict is the one at the batch that actually runs."""
    spec, topo = load_model("deepseek-v3").spec, load_topology("8xh200")
    cal, layout = load_calibration(None, topo), parse_layout("tp=8")
    w = Workload(input_len=2048, input_len_max=16384, output_len=64, tpot_ms=1000, ttft_ms=550)
    knobs = engine_default_knobs("vllm", spec, topo, max_model_len=w.max_context_len)
    m = evaluate(spec, topo, layout, knobs, w, cal)
    assert m.concurrency_limit == "ttft" and m.meets_targets and m.ttft_s < m.ttft_longest_s <= 0.55
    assert m.ttft_longest_s > 0.5        # held to the target, not far below it
    light = evaluate(spec, topo, layout, knobs, replace(w, request_rate_per_s=1.0), cal)
    assert light.meets_targets and light.concurrency_per_dp_rank < m.concurrency_per_dp_rank
    assert light.ttft_longest_s < m.ttft_longest_s and not [n for n in light.notes if "misses" in n]
