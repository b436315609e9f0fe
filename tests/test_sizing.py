"""Parameter, weight and KV figures that follow exactly from the public configs (HF config.json files;
DeepSeek-V3 README_WEIGHTS.md)."""

import pytest

from mla_planner.specs import sizing
from mla_planner.specs.catalogue import load_model


def spec(name):
    return load_model(name).spec


@pytest.mark.parametrize("name, total", [
    ("deepseek-v2-lite", 15_706_484_224),     # exact match to DeepSeek-V2-Lite-Chat's state dict (third-party dump)
    ("deepseek-v3", 671_026_419_200),         # MTP module counted separately
    ("deepseek-r1", 671_026_419_200),
    ("deepseek-v2", 235_741_434_880),
    ("kimi-k2", 1_026_408_232_448),
    ("llama-3.1-70b", 70_553_706_496),        # the published 70.6B
])
def test_total_parameters(name, total):
    assert sizing.param_breakdown(spec(name))["total"] == total


@pytest.mark.parametrize("name, active, without_embedding", [
    ("deepseek-v3", 37_552_297_472, 36_625_618_432),   # README_WEIGHTS: "36.7B activated"
    ("deepseek-v2-lite", 2_661_150_208, 2_451_435_008),  # published 2.4B
    ("kimi-k2", 32_861_500_928, 31_687_095_808),        # published 32B
])
def test_activated_parameters_with_and_without_embedding(name, active, without_embedding):
    act = sizing.activated_param_breakdown(spec(name))
    assert act["total"] == active
    assert act["total_without_embedding"] == without_embedding


def test_mtp_module_is_counted_apart():
    s = spec("deepseek-v3")
    assert sizing.mtp_params(s) == 11_610_068_224          # 11.61 B unique (DeepSeek-V3 README_WEIGHTS.md: 11.5B)
    assert sizing.mtp_params(spec("kimi-k2")) == 0


@pytest.mark.parametrize("name", ["deepseek-v3", "kimi-k2", "deepseek-v2-lite", "llama-3.1-70b"])
def test_breakdowns_sum_to_total(name):
    s = spec(name)
    for table in (sizing.param_breakdown(s), sizing.activated_param_breakdown(s), sizing.weight_bytes_breakdown(s)):
        parts = {k: v for k, v in table.items() if k not in ("total", "total_without_embedding")}
        assert sum(parts.values()) == pytest.approx(table["total"])


@pytest.mark.parametrize("name, bf16, fp8, ds_mla", [
    ("deepseek-v3", 70_272, 35_136, 40_016),
    ("deepseek-r1", 70_272, 35_136, 40_016),
    ("kimi-k2", 70_272, 35_136, 40_016),
    ("deepseek-v2-lite", 31_104, 15_552, 17_712),
])
def test_kv_bytes_per_token(name, bf16, fp8, ds_mla):
    s = spec(name)
    assert sizing.kv_bytes_per_token_layer(s, "bf16") == 1152
    assert sizing.kv_bytes_per_token(s, "bf16") == bf16
    assert sizing.kv_bytes_per_token(s, "fp8") == fp8
    assert sizing.kv_bytes_per_token(s, "fp8_ds_mla") == ds_mla


def test_naive_per_head_layout_shows_the_mla_saving():
    s = spec("deepseek-v3")
    naive = sizing.naive_kv_bytes_per_token(s)
    assert naive == 4_997_120                               # 61 x 128 x (192 + 128) x 2 (DeepSeek-V2 paper section 2.1)
    assert naive / sizing.kv_bytes_per_token(s) == pytest.approx(71.1, abs=0.05)


def test_gqa_kv_is_per_kv_head():
    s = spec("llama-3.1-70b")
    assert sizing.kv_bytes_per_token(s, "bf16") == 80 * 2 * 8 * 128 * 2   # 327,680 B


def test_fp8_weights_count_block_scales():
    s = spec("deepseek-v3")
    w = sizing.weight_bytes_breakdown(s)
    routed = sizing.param_breakdown(s)["routed_experts"]
    # each [2048, 7168] expert matrix: 16 x 56 blocks of fp32 scales on top of 1 byte per weight
    assert w["routed_experts"] == routed + 58 * 256 * 3 * 16 * 56 * 4
    # embedding and head stay bf16 in the FP8 checkpoint
    assert w["embedding"] == 2 * sizing.param_breakdown(s)["embedding"]


def test_hf_config_loads_to_the_builtin_spec():
    from_config = load_model("tests/fixtures/hf/DeepSeek-V3/config.json").spec
    builtin = spec("deepseek-v3")
    ignore = {"name", "hf_id"}
    def fields(s):
        return {k: v for k, v in s.to_dict().items() if k not in ignore}
    assert fields(from_config) == fields(builtin)
    lite = load_model("tests/fixtures/hf/DeepSeek-V2-Lite").spec        # a snapshot folder works too
    assert lite.q_lora_rank is None
    assert fields(lite) == fields(spec("deepseek-v2-lite"))


def test_weight_bytes_by_format():
    s = spec("deepseek-v3")
    formats = sizing.weight_bytes_by_format(s)
    assert formats["fp8 block-scaled"] == sizing.weight_bytes_breakdown(s)["total"]   # the release itself
    params = sizing.param_breakdown(s)["total"]
    assert formats["bf16"] == pytest.approx(2 * params, rel=1e-6)
    assert formats["int4 experts, bf16 rest"] < formats["fp8 block-scaled"] < formats["bf16"]


def test_relative_snapshot_paths_become_absolute(tmp_path, monkeypatch):
    import os
    import shutil
    shutil.copytree("tests/fixtures/hf/DeepSeek-V2-Lite", tmp_path / "DeepSeek-V2-Lite")
    monkeypatch.chdir(tmp_path)
    loaded = load_model("DeepSeek-V2-Lite")
    assert os.path.isabs(loaded.model_path) and loaded.model_path.endswith("DeepSeek-V2-Lite")
