"""The attention seam (mla_planner/specs/attention): a new attention kind is one module. The toy kind below,
a multi-query attention with one shared K/V head replicated on every TP rank (Shazeer, arXiv:1911.02150),
is defined here and registered, and the memory model, the step model, the knobs and `verify` price a
model that declares it by its answers alone."""

import pytest

from mla_planner.core.errors import PlanError
from mla_planner.engines.backends import startup_problems
from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.memory.accounting import evaluate, kv_slot_bytes
from mla_planner.perf.step import decode_step
from mla_planner.specs.attention import cost
from mla_planner.specs.attention.base import AttentionKind, CoreCost, KVGroup, element_bytes
from mla_planner.specs.attention.kinds import KINDS
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
    return ModelSpec(**{**llama.model_dump(), "name": "toy-70b", "attention": "toy-mqa", "num_key_value_heads": 1})


def test_an_unregistered_kind_is_refused():
    llama = load_model("llama-3.1-70b").spec
    with pytest.raises(ValueError, match="Input should be 'mla' or 'gqa'"):
        ModelSpec(**{**llama.model_dump(), "attention": "toy-mqa"})


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
