"""`plan` for DeepSeek Sparse Attention models (DeepSeek-V3.2, GLM-5.2) on 8 x H200 and 8 x B200 with both
engines: each candidate runs the sparse backend its engine selects for its KV dtype on that GPU (engines/sparse.py),
its decode core pays the heads that backend pads to, and its per-node commands pass the engines' own flag
definitions (mla_planner/data/engines, with their sparse-attention backend rules)."""

import json

import pytest
from click.testing import CliRunner
from mla_planner.engines.parser.check import check_command

from mla_planner.cli.app import app
from mla_planner.engines.sparse import kv_flag, sparse_choice
from mla_planner.launch.build import build, launch_inputs
from mla_planner.search.planfile_read import read_plan
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

V32 = "tests/fixtures/hf/DeepSeek-V3.2"
GLM52 = "tests/fixtures/hf/GLM-5.2-FP8"
CASES = [(m, t, e) for m in (V32, GLM52) for t in ("8xh200", "8xb200") for e in ("vllm", "sglang")]


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """Each case's plan file (the CLI run once per case)."""
    out, folder = {}, tmp_path_factory.mktemp("dsa-plans")
    for i, (model, topo, engine) in enumerate(CASES):
        r = CliRunner().invoke(app, ["plan", "-m", model, "-t", topo, "-e", engine, "--json"])
        path = folder / f"{i}.json"
        path.write_text(r.stdout)
        out[(model, topo, engine)] = (r.exit_code, path)
    return out


@pytest.mark.parametrize("model, topo, engine", CASES)
def test_each_candidate_runs_its_engines_sparse_backend(plans, model, topo, engine):
    code, path = plans[(model, topo, engine)]
    assert code in (0, 1)
    plan = read_plan(path)
    assert plan.candidates
    gpu = load_topology(topo).gpu
    for c in plan.candidates:
        k = c.knobs
        kv_class = "bf16" if k.kv_cache_dtype == "bf16" else "fp8"
        choice = sparse_choice(engine, plan.spec, gpu, kv_class, plan.spec.num_attention_heads // c.layout.tp,
                               dcp=c.layout.dcp)
        assert (k.attention_backend, k.kv_cache_dtype, k.block_size) == (choice.backend, choice.kv_cache_dtype, 64)


@pytest.mark.parametrize("model, topo, engine", CASES)
def test_its_commands_pass_the_engines_parsers(plans, model, topo, engine):
    plan = read_plan(plans[(model, topo, engine)][1])
    sm = f"sm{load_topology(topo).gpu.sm}"
    for c in build(launch_inputs(plan, plan.candidates[0], "native"), engine):
        if not c.runs_engine:
            continue
        assert check_command(c.engine_args, engine, sm, model_max_len=plan.spec.max_position_embeddings,
                             sparse_attention=True) == [], c.argv
        words = c.engine_args
        k = plan.candidates[0].knobs
        assert words[words.index("--kv-cache-dtype") + 1] == kv_flag(engine, k.kv_cache_dtype)
        if engine == "sglang":     # SGLang's DSA path picks its decode kernel with its own flag
            assert "--attention-backend" not in words and words[words.index("--dsa-decode-backend") + 1] == \
                k.attention_backend


def test_flashmla_sparse_pays_for_the_heads_it_pads():
    """DeepSeek-V3.2 at TP8 has 16 query heads per rank; FlashMLA-sparse computes 64 (vLLM 0.33.0
    flashmla_sparse.py), so the core's FLOPs are 4x and its reads unchanged."""
    spec = load_model(V32).spec
    dsa, layout = attention_of(spec), Layout(tp=8)
    plain = dsa.decode_core(spec, layout, "fp8_ds_mla", 32, 8192, 1)
    padded = dsa.decode_core(spec, layout, "fp8_ds_mla", 32, 8192, 1, padded_heads=64)
    index_flops = 2.0 * 64 * 128 * 32 * 8192
    assert padded.bytes == plain.bytes
    assert padded.flops - index_flops == pytest.approx(4 * (plain.flops - index_flops))


def test_the_plan_json_names_the_backend_and_why(plans):
    data = json.loads(plans[(V32, "8xh200", "vllm")][1].read_text())
    best = data["candidates"][0]
    reason = next(r for r in best["reasons"] if r.startswith("attention_backend:"))
    assert best["knobs"]["attention_backend"] in reason and "selects" in reason


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_it_plans_with_its_mtp_layer_and_the_engines_accept_the_commands(cli, tmp_path, engine):
    """V3.2 and GLM-5 draft with their MTP layer in both engines (vLLM speculative.py maps deepseek_v32 and
    glm_moe_dsa to the DeepSeek MTP drafter; SGLang drafts with the target checkpoint); the MTP layer keeps an
    indexer, so it holds index keys too."""
    r = cli("plan", "-m", V32, "-t", "8xb200", "-e", engine, "--mtp", "--json")
    assert r.exit_code in (0, 1), r.output
    (tmp_path / "plan.json").write_text(r.stdout)
    plan = read_plan(tmp_path / "plan.json")
    best = plan.candidates[0]
    assert best.knobs.mtp
    for c in build(launch_inputs(plan, best, "native"), engine):
        if c.runs_engine:
            assert check_command(c.engine_args, engine, "sm100", model_max_len=plan.spec.max_position_embeddings,
                                 sparse_attention=True) == [], c.argv


def test_dcp_is_planned_where_the_engines_sparse_backends_take_it(plans):
    """vLLM splits both caches under DCP; of its sparse backends FlashInfer's (Blackwell) takes DCP, FA4 with
    heads x dcp up to 64, FlashMLA's only with fp8_ds_mla below 32 heads per rank; SGLang's DSA under DCP is not
    modelled (engines/layouts.py)."""
    vllm = read_plan(plans[(V32, "8xb200", "vllm")][1])
    sglang = read_plan(plans[(V32, "8xb200", "sglang")][1])
    assert all(c.layout.dcp == 1 for c in sglang.candidates)
    dcp = [c for c in vllm.candidates if c.layout.dcp > 1]
    assert dcp and all(c.knobs.attention_backend in ("FLASHINFER_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE_FA4")
                       for c in dcp)
    assert all(128 // c.layout.tp * c.layout.dcp <= 64 for c in dcp
               if c.knobs.attention_backend == "FLASH_ATTN_MLA_SPARSE_FA4")
