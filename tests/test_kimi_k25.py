"""Kimi-K2.5 (KimiK25ForConditionalGeneration): a DeepSeek-V3-shaped MLA text model in `text_config`, its
routed experts int4 (compressed-tensors, the quantization_config inside text_config), beside a MoonViT-3D
vision encoder. The fixture is assembled from a public tensor inventory of the published checkpoint
(tests/fixtures/hf/README.md); the counts below reproduce that inventory and NVIDIA's published 32.86B active."""

import json
from pathlib import Path

import pytest
from mla_planner.engines.parser.check import check_command

from mla_planner.core.errors import InputError
from mla_planner.engines.multimodal import sglang_vlm_factor
from mla_planner.launch.build import build, launch_inputs
from mla_planner.search.planfile_read import read_plan
from mla_planner.specs.catalogue import load_model, spec_from_hf_config
from mla_planner.specs.sizing import (
    activated_param_breakdown,
    kv_bytes_per_token,
    param_breakdown,
)

K25 = Path("tests/fixtures/hf/Kimi-K2.5/config.json")


def test_the_text_model_is_read_from_text_config():
    spec = spec_from_hf_config(K25)
    assert (spec.attention, spec.model_type, spec.num_hidden_layers, spec.num_attention_heads) == ("mla", "kimi_k25", 61, 64)
    assert (spec.weight_dtype, spec.expert_dtype, spec.int4_group_size) == ("bf16", "int4", 32)
    assert spec.num_nextn_predict_layers == 0 and spec.max_position_embeddings == 262_144


def test_parameters_are_the_checkpoints_own():
    spec = spec_from_hf_config(K25)
    assert param_breakdown(spec)["total"] == 1_026_408_232_448
    assert activated_param_breakdown(spec)["total"] == 32_861_500_928
    # MoonViT-3D: patch embedding 678,528, position table 4,718,592, 27 blocks of 15,239,504, final LayerNorm
    # 2,304, patch-merger projector 54,277,888
    assert spec.vision_params == 678_528 + 4_718_592 + 27 * 15_239_504 + 2_304 + 54_277_888 == 471_143_920


def test_its_kv_cache_is_deepseek_v3s():
    assert kv_bytes_per_token(spec_from_hf_config(K25), "bf16") == 61 * 576 * 2 == 70_272


def test_a_text_model_of_another_kind_is_refused(tmp_path):
    cfg = json.loads(K25.read_text())
    cfg["text_config"]["model_type"] = "qwen3_moe"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="text_config.model_type"):
        load_model(str(tmp_path))


def test_sglang_holds_the_vision_encoder_and_lowers_its_fraction_vllm_leaves_it_off(cli):
    """SGLang 0.5.23 builds the tower whatever the serving mode and multiplies its computed fraction by 0.95 x
    (1 - 0.1 x (27 x 1152^2 / (24 x 1024^2) - 1)); vLLM is told --language-model-only and builds none."""
    spec = spec_from_hf_config(K25)
    assert sglang_vlm_factor(spec) == pytest.approx(0.95 * (1 - 0.1 * (27 * 1152 ** 2 / (24 * 1024 ** 2) - 1)))
    sg = json.loads(cli("memory", "-m", str(K25), "-t", "8xh200", "-e", "sglang", "--json").stdout)
    vl = json.loads(cli("memory", "-m", str(K25), "-t", "8xh200", "-e", "vllm", "--json").stdout)
    assert sg["per_gpu"][0]["terms"]["weights/vision"] == 471_143_920 * 2
    assert "weights/vision" not in vl["per_gpu"][0]["terms"]


def test_the_vllm_command_serves_it_text_only(cli, tmp_path):
    plan = cli("plan", "-m", str(K25), "-t", "8xh200", "-e", "vllm", "--json")
    assert plan.exit_code in (0, 1), plan.output
    (tmp_path / "plan.json").write_text(plan.stdout)
    r = cli("emit", "--plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    assert "--language-model-only" in (tmp_path / "out" / "node-0.sh").read_text()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_its_planned_commands_pass_the_engines_parsers(cli, tmp_path, engine):
    """The best candidate's per-node commands, held to the flag definitions extracted from the vLLM 0.33.0 and
    SGLang 0.5.23 wheels (mla_planner/data/engines)."""
    (tmp_path / "plan.json").write_text(cli("plan", "-m", str(K25), "-t", "8xh200", "-e", engine, "--json").stdout)
    plan = read_plan(tmp_path / "plan.json")
    for c in build(launch_inputs(plan, plan.candidates[0], "native"), engine):
        if c.runs_engine:
            assert check_command(c.engine_args, engine, "sm90", model_max_len=plan.spec.max_position_embeddings) == []


def test_lint_warns_when_vllm_would_build_the_vision_encoder(cli):
    base = ["lint", "-m", str(K25), "-t", "8xh200", "--json", "--", "vllm", "serve", "moonshotai/Kimi-K2.5", "-tp", "8"]
    flags = {f["flag"] for f in json.loads(cli(*base).stdout)["findings"]}
    assert "--language-model-only" in flags
    flags = {f["flag"] for f in json.loads(cli(*base, "--language-model-only").stdout)["findings"]}
    assert "--language-model-only" not in flags
