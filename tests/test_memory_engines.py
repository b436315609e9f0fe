"""The per-GPU memory model's engine accounting: engine rules and defaults, memory fractions, CUDA graph
sizes, the pool in each engine's words, and what reviewers found (embeddings under DP attention, DeepEP
buffers, token budgets, SGLang's reserve, FP8 Marlin scales)."""

import json
from dataclasses import replace

import pytest
from memory_cases import GiB, V3, knobs_for, report

from mla_planner.core.errors import PlanError
from mla_planner.engines.cuda_graphs import vllm_capture_sizes
from mla_planner.engines.memory_rules import default_memory_fraction, engine_default_knobs, engine_rules
from mla_planner.memory.accounting import safe_memory_fraction
from mla_planner.memory.report import memory_report
from mla_planner.memory.verdict import ALLOCATOR_MARGIN_BYTES
from mla_planner.memory.weights import stage_weight_terms
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology


# ---- engine rules and defaults -------------------------------------------------------------------------

def test_engine_rules_by_version():
    assert engine_rules("vllm") == engine_rules("vllm", "0.33.0")
    new, old = engine_rules("vllm"), engine_rules("vllm", "0.8.4")
    assert new.graphs_in_budget and new.context_outside_budget and new.comms_outside_budget
    assert not old.graphs_in_budget and not old.context_outside_budget and not old.comms_outside_budget
    # 0.9.2 / 0.10.2 snapshot memory after the context, before NCCL init (their v1/worker/gpu_worker.py)
    mid = engine_rules("vllm", "0.9.2")
    assert mid.context_outside_budget and not mid.comms_outside_budget


def test_the_sort_based_sampler_is_charged_only_where_vllm_ran_it():
    """vLLM 0.11.1 made FlashInfer's sampler opt-in (vllm#26859), so its profile run sorts the full logits until the
    Triton top-k/top-p kernel (vllm#33538, 0.17); 0.11.0 still ran FlashInfer's, SGLang profiles no sampler."""
    assert [engine_rules("vllm", v).sampler_sorts for v in ("0.10.2", "0.11.0", "0.11.1", "0.16.0", "0.17.0")] == \
        [False, False, True, True, False]
    assert not engine_rules("sglang").sampler_sorts
    topo, layout = load_topology("8xh200"), Layout(tp=8)
    spec = load_model("kimi-k2.5").spec
    knobs = replace(engine_default_knobs("vllm", spec, topo), memory_fraction=0.9)
    peak = {v: memory_report(spec, topo, layout, knobs, engine_version=v).per_gpu[0].terms["activation_peak"]
            for v in ("0.11.0", "0.11.1")}
    rows_x_vocab = knobs.max_num_seqs * spec.vocab_size   # the dummy sampler's rows (1,024 by default here)
    assert peak["0.11.1"] - peak["0.11.0"] == pytest.approx(rows_x_vocab * (28 - 10), rel=1e-6)


def test_the_communicator_a_profile_run_creates_is_charged_on_the_stage_that_gathers_logits():
    """vLLM < 0.26 all-gathers the logits through torch's process group, whose NCCL communicator is created at that
    first collective inside the profiled window (0.26's CudaCommunicator.all_gather uses pynccl; ROCm keeps torch's):
    one more TP group, charged to the KV budget, on the last pipeline stage only."""
    spec, knobs = V3, knobs_for("vllm", load_topology("8xh200"), memory_fraction=0.9)
    def term(topo, layout, version):
        r = memory_report(spec, load_topology(topo), layout, knobs, engine_version=version)
        return [g.terms.get("nccl_profile_run", 0.0) for g in r.per_gpu]
    group = 1.8 * GiB       # data/platform_memory.yaml `nvlink`
    assert term("8xh200", Layout(tp=8), "0.25.0") == [pytest.approx(group)]
    assert term("8xh200", Layout(tp=8), "0.26.0") == [0.0] == term("8xh200", Layout(tp=1, dp=8, ep=8), "0.25.0")
    assert term("2x8xh100-ib", Layout(tp=8, pp=2), "0.11.1") == [0.0, pytest.approx(group)]
    assert term("8xmi300x", Layout(tp=8), None)[0] > 0          # vLLM 0.33 on ROCm: torch's all-gather
    old, new = (memory_report(spec, load_topology("8xh200"), Layout(tp=8), knobs, engine_version=v).kv_capacity_tokens
                for v in ("0.25.0", "0.26.0"))
    assert old < new


def test_default_fractions_match_engines_md():
    h200, b200 = load_topology("8xh200"), load_topology("8xb200")
    assert default_memory_fraction("vllm", V3, h200, Layout(tp=8)) == 0.92
    assert default_memory_fraction("sglang", V3, h200, Layout(tp=8)) == 0.886  # SGLang 0.5.23's resolved value
    assert default_memory_fraction("sglang", V3, b200, Layout(tp=8)) == pytest.approx(0.843, abs=0.0015)
    assert default_memory_fraction("sglang", V3, h200, Layout(tp=1, dp=8, ep=8)) == 0.736   # over DeepEP: +3 GiB
    assert default_memory_fraction("sglang", V3, h200, Layout(tp=1, dp=8)) == 0.758


def test_vllm_capture_sizes():
    h200 = load_topology("8xh200")
    sizes = vllm_capture_sizes(knobs_for("vllm", h200), h200.gpu)
    assert sizes[:4] == [1, 2, 4, 8] and sizes[-1] == 512 and len(sizes) == 51
    assert vllm_capture_sizes(knobs_for("vllm", h200, max_num_seqs=16), h200.gpu)[-1] == 32


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_safe_fraction_leaves_the_margin(engine):
    topo, layout = load_topology("8xh200"), Layout(tp=8)
    knobs = knobs_for(engine, topo)
    safe = safe_memory_fraction(V3, topo, layout, knobs)
    assert 0.8 < safe < 1
    r = memory_report(V3, topo, layout, replace(knobs, memory_fraction=safe))
    assert min(g.terms["free"] for g in r.per_gpu) >= ALLOCATOR_MARGIN_BYTES * 0.95
    over = memory_report(V3, topo, layout, replace(knobs, memory_fraction=0.99))
    assert any(("above the safe" in n) or ("above the 0.95 published vLLM deployments use" in n) for n in over.notes)
    # past the model's own margin too: the risk that says so comes with it
    assert engine == "sglang" or any("left free" in x or "short" in x for x in over.reasons)


def test_a_context_longer_than_the_pool_in_each_engines_words():
    """vLLM refuses to start; SGLang starts and caps every request at the pool (managers/tp_worker.py:
    max_req_len = min(context_len - 1, pool - 1))."""
    vllm = report("8xh200", Layout(tp=8), max_model_len=1_000_000)
    assert any("(the engine refuses to start)" in x for x in vllm.reasons)
    sglang = report("8xh200", Layout(tp=8), "sglang", max_model_len=1_000_000)
    (line,) = [x for x in sglang.reasons if "--context-length 1,000,000" in x]
    assert not sglang.fits and "SGLang starts but caps every request at" in line and "refuses" not in line
    assert f"{sglang.kv_capacity_tokens - 1:,} tokens" in line


def test_ways_out_come_from_rerunning_the_model():
    r = report("8xh200", Layout(tp=8), max_model_len=1_000_000)
    assert not r.fits and any("fewer than --max-model-len" in x for x in r.reasons)
    assert any(w.startswith("fp8 KV cache") for w in r.ways_out)
    assert any(w.startswith("decode context parallel") for w in r.ways_out)
    for w in r.ways_out:
        assert "fits" in w


def test_vllm_counts_whole_blocks_and_sglang_whole_pages():
    v = report("8xh200", Layout(tp=8), block_size=64)
    s = report("8xh200", Layout(tp=8), engine="sglang", block_size=64)
    assert v.kv_capacity_tokens % 64 == 0 and s.kv_capacity_tokens % 64 == 0
    assert s.per_gpu[0].terms["req_to_token"] > 0 and "req_to_token" not in v.per_gpu[0].terms


# ---- reviewer findings -----------------------------------------------------------------------------------

def test_sglang_dp_attention_keeps_the_whole_embedding_and_splits_lm_head_over_tp_size():
    # SGLang 0.5.23 layers/vocab_parallel_embedding.get_embedding_tp_kwargs: under DP attention the input
    # embedding is vocab-split over the attention-TP group (tp=1 here: whole on every rank); lm_head
    # (models/deepseek_v2.py, use_attn_tp_group=enable_dp_lm_head, default off) over --tp-size = 16.
    whole = V3.vocab_size * V3.hidden_size * 2
    terms = stage_weight_terms(V3, Layout(tp=1, dp=16, ep=16), range(61), True, True, "sglang")
    assert terms["weights/embedding"] == whole
    assert terms["weights/lm_head"] == whole / 16
    tp2 = stage_weight_terms(V3, Layout(tp=2, dp=8, ep=16), range(61), True, True, "sglang")
    assert tp2["weights/embedding"] == whole / 2


def test_engine_version_must_be_a_release_number():
    with pytest.raises(PlanError, match="--engine-version 'abc'"):
        engine_rules("vllm", "abc")
    with pytest.raises(PlanError, match="--engine-version"):
        engine_rules("sglang", "latest")
    assert engine_rules("vllm", "0.10.1.post1").context_outside_budget
    assert engine_rules("vllm", "1.0").graphs_in_budget  # a 1.x release is newer than 0.21, not older


def test_releases_outside_what_is_modelled_are_refused_or_named(cli):
    """vLLM before 0.8 (the V0 engine) and SGLang before 0.4 are refused; an SGLang before 0.5.3 needs its fraction
    given (its default came from older rules); a release newer than the planner's is priced as that one, said so."""
    for engine, version in (("vllm", "0.7.3"), ("sglang", "0.3.6")):
        with pytest.raises(PlanError, match=f"{engine} releases before"):
            engine_rules(engine, version)
    old = cli("memory", "-t", "8xh200", "-e", "sglang", "--engine-version", "0.4.6")
    assert old.exit_code == 2 and "--mem-fraction-static" in old.output and "Traceback" not in old.output
    assert cli("memory", "-t", "8xh200", "-e", "sglang", "--engine-version", "0.4.6",
               "--mem-fraction-static", "0.81").exit_code == 0
    new = cli("memory", "-t", "8xh200", "--engine-version", " 0.34.0 ")
    assert new.exit_code == 0 and "vllm 0.34.0 is newer than 0.33.0" in " ".join(new.output.split())
    assert cli("memory", "-t", "8xh200", "--engine-version", "").exit_code == 2


def test_block_size_no_backend_accepts_is_a_warning_naming_the_legal_sizes():
    r = report("8xh200", Layout(tp=8), block_size=17)
    assert r.fits  # a warning, not a verdict
    warning = [x for x in r.reasons if "block size 17" in x]
    assert warning and "FLASH_ATTN_MLA multiples of 16" in warning[0] and "FLASHMLA multiples of 64" in warning[0]
    assert not any("block size" in x for x in report("8xh200", Layout(tp=8), block_size=64).reasons)
    assert not any("block size" in x for x in report("8xh200", Layout(tp=8), "sglang", block_size=17).reasons)


def test_no_safe_fraction_when_the_weights_alone_do_not_fit():
    r = report("8xh100", Layout(tp=8))
    assert r.safe_fraction == 0.0
    assert r.no_safe_fraction.startswith("no fraction fits: the weights alone")
    assert not any("above the safe" in n for n in r.notes)
    # the planner still sizes knobs with the ceiling (and then finds no KV room)
    assert 0.9 < safe_memory_fraction(V3, load_topology("8xh100"), Layout(tp=8), r.knobs) < 1


def test_no_safe_fraction_when_what_the_engine_keeps_outside_its_budget_leaves_no_room():
    r = report("8xh200", Layout(tp=8), "sglang", max_num_seqs=10**6)  # a 600 GiB req_to_token table
    assert r.safe_fraction == 0.0 and r.no_safe_fraction.startswith("no fraction fits: on stage 0")
    assert "req_to_token" in r.no_safe_fraction
    assert not any("0.000" in x for x in r.reasons + r.notes)


def test_deepep_buffer_is_counted_for_dp_attention_with_ep():
    """DeepEP's low-latency buffer (csrc/config.hpp LowLatencyLayout): 4 x experts x tokens x (2d + d/32)."""
    from mla_planner.specs.layout import Layout
    from mla_planner.memory.report import memory_report
    spec, topo = load_model("deepseek-v3").spec, load_topology("2x8xh200-ib")
    knobs = Knobs(engine="vllm", block_size=64, max_model_len=4096, max_num_batched_tokens=1024, max_num_seqs=64,
                  memory_fraction=0.9)
    dp = memory_report(spec, topo, Layout(tp=1, dp=16, ep=16), knobs)
    assert dp.per_gpu[0].terms["deepep_buffer"] == 4 * 256 * 1024 * (2 * 7168 + 7168 // 32)   # 14.2 GiB
    bigger = memory_report(spec, topo, Layout(tp=1, dp=16, ep=16), replace(knobs, max_num_batched_tokens=2048))
    assert bigger.kv_capacity_tokens < dp.kv_capacity_tokens
    plain = memory_report(spec, topo, Layout(tp=8, pp=2), knobs)
    assert "deepep_buffer" not in plain.per_gpu[0].terms
    sglang = memory_report(spec, topo, Layout(tp=1, dp=16, ep=16), replace(knobs, engine="sglang"))
    assert sglang.per_gpu[0].terms["deepep_buffer"] == 4 * 256 * 128 * (2 * 7168 + 7168 // 32)  # its 128 default


def test_token_budget_is_per_dp_rank_for_both_engines():
    """SGLang's --chunked-prefill-size is the per-DP-rank knob x dp (launch/sglang.py), and the engine gives
    each DP rank the flag / dp (SGLang 0.5.23: 8192 -> 1024 at dp 8): the activation peak is priced at the knob."""
    from mla_planner.engines.memory_rules import activation_tokens
    knobs = Knobs(engine="sglang", max_num_batched_tokens=2048)
    assert activation_tokens(engine_rules("sglang"), knobs, Layout(tp=1, dp=8, ep=8)) == 2048
    h200 = load_topology("8xh200")
    assert engine_default_knobs("sglang", load_model("deepseek-v3").spec, h200, 8).max_num_batched_tokens == 1024


@pytest.mark.parametrize("topo_name, layout, ceiling", [("2x8xh100-ib", Layout(tp=16), 0.874),
                                                        ("8xh200", Layout(tp=8), 0.929)])
def test_sglang_safe_fraction_keeps_sglangs_own_10_gib_reserve(topo_name, layout, ceiling):
    """SGLang never reserves under 10 GiB outside its static pool on a GPU over 60 GiB (its computed
    default); the planner's safe fraction keeps to that (decode graphs have taken 5-6 GB, sglang#16143),
    while vLLM's is the memory model's alone."""
    topo = load_topology(topo_name)
    k = engine_default_knobs("sglang", V3, topo, kv_cache_dtype="fp8", max_num_seqs=256,
                             max_num_batched_tokens=2048, max_model_len=2560)
    assert safe_memory_fraction(V3, topo, layout, k) == ceiling
    v = engine_default_knobs("vllm", V3, topo, kv_cache_dtype="fp8", max_num_seqs=256,
                             max_num_batched_tokens=2048, max_model_len=2560)
    assert safe_memory_fraction(V3, topo, layout, v) > ceiling


def test_fp8_marlin_group_scales_on_gpus_without_fp8():
    """vLLM runs a block-FP8 checkpoint on Ampere through FP8 Marlin, whose per-row group scales add about
    1/64 of the FP8 bytes; on Hopper (native FP8) nothing is added."""
    from mla_planner.memory.weights import marlin_scale_bytes
    from mla_planner.specs.weights import bytes_of, inventory
    fp8 = sum(bytes_of(t) for t in inventory(V3) if t.dtype == "fp8")
    extra = sum(marlin_scale_bytes(t, (128, 128)) for t in inventory(V3))
    assert extra / fp8 == pytest.approx(1 / 64, rel=0.03)
    a100 = report("4x8xa100-ib", Layout(tp=16))
    h100 = report("2x8xh100-ib", Layout(tp=16))
    # a 16th of the model's, a little more: the replicated q/kv down-projections are whole on every rank
    assert extra / 16 < a100.per_gpu[0].terms["weights/fp8_marlin_scales"] < 1.05 * extra / 16
    assert "weights/fp8_marlin_scales" not in h100.per_gpu[0].terms


def test_the_planner_never_proposes_more_than_published_vllm_deployments_use(cli):
    """The memory model alone would allow ~0.98 on an MI355X; published vLLM deployments use at most 0.95, and the
    plan says why it stops there."""
    import json
    plan = json.loads(cli("plan", "-m", "deepseek-r1", "-t", "8xmi355x", "-e", "vllm", "--json").stdout)
    best = plan["candidates"][0]
    assert best["knobs"]["memory_fraction"] == 0.95
    assert any(r.startswith("memory_fraction: 0.95: the highest --gpu-memory-utilization published") for r in best["reasons"])


def test_the_published_ceiling_gives_way_where_the_workload_needs_more(cli):
    """At 0.95 Kimi-K2 with bf16 KV on 8 x H200 holds no 128k request; the memory model's own limit does: the plan
    goes above 0.95 there and says why (it once rejected the layout without a word about the ceiling)."""
    import json
    plan = json.loads(cli("plan", "-m", "kimi-k2", "-t", "8xh200", "-e", "vllm", "--kv-cache-dtype", "bf16",
                          "--input-len", "120000", "--output-len", "8000", "-l", "tp=8", "--json").stdout)
    best = plan["candidates"][0]
    assert best["knobs"]["memory_fraction"] > 0.95 and best["memory"]["kv_capacity_tokens"] >= 128000
    assert any(r.startswith(f"memory_fraction: {best['knobs']['memory_fraction']}: above the 0.95 published")
               for r in best["reasons"])


@pytest.mark.parametrize("version, fraction", [("0.8.5", 0.9), ("0.19.1", 0.9), ("0.20.0", 0.92), (None, 0.92)])
def test_vllms_default_fraction_by_release(cli, version, fraction):
    """vLLM's --gpu-memory-utilization default is 0.9 up to 0.19.1 and 0.92 from 0.20.0 (vllm/config/cache.py in
    each wheel, read with `pip download`): `memory --engine-version` prices the release's own default."""
    args = ["memory", "-m", "deepseek-v3", "-t", "8xh200", "--json"] + (["--engine-version", version] if version else [])
    assert json.loads(cli(*args).stdout)["knobs"]["memory_fraction"] == fraction
