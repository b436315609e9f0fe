"""Mistral Large 3 from its params.json (Mistral's own format; its Hugging Face repository ships no
config.json): the keys renamed as vLLM 0.33.0 and SGLang 0.5.23 rename them into a DeepSeek-V3 config
(specs/mistral.py), its FP8 blocks from the compressed-tensors quantization_config, the Pixtral vision
encoder counted when params.json has one, and the commands that tell each engine the format. The fixture is
the published params.json, its vision_encoder block included (tests/fixtures/hf/README.md)."""

import json
from pathlib import Path

import pytest
from mla_planner.engines.parser.check import check_command

from mla_planner.core.errors import InputError
from mla_planner.launch.build import build, launch_inputs
from mla_planner.search.planfile_read import read_plan
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.mistral import pixtral
from mla_planner.specs.sizing import kv_bytes_per_token, param_breakdown
from mla_planner.specs.weights import inventory

ML3 = Path("tests/fixtures/mistral/Mistral-Large-3")


def test_params_json_is_read_as_the_engines_read_it():
    loaded = load_model(str(ML3))
    spec = loaded.spec
    assert loaded.source == "params.json" and spec.name == "Mistral-Large-3" and spec.config_format == "mistral"
    assert (spec.attention, spec.model_type, spec.hidden_size, spec.num_hidden_layers) == ("mla", "deepseek_v3", 7168, 61)
    assert (spec.n_routed_experts, spec.num_experts_per_tok, spec.n_shared_experts, spec.first_k_dense_replace,
            spec.moe_intermediate_size, spec.intermediate_size) == (128, 4, 1, 3, 4096, 16384)
    assert spec.max_position_embeddings == 294_912 and spec.num_nextn_predict_layers == 0
    assert kv_bytes_per_token(spec, "bf16") == 61 * 576 * 2     # plain MLA, as DeepSeek-V3


def test_its_fp8_blocks_leave_the_ignored_projections_bf16():
    spec = load_model(str(ML3)).spec
    d = {t.name: t.dtype for t in inventory(spec)}
    assert (d["attn.wq_a"], d["attn.wkv_a"], d["attn.wq_b"], d["routed_experts.w1"]) == ("bf16", "bf16", "fp8", "fp8")
    assert param_breakdown(spec)["total"] == pytest.approx(673.4e9, rel=1e-3)   # 675B with the vision encoder:
    assert spec.vision_params + param_breakdown(spec)["total"] == pytest.approx(675e9, rel=2e-3)   # the published
    # params.json's Pixtral encoder (48 layers of 1,664, image 1,540 px) is 2.57B


def test_the_pixtral_encoder_is_counted_as_vllm_builds_it(tmp_path):
    """D 16, L 2, I 32, P 4, 3 channels, merge 2, T 8: conv 3x4x4x16 = 768, ln_pre 16, blocks 2 x (32 + 1,024 +
    1,536) = 5,184, pre-projector norm 16, patch merger 64 x 16 = 1,024, adapter 16 x 8 + 8 + 8 x 8 + 8 = 208."""
    small = {"hidden_size": 16, "num_hidden_layers": 2, "intermediate_size": 32, "patch_size": 4, "num_channels": 3,
             "spatial_merge_size": 2, "mm_projector_id": "patch_merge", "add_pre_mm_projector_layer_norm": True,
             "adapter_bias": True}
    assert pixtral(small, 8).params == 768 + 16 + 5_184 + 16 + 1_024 + 208
    params = json.loads((ML3 / "params.json").read_text()) | {"vision_encoder": small | {"image_size": 64}}
    (tmp_path / "params.json").write_text(json.dumps(params))
    assert load_model(str(tmp_path)).spec.vision_params == pixtral(small, 7168).params


def test_a_params_json_of_another_model_is_refused(tmp_path):
    params = json.loads((ML3 / "params.json").read_text())
    params["moe"]["num_shared_experts"] = 0          # the engines make this Mixtral
    (tmp_path / "params.json").write_text(json.dumps(params))
    with pytest.raises(InputError, match="not Mistral Large 3"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("engine, flags", [
    ("vllm", ["--tokenizer-mode", "mistral", "--config-format", "mistral", "--load-format", "mistral"]),
    ("sglang", ["--model-config-parser", "mistral", "--load-format", "mistral"])])
def test_its_commands_name_the_format_and_pass_the_engines_parsers(cli, tmp_path, engine, flags):
    (tmp_path / "plan.json").write_text(cli("plan", "-m", str(ML3), "-t", "8xh200", "-e", engine, "--json").stdout)
    plan = read_plan(tmp_path / "plan.json")
    for c in build(launch_inputs(plan, plan.candidates[0], "native"), engine):
        if c.runs_engine:
            words = " ".join(c.engine_args)
            assert " ".join(flags[:2]) in words and " ".join(flags[-2:]) in words
            assert check_command(c.engine_args, engine, "sm90", model_max_len=plan.spec.max_position_embeddings) == []


@pytest.mark.parametrize("path, extra, refused", [
    ("/models/ml3", [], True),                                          # SGLang's auto parser misses it
    ("/models/ml3", ["--model-config-parser", "mistral"], False),
    ("mistralai/Mistral-Large-3-675B-Instruct-2512", [], False)])     # the name SGLang recognises
def test_lint_says_when_sglang_would_not_read_params_json(cli, path, extra, refused):
    # a context the KV pool holds (with the published params.json's Pixtral encoder SGLang lowers its default
    # fraction, and the pool no longer holds one request of the model's full 294,912 tokens: lint_memory says so)
    r = cli("lint", "-m", str(ML3), "-t", "8xh200", "--json", "--", "python", "-m", "sglang.launch_server",
            "--model-path", path, "--tp", "8", "--context-length", "65536", *extra)
    flags = {f["flag"] for f in json.loads(r.stdout)["findings"]}
    assert ("--model-config-parser" in flags) == refused and r.exit_code == (1 if refused else 0)
