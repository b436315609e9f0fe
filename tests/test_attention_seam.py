"""The attention seam (mla_planner/specs/attention): a new attention kind is one module. Two toy kinds are
defined here and registered, and the memory model, the step model, the knobs, the search and `verify`
price a model that declares one by its answers alone:
- a multi-query attention with one shared K/V head replicated on every TP rank (Shazeer, arXiv:1911.02150);
- an MLA with a second cache group per layer (a 132-byte index key per token, as a sparse-attention
  indexer keeps), which must be priced as MLA everywhere but for that group."""

import pytest

from mla_planner.core.errors import PlanError
from mla_planner.engines.backends import startup_problems
from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.memory.accounting import evaluate, kv_slot_bytes
from mla_planner.perf.step import decode_step
from mla_planner.specs.attention import cost
from mla_planner.specs.attention.base import AttentionKind, CoreCost, KVGroup, Projection, element_bytes
from mla_planner.specs.attention.kinds import KINDS
from mla_planner.specs.attention.mla import MLA
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout, layout_problems
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.sizing import kv_table
from mla_planner.specs.topology import load_topology


class ToyMQA(AttentionKind):
    """One K/V head of head_dim per layer, bf16 only, whole on every rank; decode reads every cached token."""
    name = "toy-mqa"

    def check(self, spec) -> str:
        return "" if spec.hidden_size % spec.num_attention_heads == 0 else "heads must divide hidden_size"

    def projections(self, spec):
        d, H, hd = spec.hidden_size, spec.num_attention_heads, spec.gqa_head_dim
        return [Projection("attn.q_proj", (H * hd, d), "column"), Projection("attn.kv_proj", (2 * hd, d), "replicated"),
                Projection("attn.o_proj", (d, H * hd), "row")]

    def kv_formats(self, spec):
        return ("bf16",)

    def kv_groups(self, spec, kv_dtype, layout=None):
        return (KVGroup("shared_kv", 2 * spec.gqa_head_dim * element_bytes(kv_dtype)),)

    def layout_problems(self, spec, layout):
        return ["toy-mqa has no latent to shard"] if layout.kv_layout == "latent-sharded" else []

    def decode_core(self, spec, layout, kv_dtype, requests, context, q_len):
        heads, hd = spec.num_attention_heads // layout.tp, spec.gqa_head_dim
        return CoreCost(requests * context * self.bytes_per_token_layer(spec, kv_dtype),
                        cost.naive_core_flops(heads, requests * context, hd, hd, q_len))

    def prefill_core(self, spec, layout, kv_dtype, chunk, prefix):
        heads, hd = spec.num_attention_heads // layout.tp, spec.gqa_head_dim
        return CoreCost((prefix + chunk) * self.bytes_per_token_layer(spec, kv_dtype),
                        cost.naive_core_flops(heads, chunk * prefix + chunk * (chunk + 1) / 2, hd, hd))


@pytest.fixture
def toy(monkeypatch) -> ModelSpec:
    monkeypatch.setitem(KINDS, "toy-mqa", ToyMQA())
    llama = load_model("llama-3.1-70b").spec
    return ModelSpec(**{**llama.to_dict(), "name": "toy-70b", "attention": "toy-mqa", "num_key_value_heads": 1})


def test_an_unregistered_kind_is_refused():
    llama = load_model("llama-3.1-70b").spec
    with pytest.raises(ValueError, match="Input should be 'mla', 'mla-dsa', 'csa-hca' or 'gqa'"):
        ModelSpec(**{**llama.to_dict(), "attention": "toy-mqa"})


def test_memory_prices_the_toy_cache_by_its_groups(toy):
    """2 x 128 x 2 B = 512 B per token per layer, whole on each of 8 TP ranks (a GQA cache would split)."""
    layout = Layout(tp=8)
    assert kv_slot_bytes(toy, layout, 80, "bf16") == 80 * 512
    topo = load_topology("8xh100")
    knobs = engine_default_knobs("vllm", toy, topo)
    report = evaluate(toy, topo, layout, knobs)
    assert report.per_gpu[0].kv_bytes_per_token == 80 * 512
    assert report.kv_capacity_tokens == pytest.approx(report.per_gpu[0].kv_pool_bytes / (80 * 512), rel=0.01)


def test_the_step_model_reads_what_the_toy_decode_reads(toy):
    topo, layout = load_topology("8xh100"), Layout(tp=8)
    knobs = engine_default_knobs("vllm", toy, topo)
    step = decode_step(toy, topo, layout, knobs, 16, 4096, load_calibration(None, topo))
    layer = step.layers["dense"]
    assert layer.bytes["attn.core"] == 16 * 4096 * 512
    assert layer.flops["attn.core"] == cost.naive_core_flops(64 // 8, 16 * 4096, 128, 128)


def test_knobs_and_layouts_follow_the_toys_answers(toy):
    assert list(kv_table(toy)) == ["bf16"]
    knobs = engine_default_knobs("vllm", toy, load_topology("8xh100"))
    refused, _ = startup_problems("vllm", toy, load_topology("8xh100").gpu, knobs.__class__(
        **{**knobs.__dict__, "kv_cache_dtype": "fp8_ds_mla"}))
    assert any("fp8_ds_mla" in r for r in refused)
    assert "toy-mqa has no latent to shard" in layout_problems(Layout(tp=8, kv_layout="latent-sharded"), toy, 8, 8)


def test_verify_refuses_a_kind_it_has_no_kernel_for_in_one_line(toy):
    from mla_planner.verify.target import Chosen, make_target
    topo = load_topology("8xh100")
    knobs = engine_default_knobs("vllm", toy, topo)
    with pytest.raises(PlanError, match="verify checks MLA models; toy-70b uses toy-mqa attention"):
        make_target(Chosen(toy, topo, Layout(tp=8), knobs, None, None, "test"))


class ToyIndexedMLA(MLA):
    """MLA plus an index key of 132 B per token per layer (128 fp8 values and an fp32 scale), whole on every
    rank; everything else is MLA's."""
    name = "toy-mla-indexed"
    verify_kernel = False

    def kv_groups(self, spec, kv_dtype, layout=None):
        return super().kv_groups(spec, kv_dtype, layout) + (KVGroup("index_keys", 132),)


@pytest.fixture
def indexed(monkeypatch) -> ModelSpec:
    monkeypatch.setitem(KINDS, "toy-mla-indexed", ToyIndexedMLA())
    v3 = load_model("deepseek-v3").spec
    return ModelSpec(**{**v3.to_dict(), "name": "toy-v3-indexed", "attention": "toy-mla-indexed"})


def test_an_mla_subclass_is_priced_as_mla_but_for_its_extra_group(indexed):
    from mla_planner.memory.weights import stage_weight_terms
    from mla_planner.search.layouts import candidate_layouts
    v3, topo = load_model("deepseek-v3").spec, load_topology("2x8xh100-ib")
    layout = Layout(tp=16, dcp=2)
    assert kv_slot_bytes(indexed, layout, 61, "fp8") == kv_slot_bytes(v3, layout, 61, "fp8") + 61 * 132
    assert stage_weight_terms(indexed, layout, range(61), True, True) == stage_weight_terms(v3, layout, range(61),
                                                                                            True, True)
    knobs = engine_default_knobs("vllm", v3, topo)
    calib = load_calibration(None, topo)
    mine, theirs = (decode_step(s, topo, layout, knobs, 32, 4096, calib).layers["moe"] for s in (indexed, v3))
    assert mine.bytes["attn.proj"] == theirs.bytes["attn.proj"] and mine.flops["attn.proj"] == theirs.flops["attn.proj"]
    assert "attn.dcp_combine" in mine.terms_s and mine.terms_s["attn.dcp_combine"] == theirs.terms_s["attn.dcp_combine"]
    assert [lay.label for lay in candidate_layouts(indexed, topo)[0]] == [lay.label for lay in candidate_layouts(v3, topo)[0]]
    with pytest.raises(PlanError, match="verify checks MLA models; toy-v3-indexed uses toy-mla-indexed attention"):
        from mla_planner.verify.target import Chosen, make_target
        make_target(Chosen(indexed, topo, layout, knobs, None, None, "test"))
