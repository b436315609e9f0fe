"""`plan`, `emit` and `lint` for DeepSeek-V4 (issue 19): V4-Pro on 8 x B200 and 2 x 8 H200 with both engines ranks
DP-attention + EP and TP layouts side by side, each with its reasons; every candidate runs the engine's V4 FlashMLA
backend on 584-byte fp8 rows and 256-token blocks; the step pays the heads FlashMLA pads to; the commands pass the
engines' flag definitions (mla_planner/data/engines). vLLM's V4 attention selects its own backend (FLASHMLA_SPARSE_DSV4),
which the extracted MLA backend table does not hold: the checker is told so (`model_backend`) and skips the MLA
backend rules; the flags themselves are checked exactly."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from mla_planner.engines.parser.check import check_command

from mla_planner.cli.app import app
from mla_planner.launch.build import build, launch_inputs
from mla_planner.search.planfile_read import read_plan
from mla_planner.specs.attention.compressed import _sum_min, layer_ratios, rows_read
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

PRO, FLASH = "tests/fixtures/hf/DeepSeek-V4-Pro", "tests/fixtures/hf/DeepSeek-V4-Flash-0731"
CASES = [(t, e) for t in ("8xb200", "2x8xh200-ib") for e in ("vllm", "sglang")]


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    out, folder = {}, tmp_path_factory.mktemp("v4-plans")
    for i, (topo, engine) in enumerate(CASES):
        r = CliRunner().invoke(app, ["plan", "-m", PRO, "-t", topo, "-e", engine, "--explain", "--json"])
        path = folder / f"{i}.json"
        path.write_text(r.stdout)
        out[(topo, engine)] = (r.exit_code, path, json.loads(r.stdout))
    return out


@pytest.mark.parametrize("topo, engine", CASES)
def test_dp_attention_and_tp_are_ranked_side_by_side_with_reasons(plans, topo, engine):
    code, _, data = plans[(topo, engine)]
    assert code in (0, 1)
    cands = data["candidates"]
    shapes = {("dp" if c["layout"]["dp"] > 1 else "tp") for c in cands}
    assert shapes == {"dp", "tp"}, [c["label"] for c in cands]
    for c in cands:
        if c["layout"]["dp"] > 1:
            assert c["layout"]["ep"] == c["layout"]["dp"] * c["layout"]["tp"]     # DP attention with wide EP
        assert any(r.startswith("max_num_seqs:") for r in c["reasons"])
        assert any("FlashMLA" in r or "flashmla" in r for r in c["reasons"] if r.startswith("attention_backend"))


@pytest.mark.parametrize("topo, engine", CASES)
def test_every_candidate_runs_the_v4_backend_rows_and_blocks(plans, topo, engine):
    plan = read_plan(plans[(topo, engine)][1])
    for c in plan.candidates:
        k = c.knobs
        assert (k.kv_cache_dtype, k.block_size) == ("fp8_ds_mla", 256)
        assert k.attention_backend == {"vllm": "FLASHMLA_SPARSE_DSV4", "sglang": "flashmla"}[engine]
        assert c.layout.dcp == 1 and attention_of(plan.spec).layout_problems(plan.spec, c.layout) == []


@pytest.mark.parametrize("topo, engine", CASES)
def test_its_commands_pass_the_engines_parsers(plans, topo, engine):
    plan = read_plan(plans[(topo, engine)][1])
    sm = f"sm{load_topology(topo).gpu.sm}"
    for cand in plan.candidates[:3]:
        for c in build(launch_inputs(plan, cand, "native"), engine):
            if not c.runs_engine:
                continue
            words = c.engine_args
            own = {"vllm": "FLASHMLA_SPARSE_DSV4", "sglang": None}[engine]
            assert check_command(words, engine, sm, model_max_len=plan.spec.max_position_embeddings,
                                 model_backend=own) == [], c.argv
            assert words[words.index("--kv-cache-dtype") + 1] == {"vllm": "fp8", "sglang": "fp8_e4m3"}[engine]
            assert words[words.index({"vllm": "--block-size", "sglang": "--page-size"}[engine]) + 1] == "256"
            assert "--attention-backend" not in words            # each engine resolves V4's backend itself
            parser = {"vllm": "deepseek_v4", "sglang": "deepseekv4"}[engine]
            assert words[words.index("--tool-call-parser") + 1] == parser


def test_the_emitted_vllm_command_passes_lint(plans, tmp_path):
    plan = read_plan(plans[("8xb200", "vllm")][1])
    cmd = next(c for c in build(launch_inputs(plan, plan.candidates[0], "native"), "vllm") if c.runs_engine)
    r = CliRunner().invoke(app, ["lint", "-m", PRO, "-t", "8xb200", "--json", "--", "vllm", "serve",
                                 *cmd.engine_args])
    assert r.exit_code == 0, r.output
    assert not [f for f in json.loads(r.stdout)["findings"] if f["level"] == "error"]


def test_flashmla_pads_a_tp_ranks_heads_and_dp_attention_does_not():
    """V4-Pro has 128 heads: TP8 leaves 16 per rank, which FlashMLA's FP8 decode kernel computes as 64."""
    spec = load_model(PRO).spec
    kind = attention_of(spec)
    tp8, dp8 = Layout(tp=8), Layout(tp=1, dp=8, ep=8)
    padded = kind.layer_core(spec, tp8, 4, 32, 8192, 1, padded_heads=64)
    plain = kind.layer_core(spec, tp8, 4, 32, 8192, 1)
    index_flops = 2.0 * 64 * 128 * 32 * (8192 // 4)
    assert padded.flops - index_flops == pytest.approx(4 * (plain.flops - index_flops))
    assert padded.bytes == plain.bytes
    whole = kind.layer_core(spec, dp8, 4, 32, 8192, 1, padded_heads=128)
    assert whole.flops == kind.layer_core(spec, dp8, 4, 32, 8192, 1).flops


def test_a_csa_layer_reads_top_k_rows_however_long_the_context():
    """Past top-k x 4 tokens a CSA layer attends to top-k compressed rows plus the window; only its index scan
    grows with the context (a quarter of a key per token); HCA reads a row per 128 tokens."""
    spec = load_model(FLASH).spec
    assert rows_read(200_000, 4, 128, 512) == (512, 128, 50_000)
    assert rows_read(1_000_000, 4, 128, 512) == (512, 128, 250_000)
    assert rows_read(1_000_000, 128, 128, 512) == (7812, 128, 0)
    kind, layout = attention_of(spec), Layout(tp=1)
    long = kind.decode_core(spec, layout, "fp8_ds_mla", 1, 1_048_576, 1)
    assert long.bytes < 0.05 * 1_048_576 * 584     # a dense cache of the same rows: every token's, every layer
    csa = [kind.layer_core(spec, layout, 4, 1, n, 1) for n in (131_072, 1_048_576)]
    index = [1 * (n // 4) * 132 for n in (131_072, 1_048_576)]
    assert csa[0].bytes - index[0] == csa[1].bytes - index[1]    # the attended rows: top-k + window, both lengths
    assert len(layer_ratios(spec)) == 43


def test_prefill_sums_match_their_loops():
    for first, last, r, cap in [(1, 5000, 1, 128), (3000, 9000, 4, 512), (1, 300, 4, 512), (10, 70_000, 128, None)]:
        loop = sum(min(t // r, cap) if cap is not None else t // r for t in range(first, last + 1))
        assert _sum_min(first, last, r, cap) == loop


def test_vllm_on_blackwell_runs_the_fp4_indexer_cache_and_says_so(plans):
    """68-byte index keys: more blocks per GiB and half the index scan's reads; told to vLLM in --attention-config."""
    plan = read_plan(plans[("8xb200", "vllm")][1])
    k = plan.candidates[0].knobs
    assert k.indexer_kv_dtype == "mxfp4"
    assert any(r.startswith("indexer_kv_dtype: mxfp4") for r in plans[("8xb200", "vllm")][2]["candidates"][0]["reasons"])
    cmd = next(c for c in build(launch_inputs(plan, plan.candidates[0], "native"), "vllm") if c.runs_engine)
    words = cmd.engine_args
    assert json.loads(words[words.index("--attention-config") + 1]) == {"indexer_kv_dtype": "mxfp4"}
    for topo, engine in (("2x8xh200-ib", "vllm"), ("8xb200", "sglang")):
        assert all(c.knobs.indexer_kv_dtype == "fp8" for c in read_plan(plans[(topo, engine)][1]).candidates)
    spec, layout = plan.spec, plan.candidates[0].layout
    kind = attention_of(spec)
    fp8, fp4 = (kind.layer_core(spec, layout, 4, 8, 65536, 1, index_cache=c) for c in ("fp8", "mxfp4"))
    assert fp8.bytes - fp4.bytes == 8 * (65536 // 4) * (132 - 68)


def test_prefill_reads_the_index_keys_in_the_cache_they_are_kept_in():
    spec = load_model(FLASH).spec
    kind, layout = attention_of(spec), Layout(tp=1)
    fp8, fp4 = (kind.prefill_core(spec, layout, "fp8_ds_mla", 4096, 61440, index_cache=c) for c in ("fp8", "mxfp4"))
    assert fp8.bytes - fp4.bytes == pytest.approx(21 / 43 * (65536 // 4) * (132 - 68))   # per layer, averaged
    assert fp8.flops == fp4.flops


@pytest.mark.parametrize("topology, engine", [("8xh200", "vllm"), ("8xmi355x", "vllm"), ("8xb200", "sglang")])
def test_compare_prices_a_v4_layout_as_plan_does(topology, engine):
    """`compare` given a plan candidate's knobs prices it as `plan` did: the engine's V4 backend (whose head padding
    the step pays) and the index-key cache the engine defaults to on that GPU (--indexer-kv-dtype), where compare
    priced unpadded heads and fp8 keys (+10 % tok/s for V4-Flash at tp8 with MTP on 8 x H200: QA)."""
    run = CliRunner().invoke
    plan = json.loads(run(app, ["plan", "-m", "deepseek-v4-flash", "-t", topology, "-e", engine, "-l", "tp=8",
                                "--mtp", "--json"]).stdout)
    cand = plan["candidates"][0]
    k, fraction = cand["knobs"], ("--gpu-memory-utilization" if engine == "vllm" else "--mem-fraction-static")
    argv = ["compare", "-m", "deepseek-v4-flash", "-t", topology, "-e", engine, "-l", "tp=8", "--mtp",
            "--mtp-draft-tokens", str(k["mtp_draft_tokens"]), "--block-size", str(k["block_size"]),
            "--max-num-seqs", str(k["max_num_seqs"]), "--max-num-batched-tokens", str(k["max_num_batched_tokens"]),
            fraction, str(k["memory_fraction"]), "--kv-cache-dtype", k["kv_cache_dtype"],
            "--indexer-kv-dtype", k["indexer_kv_dtype"], "--json"]
    if k["cuda_graph_max_bs"]:
        argv += ["--cuda-graph-max-bs", str(k["cuda_graph_max_bs"])]
    row = json.loads(run(app, argv).stdout)["layouts"][0]
    assert row["knobs"]["attention_backend"] == k["attention_backend"]
    assert row["throughput_tokens_per_s"] == pytest.approx(cand["performance"]["throughput_tokens_per_s"], rel=1e-6)
