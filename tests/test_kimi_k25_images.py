"""Kimi-K2.5 served with image inputs (`--images`; text-only without it): what each engine builds and holds for
the vision encoder, the flags that serve it, and the models it is refused for.

The image geometry is the published processor's (specs/vision.py): vLLM profiles the encoder with a 3000 x 3000
dummy image, 4,225 tokens (65 x 65 merged 28-px patches after scaling to 16,384 patches), one image per 8,192
tokens of budget; each output is 4,225 x 7,168 bf16 (60.6 MB), and MoonViT's RoPE table 512 x 512 x 36 complex64
(75.5 MB)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mla_planner.engines.parser.check import check_command
from mla_planner.launch.build import build, launch_inputs
from mla_planner.memory.accounting import evaluate
from mla_planner.search.planfile_read import read_plan
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology
from mla_planner.specs.vision import image_tokens, vit_rope_bytes, vllm_profile_images, vllm_profile_output_bytes

K25 = load_model("kimi-k2.5").spec
H200 = load_topology("8xh200")


def test_the_image_geometry_is_the_processors():
    assert image_tokens(14, 2, 3000, 3000) == 65 * 65 == 4225
    assert image_tokens(14, 2, 280, 280) == 100                # small images are not scaled up
    assert [vllm_profile_images(14, 2, b) for b in (2048, 8192, 16384)] == [1, 1, 3]
    assert vllm_profile_output_bytes(14, 2, 8192, 7168) == 4225 * 7168 * 2
    assert vit_rope_bytes(1152, 16) == 512 * 512 * 36 * 8


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_what_images_cost_each_engine(engine):
    """vLLM: the encoder (471M parameters, bf16) whole per GPU, the RoPE table and the profile's held outputs leave
    the KV budget; SGLang builds the encoder either way and sizes nothing more, so its pool does not move."""
    knobs = Knobs(engine=engine, memory_fraction=0.9, max_model_len=32768, max_num_batched_tokens=8192)
    text, images = (evaluate(K25, H200, Layout(tp=8), replace(knobs, images=i)) for i in (False, True))
    lost = text.per_gpu[0].kv_pool_bytes - images.per_gpu[0].kv_pool_bytes
    if engine == "sglang":
        assert lost == 0 and images.per_gpu[0].terms == text.per_gpu[0].terms
    else:
        terms = images.per_gpu[0].terms
        assert terms["weights/vision"] == K25.vision_params * 2
        assert terms["vision_rope_table"] == vit_rope_bytes(1152, 16)
        held = terms["activation_peak"] - text.per_gpu[0].terms["activation_peak"]
        assert held == vllm_profile_output_bytes(14, 2, 8192, K25.hidden_size)
        assert lost == pytest.approx(K25.vision_params * 2 + vit_rope_bytes(1152, 16) + held, rel=0.02)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_commands_serve_images_and_pass_the_engines_parsers(cli, tmp_path, engine):
    r = cli("plan", "-m", "kimi-k2.5", "-t", "8xh200", "-e", engine, "--images", "--json", "--top", "1")
    (tmp_path / "plan.json").write_text(r.stdout)
    plan = read_plan(tmp_path / "plan.json")
    cand = plan.candidates[0]
    assert cand.knobs.images and any(r.startswith("images: ") for r in cand.reasons)
    for c in build(launch_inputs(plan, cand, "native"), engine):
        if c.runs_engine:
            words = c.engine_args
            assert check_command(words, engine, "sm90", model_max_len=K25.max_position_embeddings) == []
            assert "--language-model-only" not in words
            if engine == "vllm":
                assert words[words.index("--mm-encoder-tp-mode") + 1] == "data"


def test_text_only_is_unchanged_and_says_so(cli, tmp_path):
    r = cli("plan", "-m", "kimi-k2.5", "-t", "8xh200", "-e", "vllm", "--json", "--top", "1")
    (tmp_path / "plan.json").write_text(r.stdout)
    plan = read_plan(tmp_path / "plan.json")
    words = [w for c in build(launch_inputs(plan, plan.candidates[0], "native"), "vllm") if c.runs_engine
             for w in c.engine_args]
    assert "--language-model-only" in words and "--mm-encoder-tp-mode" not in words
    assert not plan.candidates[0].knobs.images


@pytest.mark.parametrize("model, why", [("deepseek-v3", "has no vision encoder"),
                                        ("mistral-large-3", "only Kimi-K2.5's MoonViT encoder is")])
def test_images_are_refused_where_not_modelled(cli, model, why):
    for argv in (["memory", "-m", model, "-t", "8xh200", "--images"], ["plan", "-m", model, "-t", "8xh200", "--images"],
                 ["compare", "-m", model, "-t", "8xh200", "-l", "tp=8", "--images"]):
        r = cli(*argv)
        assert r.exit_code == 2 and why in r.stderr and r.stderr.count("\n") == 1, (argv, r.stderr)


def test_a_plan_file_asking_images_of_a_text_model_is_refused(cli, tmp_path):
    r = cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "--json", "--top", "1")
    data = json.loads(r.stdout)
    data["candidates"][0]["knobs"]["images"] = True
    (tmp_path / "plan.json").write_text(json.dumps(data))
    r = cli("emit", "--plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "out"))
    assert r.exit_code == 2 and "knobs.images" in r.stderr and "no vision encoder" in r.stderr
