"""Prefill/decode disaggregation (issue 21): the pools' model (perf/disagg.py), the search over whole-node pools
(search/disagg.py), aggregated against disaggregated (search/deployment.py), and the plan file's record of it."""

from dataclasses import replace

import pytest
from plan_cases import setup

from mla_planner.engines.disagg import pools_mismatch
from mla_planner.perf.disagg import decode_rate, prefill_rate, split, transfer
from mla_planner.perf.layer_work import Batch
from mla_planner.perf.step import decode_step, forward_stages
from mla_planner.search.disagg import pool_topology, search_disaggregated
from mla_planner.search.tuning import draft_knobs
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout

WORK = Workload(input_len=4096, output_len=1024, tpot_ms=30, ttft_ms=3000)


@pytest.fixture(scope="module")
def h200():
    spec, topo, calib = setup("deepseek-v3", "4x8xh200-ib")
    return spec, topo, calib, pool_topology(topo, 1)


def test_a_packed_prefill_forward_runs_each_prompts_attention_apart(h200):
    """k prompts in one forward: the linear work of k x L tokens, the attention of k L-token prompts (not of one
    k x L-token sequence, whose causal attention is k times larger)."""
    spec, _, calib, one = h200
    layout = Layout(tp=8)
    knobs = replace(draft_knobs(spec, one, layout, "sglang", "fp8", WORK)[0], max_num_batched_tokens=16384)
    rate = prefill_rate(spec, one, layout, knobs, WORK, calib)
    assert rate.prompts_per_forward == 4
    _, whole = forward_stages(spec, one, layout, knobs, Batch(0, 0, 16384, 0), calib)
    assert rate.forward_s < sum(s.total_s for s in whole)               # less attention than one 16k sequence
    assert rate.forward_s > 4 * 0.5 * rate.lone_s                       # but far more than one prompt's
    assert rate.tokens_per_s == pytest.approx(4 * 4096 / rate.forward_s)


def test_a_prompt_longer_than_the_budget_runs_its_chunks_in_turn(h200):
    spec, _, calib, one = h200
    layout = Layout(tp=8)
    knobs = replace(draft_knobs(spec, one, layout, "sglang", "fp8", WORK)[0], max_num_batched_tokens=2048)
    rate = prefill_rate(spec, one, layout, knobs, WORK, calib)
    assert rate.prompts_per_forward == 1
    assert rate.forward_s == rate.lone_s and rate.host_s == calib.ttft_host_s   # the TTFT adds the part outside
    assert rate.tokens_per_s == pytest.approx(4096 / rate.lone_s)


def test_the_transfer_is_the_cache_each_receiving_gpu_holds_over_its_nic(h200):
    """MLA keeps the latent whole on every TP rank: each of a TP8 decode instance's GPUs receives the whole prompt's
    cache over its own 400 Gb/s NIC; a DP-attention rank receives it alone."""
    spec, topo, calib, _ = h200
    per_token = attention_of(spec).bytes_per_token(spec, "fp8", range(spec.num_hidden_layers))
    t = transfer(spec, topo, Layout(tp=8), Layout(tp=8), "fp8", 4096, calib, per_chunk=False, chunk_tokens=4096)
    assert t.bytes_per_gpu == pytest.approx(per_token * 4096)
    assert t.bytes_per_request == pytest.approx(8 * per_token * 4096)
    assert t.seconds == pytest.approx(per_token * 4096 / (50e9 * calib.kv_transfer_efficiency))
    assert t.exposed_s == t.seconds                                    # vLLM: read after the whole prefill
    dp = transfer(spec, topo, Layout(tp=8), Layout(tp=1, dp=16, ep=16), "fp8", 4096, calib, False, 4096)
    assert dp.bytes_per_request == pytest.approx(per_token * 4096)
    chunked = transfer(spec, topo, Layout(tp=8), Layout(tp=8), "fp8", 4096, calib, per_chunk=True,
                       chunk_tokens=1024)
    assert chunked.exposed_s == pytest.approx(t.seconds / 4)           # SGLang: only the last chunk's share waits
    # one DP-attention prefill rank holds the request: it sends every decode TP rank its copy over its own NIC
    fan = transfer(spec, topo, Layout(tp=1, dp=8, ep=8), Layout(tp=8), "fp8", 4096, calib, False, 4096)
    assert fan.seconds == pytest.approx(8 * t.seconds)


def test_the_decode_pool_runs_the_largest_batch_within_the_tpot_target(h200):
    spec, _, calib, one = h200
    layout = Layout(tp=8)
    knobs = draft_knobs(spec, one, layout, "sglang", "fp8", WORK)[0]
    d = decode_rate(spec, one, layout, knobs, WORK, calib)
    assert d.limit == "tpot" and d.batch_per_dp_rank > 1
    assert d.step.tpot_s <= 0.030
    over = decode_step(spec, one, layout, knobs, d.batch_per_dp_rank + 1, WORK.mean_decode_context, calib)
    assert over.tpot_s > 0.030
    assert d.requests_per_s == pytest.approx(d.batch_per_dp_rank / (1024 * d.step.tpot_s))
    capped = decode_rate(spec, one, layout, knobs, WORK, calib, cap_per_dp_rank=3)
    assert (capped.batch_per_dp_rank, capped.limit) == (3, "concurrency")


def _pools(h200):
    spec, topo, calib, one = h200
    kp = replace(draft_knobs(spec, one, Layout(tp=8), "sglang", "fp8", WORK)[0], max_num_batched_tokens=16384)
    p = prefill_rate(spec, one, Layout(tp=8), kp, WORK, calib)
    kd = draft_knobs(spec, one, Layout(tp=8), "sglang", "fp8", WORK)[0]
    d = decode_rate(spec, one, Layout(tp=8), kd, WORK, calib)
    t = transfer(spec, topo, Layout(tp=8), Layout(tp=8), "fp8", 4096, calib, True, 16384)
    return p, t, d


def test_the_split_serves_what_the_binding_pool_allows_with_an_md1_prefill_queue(h200):
    p, t, d = _pools(h200)
    s = split(WORK, p, Layout(tp=8), 1, t, d, Layout(tp=8), 3)
    assert s.binding == "decode"
    assert s.requests_per_s == pytest.approx(3 * d.requests_per_s)
    per_prompt = p.forward_s / p.prompts_per_forward          # one TP8 rank group: one server
    rho = s.requests_per_s * per_prompt
    assert s.prefill_utilization == pytest.approx(rho)
    assert s.queue_s == pytest.approx(rho * per_prompt / (2 * (1 - rho)))
    assert s.ttft_s == pytest.approx(s.queue_s + p.lone_s + t.exposed_s + d.step.step_s + p.host_s)
    assert s.throughput_tokens_per_s_per_gpu == pytest.approx(s.requests_per_s * 1024 / 32)
    assert s.meets_targets


def test_a_tight_ttft_target_holds_the_prefill_pool_below_full_load(h200):
    p, t, d = _pools(h200)
    fixed = p.lone_s + t.exposed_s + d.step.step_s + p.host_s
    tight = replace(WORK, ttft_ms=(fixed + 0.2 * p.forward_s / p.prompts_per_forward) * 1e3)
    s = split(tight, p, Layout(tp=8), 1, t, d, Layout(tp=8), 8)
    assert s.binding == "prefill"
    assert s.ttft_s == pytest.approx(tight.ttft_ms / 1e3)              # the queue takes what the target leaves
    assert s.meets_targets


def test_an_offered_rate_beyond_both_pools_is_an_overload(h200):
    p, t, d = _pools(h200)
    s = split(replace(WORK, request_rate_per_s=1000.0), p, Layout(tp=8), 1, t, d, Layout(tp=8), 1)
    assert s.overload > 1 and not s.meets_targets


def test_a_closed_loop_beyond_what_the_decode_pool_holds_queues(h200):
    """--concurrency C: the decode pool holds its batch on every DP rank; the rest wait, as for an aggregated
    candidate, and miss the TTFT target."""
    p, t, d = _pools(h200)
    held = 2 * d.batch_per_dp_rank
    s = split(replace(WORK, concurrency=held + 1), p, Layout(tp=8), 1, t, d, Layout(tp=8), 2)
    assert s.overload == pytest.approx((held + 1) / held) and not s.meets_targets
    assert split(replace(WORK, concurrency=held), p, Layout(tp=8), 1, t, d, Layout(tp=8), 2).meets_targets


def test_pools_must_agree_on_what_the_engine_checks_at_the_handshake():
    from mla_planner.specs.knobs import Knobs
    a = Knobs(engine="sglang", block_size=1, kv_cache_dtype="fp8", attention_backend="fa3")
    assert pools_mismatch("sglang", a, replace(a, attention_backend="flashmla")) == ""
    assert "page size" in pools_mismatch("sglang", a, replace(a, block_size=64))
    assert "KV cache dtype" in pools_mismatch("vllm", a, replace(a, kv_cache_dtype="bf16"))
    assert "attention backend" in pools_mismatch("vllm", a, replace(a, attention_backend="flashmla"))


def test_the_search_splits_whole_nodes_and_ranks_by_output_per_gpu(h200):
    spec, topo, calib, _ = h200
    found = search_disaggregated(spec, topo, WORK, calib)
    assert found
    for x in found:
        used = x.prefill.instances * x.prefill.nodes_per_instance + x.decode.instances * x.decode.nodes_per_instance
        assert used <= topo.nodes
        assert x.prefill.layout.instance_gpus == x.prefill.nodes_per_instance * topo.gpus_per_node
        assert x.decode.layout.replicas == 1 and x.decode.layout.pp == 1
        assert not pools_mismatch(x.engine, x.prefill.knobs, x.decode.knobs)
        assert x.split.gpus == x.prefill.gpus + x.decode.gpus
    keys = [x.key() for x in found]
    assert keys == sorted(keys)
    assert found[0].bands["throughput_tokens_per_s_per_gpu_low"] <= found[0].split.throughput_tokens_per_s_per_gpu


def test_one_node_or_no_rdma_has_no_disaggregated_deployment():
    spec, topo, calib = setup("deepseek-v2-lite", "8xh200")
    assert search_disaggregated(spec, topo, Workload(), calib) == []
    spec, topo, calib = setup("deepseek-v2-lite", "2x8xl40s-eth")
    assert search_disaggregated(spec, topo, Workload(), calib) == []


def test_any_trays_of_an_nvl72_rack_form_one_nvlink_instance():
    spec, topo, calib = setup("deepseek-v3", "gb200-nvl72")
    for trays in (2, 4, 5, 8, 16):
        sub = pool_topology(topo, trays)
        assert sub.domain_gpus == trays * topo.gpus_per_node == sub.total_gpus
    assert pool_topology(topo, 36).domain_gpus == 72        # two racks: NVLink inside each


def test_a_closed_loop_runs_at_the_rate_littles_law_gives(h200):
    """C requests in flight, each spending TTFT + (output - 1) x TPOT in the engines (the TTFT less its part outside
    them, as for an aggregated deployment): C / that per second."""
    p, t, d = _pools(h200)
    held = 2 * d.batch_per_dp_rank
    s = split(replace(WORK, concurrency=held // 2), p, Layout(tp=8), 1, t, d, Layout(tp=8), 2)
    assert s.binding == "concurrency" and s.meets_targets
    assert s.requests_per_s == pytest.approx((held // 2) / (s.ttft_s - p.host_s + 1023 * s.tpot_s), rel=1e-6)


def test_prompts_finishing_in_one_forward_queue_on_the_nics(h200):
    spec, topo, calib, _ = h200
    one = transfer(spec, topo, Layout(tp=8), Layout(tp=8), "fp8", 4096, calib, False, 16384)
    four = transfer(spec, topo, Layout(tp=8), Layout(tp=8), "fp8", 4096, calib, False, 16384, packed=4)
    assert four.seconds == one.seconds and four.exposed_s == pytest.approx(2.5 * one.seconds)
