"""Malformed fields in the 2026 formats (quantization_config variants, vision_config, Mistral's params.json) are
one InputError naming the field, never a traceback."""

import json
from pathlib import Path

import pytest

from mla_planner.core.errors import InputError
from mla_planner.specs.catalogue import load_model

V3 = json.loads(Path("tests/fixtures/hf/DeepSeek-V3/config.json").read_text())
K25 = json.loads(Path("tests/fixtures/hf/Kimi-K2.5/config.json").read_text())
ML3 = json.loads(Path("tests/fixtures/mistral/Mistral-Large-3/params.json").read_text())
CT = {"quant_method": "compressed-tensors"}


def _v3(quant):
    return {**V3, "quantization_config": quant}


def _k25(**vision):
    return {**K25, "vision_config": {**K25["vision_config"], **vision}}


@pytest.mark.parametrize("cfg, field", [
    (_v3({**CT, "config_groups": [1]}), "config_groups"),
    (_v3({**CT, "config_groups": {"g": {"weights": "int4"}}}), "config_groups"),
    (_v3({"quant_method": "fp8", "weight_block_size": 128}), "weight_block_size"),
    (_v3({**CT, "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "block"}}},
          "ignore": ["re:("]}), "ignore"),
    (_k25(merge_kernel_size=[2]), "merge_kernel_size"),
    (_k25(vt_hidden_size="wide"), "vt_hidden_size"),
])
def test_config_json(tmp_path, cfg, field):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=field):
        load_model(str(tmp_path))


@pytest.mark.parametrize("params, field", [
    ({**ML3, "vision_encoder": {"hidden_size": 16, "num_hidden_layers": 2, "intermediate_size": 32,
                                "patch_size": "14"}}, "patch_size"),
    ({k: v for k, v in ML3.items() if k != "qk_nope_head_dim"}, "qk_nope_head_dim"),
])
def test_params_json(tmp_path, params, field):
    (tmp_path / "params.json").write_text(json.dumps(params))
    with pytest.raises(InputError, match=field):
        load_model(str(tmp_path))
