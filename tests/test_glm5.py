"""GLM-5 / 5.1 / 5.2 (GlmMoeDsaForCausalLM): DSA like DeepSeek-V3.2, with 78 layers, 64 heads of qk 192+64 /
v 256 and a 32-head indexer; GLM-5.2 keeps an indexer on 21 of the 78 layers only (IndexCache). The fixtures
are assembled from public sources (tests/fixtures/hf/README.md)."""

import json
from pathlib import Path

import pytest

from mla_planner.core.errors import InputError
from mla_planner.memory.accounting import kv_slot_bytes
from mla_planner.memory.weights import stage_weight_terms
from mla_planner.specs.attention.dsa import indexer_layers
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.catalogue import spec_from_hf_config
from mla_planner.specs.layout import Layout
from mla_planner.specs.sizing import activated_param_breakdown, kv_bytes_per_token, param_breakdown

GLM5 = Path("tests/fixtures/hf/GLM-5/config.json")
GLM52 = Path("tests/fixtures/hf/GLM-5.2-FP8/config.json")
# The layers vLLM 0.33.0 builds an indexer on with index_topk_freq 4, index_skip_topk_offset 3
# (models/deepseek_v32/attention.py: skip when max(l - offset + 1, 0) % freq != 0); SGLang's
# dsa_layer_skips_topk is the same rule.
GLM52_INDEXED = (0, 1, 2, *range(6, 78, 4))


def test_glm5_is_dsa_and_its_size_is_the_reported_one():
    """GLM-5 technical report: 744B total, 40B activated per token."""
    spec = spec_from_hf_config(GLM5)
    assert (spec.attention, spec.index_n_heads, spec.index_head_dim, spec.index_topk) == ("mla-dsa", 32, 128, 2048)
    assert indexer_layers(spec) is None
    assert param_breakdown(spec)["total"] == pytest.approx(744e9, rel=0.005)
    assert activated_param_breakdown(spec)["total_without_embedding"] == pytest.approx(40e9, rel=0.03)


def test_glm5_kv_bytes_per_token():
    """78 layers x (latent + 132 B of index key): the latent 1152 B in bf16, 576 B plain fp8 (vLLM's default
    on SM10x), 656 B fp8_ds_mla (vLLM 0.33.0 models/deepseek_v32 cache specs; docs/dsa-engines.md)."""
    spec = spec_from_hf_config(GLM5)
    assert kv_bytes_per_token(spec, "bf16") == 78 * (1152 + 132) == 100_152
    assert kv_bytes_per_token(spec, "fp8_ds_mla") == 78 * (656 + 132) == 61_464
    assert kv_bytes_per_token(spec, "fp8") == 78 * (576 + 132) == 55_224


def test_glm52_keeps_an_indexer_on_21_layers_and_caches_index_keys_there_only(tmp_path):
    spec = spec_from_hf_config(GLM52)
    assert indexer_layers(spec) == GLM52_INDEXED and len(GLM52_INDEXED) == 21
    assert kv_bytes_per_token(spec, "fp8") == 78 * 576 + 21 * 132 == 47_700
    # the same layers given as a per-layer pattern ("F" keeps one, "S" reuses the previous top-k)
    pattern = "".join("F" if i in GLM52_INDEXED else "S" for i in range(78))
    cfg = {**json.loads(GLM52.read_text()), "index_topk_pattern": pattern, "index_topk_freq": None}
    assert indexer_layers(_spec(cfg, tmp_path)) == GLM52_INDEXED


def test_a_pipeline_stage_holds_the_index_keys_of_its_own_layers():
    """Stage 0 (layers 0-38) has 12 of the 21 indexers, stage 1 (39-77) 9; the MTP layer always has one."""
    spec, layout = spec_from_hf_config(GLM52), Layout(tp=8, pp=2)
    first, second = kv_slot_bytes(spec, layout, range(0, 39), "fp8"), kv_slot_bytes(spec, layout, range(39, 78), "fp8")
    assert first == 39 * 576 + 12 * 132 and second == 39 * 576 + 9 * 132
    assert kv_slot_bytes(spec, layout, range(39, 78), "fp8", mtp_layers=1) == second + 576 + 132
    assert first + second == kv_bytes_per_token(spec, "fp8")


def test_glm52_has_no_indexer_weights_on_the_layers_that_reuse_the_top_k():
    """57 layers without an indexer: wq_b (32 x 128 by q_lora_rank 2048), wk (128 by 6144), the key LayerNorm
    (2 x 128) and weights_proj (32 by 6144) fewer each; per pipeline stage, the stage's own indexers."""
    glm5, glm52 = spec_from_hf_config(GLM5), spec_from_hf_config(GLM52)
    per_layer = 32 * 128 * 2048 + 128 * 6144 + 2 * 128 + 32 * 6144
    assert param_breakdown(glm5)["total"] - param_breakdown(glm52)["total"] == 57 * per_layer
    layout = Layout(tp=8, pp=2)
    halves = [stage_weight_terms(glm52, layout, r, r.start == 0, r.stop == 78)["weights/attention"]
              for r in (range(0, 39), range(39, 78))]
    mirrored = [stage_weight_terms(glm52, layout, r, r.start == 0, r.stop == 78)["weights/attention"]
                for r in (range(39, 78), range(0, 39))]
    assert halves[0] > halves[1] and halves == mirrored[::-1]


@pytest.mark.parametrize("edit, field", [
    ({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"}, "index_n_heads"),
    ({"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "deepseek_v3"}, "model_type"),
])
def test_a_relabelled_glm5_config_is_refused_naming_the_field(edit, field, tmp_path):
    with pytest.raises(InputError, match=field):
        _spec({**json.loads(GLM5.read_text()), **edit}, tmp_path)


def test_a_pattern_of_other_letters_is_refused(tmp_path):
    with pytest.raises(InputError, match="index_topk_pattern"):
        _spec({**json.loads(GLM5.read_text()), "index_topk_pattern": "FFXS"}, tmp_path)


def test_the_latent_is_replicated_on_every_tp_rank():
    spec = spec_from_hf_config(GLM5)
    assert all(g.rank_share == 1.0 for g in attention_of(spec).kv_groups(spec, "bf16", Layout(tp=8)))


def _spec(cfg: dict, folder: Path):
    (folder / "config.json").write_text(json.dumps(cfg))
    return spec_from_hf_config(folder / "config.json")


def test_a_pattern_that_skips_layer_0_is_refused(tmp_path):
    """Layer 0 has no earlier top-k to reuse (SGLang asserts as much of index_skip_topk_offset)."""
    with pytest.raises(InputError, match="layer 0"):
        _spec({**json.loads(GLM5.read_text()), "index_topk_pattern": "SF"}, tmp_path)
