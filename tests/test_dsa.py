"""DeepSeek Sparse Attention (DeepSeek-V3.2's DeepseekV32ForCausalLM): read from its published config.json,
sized through the attention seam (specs/attention/dsa.py), refused where it contradicts its declared
architecture, and refused by the commands that would price it until its engine side is modelled."""

import json
from pathlib import Path

import pytest

from mla_planner.specs.attention import cost
from mla_planner.specs.attention.dsa import DSA
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.catalogue import load_model, spec_from_hf_config
from mla_planner.specs.layout import Layout
from mla_planner.specs.sizing import kv_bytes_per_token, param_breakdown

V32 = "tests/fixtures/hf/DeepSeek-V3.2/config.json"   # deepseek-ai/DeepSeek-V3.2 config.json as published
V32_PATH = Path(V32)


def test_v32_is_read_as_mla_with_a_dsa_indexer():
    spec = spec_from_hf_config(V32_PATH)
    assert (spec.attention, spec.index_n_heads, spec.index_head_dim, spec.index_topk) == ("mla-dsa", 64, 128, 2048)
    assert attention_of(spec).latent and attention_of(spec).not_modelled_in == ()


def test_kv_bytes_per_token_are_the_engines_own():
    """vLLM 0.33.0 groups a layer's latent and index-key caches into one page; the index key is 128 fp8 values +
    one fp32 scale (132 B). Its planner (`vllm/v1/core/kv_cache_utils.py` get_kv_cache_configs over the specs the
    model builds) gives 3,076,352 B per 64-token block with FLASHMLA_SPARSE's fp8 (the 656-byte fp8_ds_mla row)
    and 5,012,736 B in bf16 = 64 x 61 x (656 + 132) and 64 x 61 x (1152 + 132). Plain fp8 (FlashInfer's sparse
    backend on Blackwell, SGLang's trtllm) keeps 576 B latents: 61 x (576 + 132) (docs/dsa-engines.md)."""
    spec = spec_from_hf_config(V32_PATH)
    assert kv_bytes_per_token(spec, "fp8_ds_mla") * 64 == 3_076_352
    assert kv_bytes_per_token(spec, "bf16") * 64 == 5_012_736
    assert kv_bytes_per_token(spec, "fp8") == 61 * (576 + 132) == 43_188


def test_the_indexer_weights_add_to_v3s():
    """Per layer the indexer holds wq_b (64 x 128 by q_lora_rank 1536), wk (128 by hidden 7168), the key
    LayerNorm (weight and bias, 2 x 128) and weights_proj (64 by 7168), replicated on every rank (vLLM
    deepseek_v2.py Indexer): 13,959,424 parameters, x 61 layers on top of DeepSeek-V3's."""
    v3, v32 = load_model("deepseek-v3").spec, spec_from_hf_config(V32_PATH)
    per_layer = 64 * 128 * 1536 + 128 * 7168 + 2 * 128 + 64 * 7168
    assert per_layer == 13_959_424
    assert param_breakdown(v32)["total"] - param_breakdown(v3)["total"] == 61 * per_layer


def test_decode_reads_the_top_k_latents_and_scans_every_index_key():
    """Below top-k tokens it is dense MLA plus the scan; above, the MLA part stays at top-k while the scan
    grows with the context (2 x 64 heads x 128 FLOPs and 132 B per cached token)."""
    v32, v3 = spec_from_hf_config(V32_PATH), load_model("deepseek-v3").spec
    dsa, mla, layout = attention_of(v32), attention_of(v3), Layout(tp=8)
    for context in (1024, 131_072):
        mine = dsa.decode_core(v32, layout, "fp8", 4, context, 1)
        dense = mla.decode_core(v3, layout, "fp8", 4, min(context, 2048), 1)
        assert mine.bytes == dense.bytes + 4 * context * 132
        assert mine.flops == dense.flops + 2.0 * 64 * 128 * 4 * context
    assert dense.flops == cost.absorbed_core_flops(16, 4 * 2048)


@pytest.mark.parametrize("edit, field", [
    ({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"}, "index_n_heads"),
    ({"architectures": ["DeepseekV3ForCausalLM"]}, "model_type")])
def test_a_relabelled_v32_is_refused_naming_the_field(cli, tmp_path, edit, field):
    cfg = json.load(open(V32)) | edit
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = cli("show", str(tmp_path))
    assert r.exit_code == 2 and field in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_command_a_kind_is_not_modelled_in_refuses_it_in_one_line(cli, monkeypatch):
    """The seam's per-command refusal (specs/attention/kinds.py planning_problem), as a new kind starts out."""
    monkeypatch.setattr(DSA, "not_modelled_in", ("plan",))
    monkeypatch.setattr(DSA, "not_planned", "its decode step is not priced yet")
    r = cli("plan", "-m", V32, "-t", "8xh200")
    assert r.exit_code == 2 and "mla-dsa" in r.stderr and "not priced yet" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert cli("memory", "-m", V32, "-t", "8xh200").exit_code == 0


def test_show_gives_its_weights_and_kv(cli):
    data = json.loads(cli("show", V32, "--json").stdout)
    kv = {fmt: row["bytes_per_token"] for fmt, row in data["kv_cache"].items()}
    assert (kv["bf16"], kv["fp8"], kv["fp8_ds_mla"]) == (78_324, 43_188, 48_068)
