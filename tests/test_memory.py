"""The per-GPU memory model: layers over pipeline stages, weights split by layout, the MLA KV cost per GPU
and verdicts. Engine accounting: test_memory_engines.py."""

import pytest
from memory_cases import GiB, V3, report

from mla_planner.memory.pp_split import stage_layers
from mla_planner.memory.weights import stage_weight_terms
from mla_planner.specs import sizing
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout


# ---- layers over pipeline stages -------------------------------------------------------------------

def test_stage_layers_follow_each_engine():
    # vLLM get_pp_indices: remainder to the stages before the last (61 layers at PP4 -> [15,15,16,15],
    # vllm-project/vllm PR #46217); SGLang: remainder to the last stages.
    assert stage_layers(61, 2) == [31, 30]
    assert stage_layers(61, 4) == [15, 15, 16, 15]
    assert stage_layers(61, 2, engine="sglang") == [30, 31]
    assert stage_layers(60, 4) == [15, 15, 15, 15]
    for pp in range(1, 9):
        assert sum(stage_layers(61, pp)) == 61 == sum(stage_layers(61, pp, "sglang"))


# ---- weights ---------------------------------------------------------------------------------------

def test_tp1_pp1_holds_the_whole_checkpoint():
    terms = stage_weight_terms(V3, Layout(tp=1), range(61), True, True)
    whole = sum(v for k, v in terms.items() if k != "weights/mla_absorb")
    assert whole == pytest.approx(sizing.weight_bytes_breakdown(V3)["total"], rel=1e-12)


def test_pipeline_stages_partition_the_weights():
    layout = Layout(tp=1, pp=2)
    first = stage_weight_terms(V3, layout, range(0, 31), True, False)
    last = stage_weight_terms(V3, layout, range(31, 61), False, True)
    both = sum(first.values()) + sum(last.values())
    whole = stage_weight_terms(V3, Layout(tp=1), range(61), True, True)
    assert both == pytest.approx(sum(whole.values()), rel=1e-12)
    assert "weights/embedding" in first and "weights/embedding" not in last
    assert "weights/lm_head" in last and "weights/lm_head" not in first
    assert "weights/dense_ffn" in first and "weights/dense_ffn" not in last  # first_k_dense_replace = 3


def test_tp_splits_matrices_but_not_replicated_ones():
    tp8 = stage_weight_terms(V3, Layout(tp=8), range(61), True, True)
    tp1 = stage_weight_terms(V3, Layout(tp=1), range(61), True, True)
    # routed experts: 2048/8 = 256 rows keep whole 128x128 scale blocks, so exactly 1/8
    assert tp8["weights/routed_experts"] == pytest.approx(tp1["weights/routed_experts"] / 8, rel=1e-12)
    assert tp8["weights/gate"] == tp1["weights/gate"]  # the router is replicated
    assert tp1["weights/attention"] / 8 < tp8["weights/attention"] < tp1["weights/attention"]  # wq_a, wkv_a whole


def test_dp_attention_keeps_full_attention_per_rank_and_splits_experts():
    dp8 = stage_weight_terms(V3, Layout(tp=1, dp=8, ep=8), range(61), True, True)
    tp1 = stage_weight_terms(V3, Layout(tp=1), range(61), True, True)
    assert dp8["weights/attention"] == tp1["weights/attention"]
    assert dp8["weights/routed_experts"] == pytest.approx(tp1["weights/routed_experts"] / 8, rel=1e-12)


def test_mtp_lives_on_the_last_stage():
    r = report("2x8xh100-ib", Layout(tp=8, pp=2), mtp=True, max_model_len=8192)
    assert "weights/mtp" not in r.per_gpu[0].terms
    assert r.per_gpu[1].terms["weights/mtp"] > 1 * GiB
    assert r.per_gpu[1].layers == 30 + 1  # the MTP layer's cache too


# ---- the MLA KV cost per GPU ---------------------------------------------------------------------------

def test_kv_per_token_is_not_divided_by_tp():
    r = report("8xh200", Layout(tp=8))
    assert r.per_gpu[0].kv_bytes_per_token == 61 * 576 * 2 == 70_272
    assert report("8xh200", Layout(tp=8), kv_cache_dtype="fp8").per_gpu[0].kv_bytes_per_token == 35_136
    assert report("8xh200", Layout(tp=8, kv_layout="latent-sharded")).per_gpu[0].kv_bytes_per_token == 70_272 / 8
    assert report("8xh200", Layout(tp=8, dcp=8)).per_gpu[0].kv_bytes_per_token == 70_272 / 8


def test_h100_node_does_not_fit_deepseek_v3_fp8():
    r = report("8xh100", Layout(tp=8))
    assert not r.fits and r.kv_capacity_tokens == 0
    assert any("weights" in reason for reason in r.reasons)
    assert r.ways_out and any("more nodes" in w or "pp=2" in w for w in r.ways_out)


def test_h200_node_fits_and_tp8_holds_one_replicas_worth():
    r = report("8xh200", Layout(tp=8))
    assert r.fits
    assert r.kv_tokens_per_replica == r.kv_capacity_tokens == r.per_gpu[0].kv_tokens  # not 8x
    assert "replicated on every TP rank" in r.kv_holding
    assert r.kv_capacity_tokens >= V3.max_position_embeddings
    assert r.max_model_len_fit == V3.max_position_embeddings


def test_dp_attention_multiplies_distinct_tokens():
    r = report("8xh200", Layout(tp=1, dp=8, ep=8))
    assert r.kv_tokens_per_replica == 8 * r.kv_capacity_tokens


def test_uneven_pipeline_names_the_binding_stage():
    r = report("2x8xh100-ib", Layout(tp=8, pp=2))
    assert [g.layers for g in r.per_gpu] == [31, 30]
    tokens = [g.kv_tokens for g in r.per_gpu]
    assert tokens[0] != tokens[1]
    assert r.binding_stage == tokens.index(min(tokens))
    assert r.kv_capacity_tokens == min(tokens)
    assert any(f"stage {r.binding_stage} binds" in n for n in r.notes)


def test_layouts_that_cannot_exist_say_why():
    bad = report("8xh200", Layout(tp=3))
    assert not bad.fits and any("not divisible by tp=3" in x for x in bad.reasons)
    assert any("needs 16 GPUs" in x for x in report("8xh200", Layout(tp=8, pp=2)).reasons)
    assert any("ep=3" in x for x in report("8xh200", Layout(tp=1, dp=3, ep=3)).reasons)


def test_fp8_scale_blocks_cannot_straddle_gpus():
    """V3's FP8 experts (intermediate 2,048, 128-wide scale blocks) split 32 ways give 64 columns a GPU: both
    engines refuse to load that (vLLM fp8_utils.validate_fp8_block_shape_moe); 16 ways (128) load, and a bf16
    model split 32 ways is not held to it."""
    from mla_planner.specs.layout import fp8_block_problems
    v3, v2 = load_model("deepseek-v3").spec, load_model("deepseek-v2").spec
    wide = fp8_block_problems(v3, Layout(tp=1, dp=32))
    assert len(wide) == 1 and "intermediate size of the routed experts (2,048) over 32 GPUs is 64 per GPU" in wide[0]
    assert len(fp8_block_problems(v3, Layout(tp=32))) == 3          # experts, dense MLP, shared experts
    assert not fp8_block_problems(v3, Layout(tp=16)) and not fp8_block_problems(v3, Layout(tp=1, dp=32, ep=32))
    assert not fp8_block_problems(v2, Layout(tp=1, dp=32))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("topo_name, layout", [
    ("8xh100", Layout(tp=8)), ("8xh200", Layout(tp=8)), ("2x8xh100-ib", Layout(tp=8, pp=2)),
    ("8xh200", Layout(tp=1, dp=8, ep=8)), ("8xh200", Layout(tp=8, dcp=4)), ("2x8xh200-ib", Layout(tp=4, pp=4)),
])
def test_terms_sum_to_the_gpu(engine, topo_name, layout):
    r = report(topo_name, layout, engine)
    for g in r.per_gpu:
        assert sum(g.terms.values()) == pytest.approx(g.total_bytes, rel=1e-12)
        assert g.weights_bytes == pytest.approx(sum(v for k, v in g.terms.items() if k.startswith("weights/")))
        assert g.kv_pool_bytes == g.terms["kv_pool"]
        assert g.kv_tokens * g.kv_bytes_per_token == pytest.approx(g.kv_pool_bytes)
        assert g.kv_tokens % (r.knobs.block_size * layout.dcp) == 0


def test_gqa_model_works_too():
    llama = load_model("llama-3.1-70b").spec
    r = report("8xh100", Layout(tp=8), spec=llama, max_model_len=8192)
    assert r.fits and r.per_gpu[0].kv_bytes_per_token == sizing.kv_bytes_per_token(llama) / 8
