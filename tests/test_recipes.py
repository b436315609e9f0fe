"""The recipe flags (data/recipes.yaml) of each 2026 model, in the commands `emit` writes, held to the engines'
flag definitions (SGLang's parser choices are in its fixture; vLLM's tokenizer modes are noted in its own)."""

import json

import pytest

from mla_planner.launch.recipes import recipe_flags, recipe_key
from mla_planner.specs.catalogue import load_model

FIXTURES = {e: json.load(open(f"mla_planner/data/engines/{n}.json"))["flags"]
            for e, n in (("vllm", "vllm-0.33.0"), ("sglang", "sglang-0.5.23"))}
MODELS = {"deepseek_v32": "tests/fixtures/hf/DeepSeek-V3.2", "glm_moe_dsa": "tests/fixtures/hf/GLM-5.2-FP8",
          "kimi_k25": "tests/fixtures/hf/Kimi-K2.5", "mistral_large_3": "tests/fixtures/mistral/Mistral-Large-3"}


@pytest.mark.parametrize("key, path", MODELS.items())
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_each_recipe_flag_is_one_the_engine_takes(key, path, engine):
    spec = load_model(path).spec
    assert recipe_key(spec) == key
    flags = recipe_flags(spec, engine)
    assert flags, (key, engine)
    for flag, value in flags:
        defined = FIXTURES[engine].get(flag)
        assert defined is not None, (engine, flag)
        if defined.get("choices"):
            assert value in defined["choices"], (engine, flag, value)
        if "suggested values" in defined.get("note", ""):
            assert value in defined["note"], (engine, flag, value)


def test_the_built_in_models_keep_their_commands():
    """DeepSeek-V3/R1 and Kimi-K2 have no recipe entry: their commands are as before."""
    for name in ("deepseek-v3", "kimi-k2"):
        assert recipe_flags(load_model(name).spec, "vllm") == []
