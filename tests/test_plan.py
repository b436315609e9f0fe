"""The plan search: constraint rules, the search space, knob choices (backend, block size, KV dtype, token
budget, CUDA graph capture range), the seed scenario (issue 5). Warnings and what a candidate can run:
test_plan_warnings.py; tuning and ranking: test_plan_tuning.py."""

from dataclasses import replace

import pytest
from plan_cases import setup

from mla_planner.memory.accounting import safe_memory_fraction
from mla_planner.memory.report import memory_report
from mla_planner.search.attention_backend import Rejected
from mla_planner.search.layouts import candidate_layouts
from mla_planner.search.plan import nothing_fits_advice
from mla_planner.search.run import search
from mla_planner.search.tuning import Overrides, draft_knobs, tune
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout, layout_problems, parse_layout


def test_seed_scenario_tp8_pp2_ranks_above_tp16():
    spec, topo, calib = setup("deepseek-v2", "2x8xh100-ib")
    pair = [parse_layout("tp=16"), parse_layout("tp=8,pp=2")]
    result = search(spec, topo, Workload(), calib, engines=("vllm",), kv_dtype="bf16", layouts=pair)
    labels = [o.layout.label for o in result.options]
    assert labels == ["tp8·pp2", "tp16"]
    tp8pp2, tp16 = (o.tuned.metrics for o in result.options)
    assert tp8pp2.throughput_tokens_per_s_per_gpu > tp16.throughput_tokens_per_s_per_gpu
    # and the full search finds something at least as good by the model's own numbers
    full = search(spec, topo, Workload(), calib)
    best = full.options[0].tuned.metrics
    assert best.meets_targets
    assert best.throughput_tokens_per_s_per_gpu >= tp8pp2.throughput_tokens_per_s_per_gpu


@pytest.mark.parametrize("model, topology, workload, eager", [
    ("deepseek-v2", "2x8xh100-ib", Workload(), False),
    ("deepseek-v3", "2x8xh200-ib", Workload(), False),
    # a review's counterexamples to an earlier, stall-based bound: an offered concurrency just above a
    # multiple of the DP ranks, short outputs (stalls that grow faster than the batch), eager mode
    ("deepseek-v2-lite", "2x8xl40s-eth", Workload(concurrency=17, tpot_ms=20, input_len=8192, output_len=64), True),
    ("deepseek-v2-lite", "2x8xh20-roce", Workload(output_len=64, prefix_hit_rate=0.5), False),
    ("deepseek-v2-lite", "2x8xh100-ib", Workload(tpot_ms=20, output_len=64), True),
])
def test_pruning_never_drops_an_engines_best(model, topology, workload, eager):
    """Branch and bound: with one layout tuned per engine before pruning, each engine's best candidate is
    the one an exhaustive search (every screened layout tuned) finds."""
    spec, topo, calib = setup(model, topology)
    pinned = Overrides(cuda_graphs=not eager)
    pruned = search(spec, topo, workload, calib, tuned_per_engine=1, pinned=pinned)
    everything = search(spec, topo, workload, calib, tuned_per_engine=10_000, pinned=pinned)
    for engine in ("vllm", "sglang"):
        def best(result):
            ok = [o for o in result.options if o.engine == engine and o.tuned.metrics.meets_targets]
            return ok[0].tuned.metrics.throughput_tokens_per_s_per_gpu if ok else None
        assert best(pruned) == pytest.approx(best(everything))
    assert len(pruned.options) <= len(everything.options)
    if workload == Workload():   # there the bounds spare half the tuning (the EP-across-TP duplicates they
        # pruned easily are no longer searched: 37 of 74 tuned for V3 on 2 x 8 H200, 59 of 120 before)
        assert len(pruned.options) <= len(everything.options) / 2
    assert not any("screened out" in r.reason for r in everything.rejected)


def test_pipeline_bounds_see_the_last_full_micro_batch_row():
    """With pp stages the decode step costs as much at k x pp + 1 sequences as at (k + 1) x pp, so
    B / tpot dips at each new micro-batch row and a bound taken at the first batch over the TPOT target
    can fall below what the layout reaches (a review's counterexample: 149 screened vs 155 tuned)."""
    spec, topo, calib = setup("deepseek-v3", "2x8xh200-ib")
    workload = Workload(tpot_ms=40, input_len=1024, output_len=8192)
    layouts = [Layout(tp=2, pp=4, dcp=2, replicas=2), Layout(tp=1, pp=4, dp=2, ep=2, replicas=2)]
    runs = [search(spec, topo, workload, calib, engines=("vllm",), kv_dtype="bf16", layouts=layouts,
                   tuned_per_engine=n) for n in (1, 10_000)]
    best = [r.options[0].tuned.metrics.throughput_tokens_per_s_per_gpu for r in runs]
    assert best[0] == pytest.approx(best[1]) and runs[0].options[0].layout == runs[1].options[0].layout


def test_deepseek_v3_on_one_h100_node_has_no_candidate_and_says_what_fits():
    spec, topo, calib = setup("deepseek-v3", "8xh100")
    result = search(spec, topo, Workload(), calib)
    assert result.options == []
    assert any("weights" in r.reason for r in result.rejected)
    advice = nothing_fits_advice(spec, topo, Workload())
    assert any("exceed" in line for line in advice)
    assert any(line.startswith("would fit: more nodes") for line in advice)


@pytest.mark.parametrize("layout, words", [
    (Layout(tp=3), "heads are not divisible"),
    (Layout(tp=1, dp=6, ep=6), "routed experts are not divisible"),
    (Layout(tp=8, dcp=3), "not divisible by dcp"),
    (Layout(tp=4, dp=3, ep=12), "does not pack into nodes"),
    (Layout(tp=8, pp=4), "the cluster has 16"),
    (Layout(tp=8, kv_layout="latent-sharded", dcp=1), None),
])
def test_constraint_rules(layout, words):
    spec = load_model("deepseek-v3").spec
    problems = layout_problems(layout, spec, gpus_per_node=8, total_gpus=16)
    if words is None:
        assert problems == []
    else:
        assert any(words in p for p in problems), problems


def test_search_space_only_holds_legal_layouts_and_fills_the_cluster():
    spec, topo, _ = setup("deepseek-v3", "2x8xh200-ib")
    legal, rejected = candidate_layouts(spec, topo)
    assert legal
    for lay in legal:
        assert not layout_problems(lay, spec, topo.gpus_per_node, topo.total_gpus)
        assert lay.total_gpus <= topo.total_gpus < lay.total_gpus + lay.instance_gpus
    labels = {lay.label for lay in legal}
    assert {"tp8·pp2", "tp16", "tp1·dp16·ep16", "2x(tp8)"} <= labels


@pytest.mark.parametrize("engine, topology, kv, backend, block", [
    ("vllm", "2x8xh100-ib", "bf16", "FLASH_ATTN_MLA", 64),
    ("vllm", "2x8xh100-ib", "fp8", "FLASHMLA", 64),       # FLASH_ATTN_MLA has no FP8 KV
    ("vllm", "8xb200", "bf16", "FLASHINFER_MLA", 64),
    ("sglang", "2x8xh100-ib", "bf16", "fa3", 1),
    ("sglang", "8xb200", "fp8", "trtllm_mla", 64),
])
def test_backend_and_block_size_choice(engine, topology, kv, backend, block):
    spec, topo, _ = setup("deepseek-v3", topology)
    knobs, reasons = draft_knobs(spec, topo, Layout(tp=8), engine, kv, Workload())
    assert (knobs.attention_backend, knobs.block_size) == (backend, block)
    assert backend in reasons["attention_backend"]


def test_no_fp8_kv_on_ampere():
    spec, topo, _ = setup("deepseek-v3", "4x8xa100-ib")
    with pytest.raises(Rejected, match="no vllm MLA backend"):
        draft_knobs(spec, topo, Layout(tp=8, pp=2), "vllm", "fp8", Workload())


def test_knobs_follow_the_models():
    spec, topo, calib = setup("deepseek-v3", "8xh200")
    workload = Workload(input_len=3000, output_len=1000, input_len_max=7000, output_len_max=2000, tpot_ms=40)
    tuned = tune(spec, topo, Layout(tp=8), "vllm", "bf16", workload, calib)
    k, m = tuned.knobs, tuned.metrics
    assert k.max_model_len == 9024                      # 9,000 tokens rounded up to 64-token blocks
    # the memory model's safe fraction (sized for the largest prefill chunk tried), not a blind 0.95
    worst = replace(k, max_num_batched_tokens=16384, max_num_seqs=1024)
    assert k.memory_fraction == int(safe_memory_fraction(spec, topo, Layout(tp=8), worst) * 1000) / 1000
    assert memory_report(spec, topo, Layout(tp=8), k).fits
    assert k.max_num_seqs == m.concurrency_per_dp_rank   # what the pool and the TPOT target allow
    assert f"at {k.max_num_seqs} running requests" in tuned.reasons["max_num_batched_tokens"]   # the final batch
    assert m.tpot_s <= 0.040 and m.memory.fits
    assert k.max_num_batched_tokens in (2048, 4096, 8192, 16384)
    assert k.cuda_graphs and k.prefix_caching
    assert set(tuned.reasons) >= {"attention_backend", "block_size", "memory_fraction", "max_num_seqs",
                                  "max_num_batched_tokens", "max_model_len", "prefix_caching", "cuda_graphs",
                                  "kv_cache_dtype"}


def test_vllm_never_runs_more_requests_than_its_token_budget():
    """vLLM decodes one token per running request out of max_num_batched_tokens and refuses a budget below
    max_num_seqs; DP+EP plans keep a small budget (the DeepEP buffer), so the batch must stay under it.
    The review case: B200, long outputs, 40 ms (it once emitted 392 sequences with a 256-token budget)."""
    spec, topo, calib = setup("deepseek-v3", "8xb200")
    result = search(spec, topo, Workload(input_len=512, output_len=2048, tpot_ms=40), calib, engines=("vllm",))
    dp_ep = [o for o in result.options if o.layout.dp > 1 and o.layout.ep > 1]
    assert dp_ep and all(o.tuned.knobs.max_num_batched_tokens <= 1024 for o in dp_ep)
    for o in result.options:
        assert o.tuned.knobs.max_num_seqs <= o.tuned.knobs.max_num_batched_tokens, o.layout.label
        assert o.tuned.metrics.concurrency_per_dp_rank <= o.tuned.knobs.max_num_batched_tokens


def test_running_requests_stay_in_the_cuda_graph_capture_range():
    """The step model prices graph replay, so a DP rank's decode micro-batch stays within what the engine
    captures (vLLM 512, SGLang by GPU and TP, unless the plan raises it); beyond it decode runs eagerly
    (vllm-project/vllm#16886). Short prompts (512 in) on 8 H200 once planned 535 running requests under a 512 range."""
    from mla_planner.engines.cuda_graphs import graph_batch_cap
    from mla_planner.memory.accounting import evaluate
    spec, topo, calib = setup("deepseek-v3", "8xh200")
    result = search(spec, topo, Workload(input_len=512), calib)
    for o in result.options:
        assert o.tuned.knobs.max_num_seqs <= graph_batch_cap(o.engine, topo.gpu, o.layout, o.tuned.knobs) * o.layout.pp
    raised = [o for o in result.options if o.tuned.knobs.cuda_graph_max_bs]
    assert raised, "short prompts on 8 H200 run more than 512 requests per DP rank: the plan raises the range"
    for o in raised:
        k = o.tuned.knobs
        assert k.cuda_graph_max_bs > graph_batch_cap(o.engine, topo.gpu, o.layout) and k.cuda_graph_max_bs % 16 == 0
        assert o.tuned.knobs.max_num_seqs > graph_batch_cap(o.engine, topo.gpu, o.layout) * o.layout.pp
        why = o.tuned.reasons["cuda_graph_max_bs"]    # raised here, or already at the draft chunk (and kept there)
        assert "would run larger decode batches eagerly" in why or why.startswith("the range fitted at the draft chunk")
        own = evaluate(spec, topo, o.layout, replace(k, cuda_graph_max_bs=None))   # more graphs cost memory
        assert o.tuned.metrics.memory.per_gpu[0].terms["cuda_graph"] > own.per_gpu[0].terms["cuda_graph"]


def test_the_raised_capture_range_reaches_the_launch_command(tmp_path):
    """One L40S with DeepSeek-V2-Lite: SGLang captures decode graphs up to 32 by default on a 48 GB GPU at
    tp < 4 (memory_hook), while the KV pool and the TPOT target allow about 70 running requests."""
    from mla_planner.launch.emit import emit
    from mla_planner.search.plan import to_plan
    topo_file = tmp_path / "1xl40s.yaml"
    topo_file.write_text("name: 1xl40s\nnodes: 1\ngpus_per_node: 1\ngpu: L40S-48G\nintra_node: {kind: pcie}\n")
    spec, topo, calib = setup("deepseek-v2-lite", str(topo_file))
    result = search(spec, topo, Workload(), calib, engines=("sglang",))
    best = result.options[0]
    assert best.tuned.knobs.cuda_graph_max_bs and best.tuned.knobs.cuda_graph_max_bs > 32
    assert best.tuned.metrics.concurrency_per_dp_rank > 32
    plan = to_plan(spec, spec.hf_id, topo, Workload(), result, top=1)
    emit(plan, 1, None, tmp_path / "out")
    assert f"--cuda-graph-max-bs-decode {best.tuned.knobs.cuda_graph_max_bs}" in (tmp_path / "out" / "node-0.sh").read_text()


def test_context_beyond_the_model_is_rejected():
    spec, topo, calib = setup("deepseek-v3", "8xh200")
    with pytest.raises(Rejected, match="max_position_embeddings"):
        tune(spec, topo, Layout(tp=8), "vllm", "bf16", Workload(input_len=200_000), calib)
