"""The plan search: tuning each candidate's knobs (DeepEP only where it can run, chunk sizes, the safe memory
fraction, the CUDA graphs of the batch itself, a GQA model's backend, a tensor-parallel MoE without DeepEP),
the reasons it gives, and ranking by total tokens."""

import pytest
from plan_cases import setup

from mla_planner.search.attention_backend import Rejected
from mla_planner.search.run import search
from mla_planner.search.tuning import Overrides, tune
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout, parse_layout


@pytest.mark.parametrize("inter, vllm_ok", [("", False), ("inter_node: {fabric: ethernet, nics_per_node: 1, "
                                                         "nic_gbit_per_s: 100}\n", False),
                                            ("inter_node: {fabric: roce, nics_per_node: 4, nic_gbit_per_s: 200}\n",
                                             True)])
def test_deepep_is_planned_only_where_it_can_run(tmp_path, inter, vllm_ok):
    """DeepEP's normal kernels need NVLink (deepseek-ai/DeepEP#216: PCIe L20 cannot use them); its
    low-latency kernels reach other GPUs over NVLink or RDMA. So on a PCIe box DP attention + EP is planned
    for vLLM (low-latency kernels only) when RDMA NICs exist, with a warning, and never for SGLang (its
    auto mode prefills with the normal kernels)."""
    path = tmp_path / "pcie.yaml"
    path.write_text("name: 4xl40s\nnodes: 2\ngpus_per_node: 4\ngpu: L40S-48G\nintra_node: {kind: pcie}\n" + inter
                    if inter else "name: 4xl40s\nnodes: 1\ngpus_per_node: 4\ngpu: L40S-48G\nintra_node: {kind: pcie}\n")
    spec, topo, calib = setup("deepseek-v2-lite", str(path))
    result = search(spec, topo, Workload(), calib)
    deepep = [o for o in result.options if o.layout.dp > 1 and o.layout.ep > 1]
    assert not [o for o in deepep if o.engine == "sglang"]
    assert bool([o for o in deepep if o.engine == "vllm"]) == vllm_ok
    for o in deepep:
        assert any("test_low_latency.py" in w for w in o.warnings)
    said = {r.engine: r.reason for r in result.rejected if "DeepEP" in r.reason}
    assert "NVLink" in said["sglang"] and ("vllm" in said) != vllm_ok


def test_a_deepep_chunk_never_costs_the_batch_its_kv_room():
    """vLLM sizes its DeepEP buffer for the whole token budget: on Kimi-K2 with DP32 a 1,024-token chunk
    took 21 GiB and left no room for the batch the 256-token draft had (a tuned candidate served 0 tok/s). The
    chunk the tuner keeps holds at least the draft chunk's batch."""
    spec, topo, calib = setup("kimi-k2", "4x8xh800-roce")
    tuned = tune(spec, topo, parse_layout("tp=1,dp=32,ep=32"), "vllm", "fp8", Workload(), calib)
    assert tuned.metrics.concurrency_per_dp_rank > 0 and tuned.metrics.throughput_tokens_per_s > 0
    assert tuned.metrics.concurrency_per_dp_rank >= tuned.draft_batch > 0


@pytest.mark.parametrize("model, topo_name, engine, workload, layouts", [
    ("deepseek-v2-lite", "2x8xl40s-eth", "sglang", Workload(input_len=4096, tpot_ms=150), ["tp=1,pp=8"]),
    ("deepseek-v3", "2x8xh100-ib", "sglang", Workload(tpot_ms=150), None),
    ("deepseek-v3", "8xh200", "vllm", Workload(tpot_ms=100), None),
])
def test_the_final_knobs_stay_within_their_own_safe_fraction(model, topo_name, engine, workload, layouts):
    """A raised capture range or a moved layer split re-derives the memory fraction; it must be the one that
    is safe at the prefill chunk finally chosen (it was once derived at the smallest chunk, and the
    candidate then warned of its own knobs: 'only 1.8 GiB left free')."""
    from mla_planner.memory.accounting import safe_memory_fraction
    spec, topo, calib = setup(model, topo_name)
    given = [parse_layout(s) for s in layouts] if layouts else None
    result = search(spec, topo, workload, calib, engines=(engine,), layouts=given)
    assert any(o.tuned.knobs.cuda_graph_max_bs or o.tuned.knobs.pp_layer_partition for o in result.options)
    for o in result.options:
        k = o.tuned.knobs
        assert k.memory_fraction <= safe_memory_fraction(spec, topo, o.layout, k, published_ceiling=False) + 1e-9, k
        assert not [w for w in o.warnings if "margin" in w]
        assert o.tuned.reasons["memory_fraction"].startswith(f"{k.memory_fraction}:")


def test_a_layout_that_fits_only_with_smaller_chunks_is_planned_with_them():
    """The draft memory fraction is sized for the largest prefill chunk; on Kimi-K2 with SGLang DP32 that
    left no KV room (rejected at 0.754) though smaller chunks fit. The draft falls back to the largest
    chunk that leaves room, and the chunk chosen never exceeds what the fraction was sized for. (The layout
    was tp1·dp32 with the dense parts split over the stage, which SGLang cannot load: 576 columns a GPU of the
    FP8 dense MLP; tp4·dp8 with the dense parts per rank shows the same fallback.)"""
    from mla_planner.search.tuning import largest_safe_chunk
    spec, topo, calib = setup("kimi-k2", "4x8xh800-roce")
    with pytest.raises(Rejected, match="not a multiple of the FP8 checkpoint's 128-wide scale blocks"):
        tune(spec, topo, parse_layout("tp=1,dp=32,ep=32"), "sglang", "fp8", Workload(), calib)
    layout = parse_layout("tp=4,dp=8,ep=32")
    tuned = tune(spec, topo, layout, "sglang", "fp8", Workload(), calib, dense_per_rank=True)
    assert tuned.metrics.concurrency_per_dp_rank > 0 and tuned.metrics.meets_targets
    assert tuned.knobs.max_num_batched_tokens <= largest_safe_chunk(spec, topo, layout, tuned.knobs) < 16384


def test_a_kv_bound_batch_is_sized_with_the_graphs_of_the_batch_itself():
    """The KV-limited batch was found with the draft's 1,024-sequence cap, whose CUDA graphs (vLLM captures
    up to 2 x max-num-seqs) took 2 GiB more than those of the 39 sequences emitted: the pool at the emitted
    knobs held 53 (a user's check with `memory`). The cap is raised to what the pool then holds."""
    from mla_planner.memory.accounting import evaluate as memory_evaluate
    from mla_planner.perf.metrics import tokens_per_request
    spec, topo, calib = setup("kimi-k2", "4x8xh800-roce")
    workload = Workload(input_len=100000, output_len=8192, tpot_ms=150, ttft_ms=60000)
    result = search(spec, topo, workload, calib, engines=("vllm",), kv_dtype="fp8",
                    layouts=[parse_layout("tp=16,dcp=16"), parse_layout("tp=8,pp=2,dcp=8")])
    kv_bound = [o for o in result.options if o.tuned.metrics.concurrency_limit == "kv"]
    assert kv_bound
    for o in kv_bound:
        k = o.tuned.knobs
        room = memory_evaluate(spec, topo, o.layout, k).kv_capacity_tokens // tokens_per_request(workload, k.block_size)
        assert k.max_num_seqs <= room <= k.max_num_seqs + max(1, k.max_num_seqs // 20), (o.layout.label, k, room)


def test_a_gqa_model_gets_no_mla_backend():
    """vLLM refuses an MLA backend for a non-MLA model (backend.py: 'non-MLA not supported'): the Llama
    baseline runs the engine's own attention backend, and no --attention-backend reaches its command."""
    from mla_planner.launch.build import build, launch_inputs
    from mla_planner.search.plan import to_plan
    spec, topo, calib = setup("llama-3.1-70b", "8xh100")
    result = search(spec, topo, Workload(), calib)
    assert result.options and all(o.tuned.knobs.attention_backend is None for o in result.options)
    assert "MLA backends do not apply" in result.options[0].tuned.reasons["attention_backend"]
    plan = to_plan(spec, spec.hf_id, topo, Workload(), result, top=1)
    argv = [w for c in build(launch_inputs(plan, plan.candidates[0]), plan.candidates[0].knobs.engine)
            for w in c.argv]
    assert "--attention-backend" not in argv


@pytest.mark.parametrize("args", [
    ("llama-3.1-70b", "2x8xl40s-eth", Workload(tpot_ms=150), "tp=2,pp=2", "vllm", "bf16"),
    ("deepseek-v2-lite", "8xh200", Workload(concurrency=5000, tpot_ms=200, input_len=512, output_len=128), "tp=8",
     "vllm", None),
])
def test_the_reasons_name_the_knobs_emitted(args):
    """The max_num_batched_tokens reason names the chunk the knobs have (a fallback once kept the rejected
    one), and max_num_seqs blames the offered concurrency only when it, not the planner's cap, binds."""
    from mla_planner.search.reasons import MAX_NUM_SEQS_CAP
    model, topo_name, workload, layout, engine, kv = args
    spec, topo, calib = setup(model, topo_name)
    for o in search(spec, topo, workload, calib, engines=(engine,), kv_dtype=kv, layouts=[parse_layout(layout)]).options:
        k, why = o.tuned.knobs, o.tuned.reasons
        assert why["max_num_batched_tokens"].startswith(f"{k.max_num_batched_tokens:,}:")
        if k.max_num_seqs == MAX_NUM_SEQS_CAP and o.tuned.metrics.concurrency_limit == "max_num_seqs":
            assert "the planner's cap of 1,024" in why["max_num_seqs"]


@pytest.mark.parametrize("model, topology, workload", [
    ("kimi-k2", "4x8xh800-roce", Workload(input_len=65536, output_len=2048, tpot_ms=150, ttft_ms=60000)),
    ("deepseek-v3", "2x8xh200-ib", Workload()),
    ("deepseek-v2-lite", "2x8xl40s-eth", Workload(tpot_ms=30)),
])
def test_ranking_by_total_tokens_prunes_soundly(model, topology, workload):
    """--rank-by total scales every per-GPU bound by the layout's GPUs: the pruned search still finds what
    tuning every layout finds, and a layout using more of the cluster can now come first."""
    spec, topo, calib = setup(model, topology)
    runs = [search(spec, topo, workload, calib, tuned_per_engine=n, rank_by="total") for n in (1, 10_000)]
    for engine in ("vllm", "sglang"):
        best = [next((o.tuned.metrics.throughput_tokens_per_s for o in r.options
                      if o.engine == engine and o.tuned.metrics.meets_targets), None) for r in runs]
        assert best[0] == pytest.approx(best[1])
    ok = [o for o in runs[1].options if o.tuned.metrics.meets_targets]
    best = max(ok, key=lambda o: o.tuned.metrics.throughput_tokens_per_s)
    assert best is ok[0] or best.tie_group == 1      # the best total leads, or is tied with the lower-risk leader
    lows = [o.bands["throughput_tokens_per_s_low"] for o in ok if o.tie_group == 1]
    assert lows == sorted(lows, reverse=True)


def test_rank_by_total_can_fill_the_cluster(cli):
    import json
    per_gpu = json.loads(cli("plan", "-m", "kimi-k2", "-t", "4x8xh800-roce", "--input-len", "65536", "--output-len",
                             "2048", "--tpot-ms", "150", "--ttft-ms", "60000", "-e", "sglang", "--json").stdout)
    total = json.loads(cli("plan", "-m", "kimi-k2", "-t", "4x8xh800-roce", "--input-len", "65536", "--output-len",
                           "2048", "--tpot-ms", "150", "--ttft-ms", "60000", "-e", "sglang", "--rank-by", "total",
                           "--json").stdout)
    assert total["rank_by"] == "total" and per_gpu["rank_by"] == "per-gpu"
    first = [d["candidates"][0] for d in (per_gpu, total)]
    assert first[1]["performance"]["throughput_tokens_per_s"] > first[0]["performance"]["throughput_tokens_per_s"]
    gpus = [c["layout"]["pp"] * c["layout"]["tp"] * c["layout"]["dp"] * c["layout"]["replicas"] for c in first]
    assert gpus[1] > gpus[0] and gpus[1] == 32      # ranked by total, the first fills the 4 x 8 cluster
    # the Pareto front is taken in the ranking's unit: no point of it is beaten in all tokens/s and per user
    for data, key in ((per_gpu, "tokens_per_s_per_gpu"), (total, "tokens_per_s")):
        front = data["pareto"]
        assert front and all(a[key] <= b[key] and a["tokens_per_s_per_user"] >= b["tokens_per_s_per_user"]
                             for a, b in zip(front, front[1:]))
    assert total["pareto"][-1]["tokens_per_s"] >= max(p["tokens_per_s"] for p in per_gpu["pareto"])
    bad = cli("plan", "--rank-by", "latency")
    assert bad.exit_code == 2 and "--rank-by must be one of per-gpu, total" in bad.output


def test_without_deepep_dp_attention_runs_a_tensor_parallel_moe(tmp_path):
    """Where DeepEP cannot run (PCIe, no RDMA), DP attention is still searched, with the MoE tensor-parallel
    over the stage and its tokens gathered and scattered (vLLM flattens TP across DP without
    --enable-expert-parallel, fused_moe/config.py; SGLang's --attn-dp-size without --ep-size); on an
    NVLink + InfiniBand cluster DP attention keeps EP over DeepEP only."""
    from mla_planner.engines.parser.check import check_command
    from mla_planner.launch.build import build, launch_inputs
    from mla_planner.search.plan import to_plan
    path = tmp_path / "pcie.yaml"
    path.write_text("name: 4xl40s\nnodes: 1\ngpus_per_node: 4\ngpu: L40S-48G\nintra_node: {kind: pcie}\n")
    spec, topo, calib = setup("deepseek-v2-lite", str(path))
    result = search(spec, topo, Workload(), calib)
    plan = to_plan(spec, spec.hf_id, topo, Workload(), result)
    for engine in ("vllm", "sglang"):
        i, c = next((i, c) for i, c in enumerate(plan.candidates, 1)
                    if c.knobs.engine == engine and c.layout.dp > 1)
        assert c.layout.ep == 1 and c.performance.meets_targets
        for cmd in build(launch_inputs(plan, c), engine):
            assert check_command(cmd.engine_args, engine, "sm89", model_max_len=spec.max_position_embeddings) == []
            assert not {"--enable-expert-parallel", "--all2all-backend", "--ep-size", "--moe-a2a-backend"} & set(cmd.argv)
    spec, topo, calib = setup("deepseek-v3", "2x8xh200-ib")
    from mla_planner.search.layouts import candidate_layouts
    assert all(lay.ep == lay.stage_gpus for lay in candidate_layouts(spec, topo)[0] if lay.dp > 1)


def test_sglang_fraction_is_the_safe_one_at_the_chunk_chosen():
    """SGLang keeps a smaller chunk's activations outside its static pool, so once the chunk is chosen the
    fraction is raised to what is safe for it (a user's `memory` run found 0.935 safe where the plan said
    0.907, the fraction for the largest chunk tried)."""
    from mla_planner.memory.accounting import safe_memory_fraction
    spec, topo, calib = setup("deepseek-v2-lite", "2x8xl40s-eth")
    for o in search(spec, topo, Workload(), calib, engines=("sglang",)).options[:6]:
        k = o.tuned.knobs
        assert k.memory_fraction == pytest.approx(safe_memory_fraction(spec, topo, o.layout, k), abs=0.0015)


def test_a_bound_covers_the_kv_balanced_split_tuning_may_adopt():
    """A review's counterexample: DeepSeek-V3 on 4 x 8 H800, SGLang tp1·pp2·dp8·ep8 with the dense parts per
    rank and an FP8 cache. Under the engine's own split (30,31) the last stage holds the whole lm_head and its pool
    one request (bound 28.6 tok/s per GPU); tuning adopts the KV-balanced split 31,30 and serves ~70. The screening
    bound now prices that split too, so it stays an upper bound."""
    from mla_planner.search.bounds import screen as _screen
    from mla_planner.search.tuning import tune
    spec, topo, calib = setup("deepseek-v3", "4x8xh800-roce")
    layout = Layout(tp=1, pp=2, dp=8, ep=8, replicas=2)
    for kv in ("bf16", "fp8"):
        for per_rank in (False, True):
            bound, _, _ = _screen(spec, topo, layout, "sglang", kv, Workload(), calib, Overrides(), per_rank)
            tuned = tune(spec, topo, layout, "sglang", kv, Workload(), calib, dense_per_rank=per_rank)
            assert bound >= tuned.metrics.throughput_tokens_per_s_per_gpu * (1 - 1e-9), (kv, per_rank)
