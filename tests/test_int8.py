"""INT8 W8A8 checkpoints (meituan's DeepSeek-R1 Block-INT8 and Channel-INT8 releases): read, priced per tensor,
planned for SGLang only, launched with the flags SGLang needs. The configs below are DeepSeek-V3's with the
Block release's quantization_config, or, for the Channel release, none plus a weight index naming
per-channel `weight_scale` tensors (as that release ships)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.memory.accounting import evaluate
from mla_planner.perf.layer_work import layer_weights
from mla_planner.perf.step import op_time_s
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model, spec_from_hf_config
from mla_planner.specs.layout import Layout, layout_problems
from mla_planner.specs.sizing import weight_bytes_breakdown
from mla_planner.specs.topology import load_topology
from mla_planner.specs.weights import inventory, stored_bytes

V3 = "tests/fixtures/hf/DeepSeek-V3/config.json"
BLOCK = {"activation_scheme": "dynamic", "quant_method": "blockwise_int8", "weight_block_size": [128, 128]}


def snapshot(tmp_path: Path, kind: str) -> Path:
    cfg = json.load(open(V3))
    cfg.pop("quantization_config", None)
    folder = tmp_path / f"DeepSeek-R1-{kind}-INT8"
    folder.mkdir()
    if kind == "Block":
        cfg["quantization_config"] = BLOCK
    else:
        names = {f"model.layers.0.self_attn.q_a_proj.{t}": "model-00001-of-00163.safetensors"
                 for t in ("weight", "weight_scale")}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": names}))
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_both_releases_are_read_as_int8(tmp_path):
    """Block: quant_method blockwise_int8, an fp32 scale per 128 x 128 block, the same tensors as the FP8
    release, so the same bytes. Channel: no quantization_config, but per-channel weight_scale tensors in its
    index: 1 B/param plus an fp32 scale per output row. A folder without the index stays BF16."""
    fp8 = spec_from_hf_config(Path(V3))
    block = load_model(str(snapshot(tmp_path, "Block"))).spec
    channel = load_model(str(snapshot(tmp_path, "Channel"))).spec
    assert (block.weight_dtype, block.int8_block, channel.weight_dtype, channel.int8_block) == ("int8", True,
                                                                                                 "int8", False)
    assert weight_bytes_breakdown(block)["total"] == pytest.approx(weight_bytes_breakdown(fp8)["total"])
    expert = next(t for t in inventory(channel) if t.name == "routed_experts.w1")
    assert stored_bytes(expert, channel) == expert.numel + 4 * expert.shape[0] * expert.count
    assert {t.dtype for t in inventory(channel) if t.name in ("embed_tokens", "lm_head", "gate.weight")} == {"bf16"}
    (tmp_path / "DeepSeek-R1-Channel-INT8" / "model.safetensors.index.json").unlink()
    assert load_model(str(tmp_path / "DeepSeek-R1-Channel-INT8")).spec.weight_dtype == "bf16"


def test_sglang_minimums_and_the_block_rule(tmp_path):
    """SGLang's DeepSeek guide: INT8 on 16 x A100 (the Block release, tp16) and 32 x L40S (the Channel release,
    tp32). The memory model fits both and not 8 x A100; the Block release cannot split its experts 32 ways
    (64 columns a GPU, half a 128-wide block: blockwise_int8.py refuses), the Channel one can."""
    block = load_model(str(snapshot(tmp_path, "Block"))).spec
    channel = load_model(str(snapshot(tmp_path, "Channel"))).spec
    a100 = load_topology("4x8xa100-ib")
    l40s = replace(load_topology("2x8xl40s-eth"), nodes=4, name="4x8xl40s-eth")
    knobs = engine_default_knobs("sglang", block, a100, max_model_len=8192)
    assert evaluate(block, a100, Layout(tp=16), knobs).fits
    assert not evaluate(block, a100, Layout(tp=8), knobs).fits
    assert evaluate(channel, l40s, Layout(tp=32), engine_default_knobs("sglang", channel, l40s, 8192)).fits
    assert any("INT8 checkpoint's 128-wide scale blocks" in p for p in layout_problems(Layout(tp=32), block, 8, 32))
    assert not layout_problems(Layout(tp=32), channel, 8, 32)


def test_only_sglang_serves_them_and_emit_passes_the_channel_flag(cli, tmp_path):
    for kind, flag in (("Block", False), ("Channel", True)):
        folder = snapshot(tmp_path, kind)
        r = cli("plan", "-m", str(folder), "-t", "4x8xa100-ib", "-l", "tp=16", "-l", "tp=1,dp=16,ep=16", "--json")
        assert r.exit_code == 0, r.output
        plan = json.loads(r.stdout)
        assert plan["candidates"] and {c["knobs"]["engine"] for c in plan["candidates"]} == {"sglang"}
        assert all(c["label"] == "tp16" for c in plan["candidates"])    # SGLang's INT8 MoE has no DeepEP path
        reasons = " ".join(x["reason"] for x in plan["rejected"])
        assert "no loader for these INT8 W8A8 checkpoints" in reasons and "no DeepEP permute" in reasons
        (tmp_path / f"{kind}.json").write_text(r.stdout)
        out = tmp_path / f"out-{kind}"
        assert cli("emit", "--plan", str(tmp_path / f"{kind}.json"), "--out", str(out)).exit_code == 0
        script = (out / "node-0.sh").read_text()
        assert ("--quantization w8a8_int8" in script) is flag
        assert "INT8 weights (W8A8" in (out / "README.md").read_text()


def test_lint_knows_what_each_engine_needs(cli, tmp_path):
    channel, block = snapshot(tmp_path, "Channel"), snapshot(tmp_path, "Block")

    def lint(*words):
        r = cli("lint", "-t", "4x8xa100-ib", "--json", "--", *words)
        found = [(f["level"], f["flag"]) for f in json.loads(r.stdout)["findings"]]
        return r.exit_code, [f for f in found if f != ("warn", "layout")]     # tp16 spans two nodes: warned
    base = ("python", "-m", "sglang.launch_server", "--tp", "16", "--nnodes", "2", "--node-rank", "0",
            "--dist-init-addr", "10.0.0.1:5000")     # two 8-GPU nodes, as SGLang starts a TP16 group
    assert lint(*base, "--model-path", str(channel)) == (1, [("error", "--quantization")])
    assert lint(*base, "--model-path", str(channel), "--quantization", "w8a8_int8") == (0, [])
    assert lint(*base, "--model-path", str(block)) == (0, [])
    assert lint(*base, "--model-path", str(block), "--quantization", "w8a8_int8") == (1, [("error", "--quantization")])
    r = cli("lint", "-t", "4x8xa100-ib", "--", *base, "--model-path", str(block), "--quantization", "w8a8_int8")
    assert "stored as int8 (blockwise_int8): drop it" in r.output
    assert lint("vllm", "serve", str(block), "-tp", "16", "--nnodes", "2", "--node-rank", "0", "--master-addr",
                "10.0.0.1")[1][0] == ("error", "checkpoint")


def test_int8_gemms_run_on_int8_tensor_cores():
    """W8A8: weights and per-token activations int8, so compute-bound GEMMs run at the INT8 rate (A100: 624
    TOPS dense, twice its BF16), unlike int4 (weight-only) or FP8 on Ampere (Marlin, BF16 math)."""
    spec = replace(spec_from_hf_config(Path(V3)), weight_dtype="int8")
    w = layer_weights(spec, Layout(tp=16))
    assert w.weight_precision == w.expert_precision == "int8"
    a100 = load_topology("4x8xa100-ib")
    from mla_planner.perf.layer_work import Op
    cal = load_calibration(None, a100)
    op = Op("x", 1.0, 1e15, "gemm", "int8")
    assert op_time_s(op, a100.gpu, cal)[1] * 2 == pytest.approx(op_time_s(Op("x", 1.0, 1e15), a100.gpu, cal)[1])


def test_dp_attention_without_deepep_and_compare_picks_sglang(cli, tmp_path):
    """SGLang has no DeepEP path for INT8 experts, so DP attention is searched with the MoE tensor-parallel over
    the stage (ep=1) even where DeepEP could run (QA found no DP layout at all); compare picks SGLang for a
    checkpoint only SGLang loads, and refuses an explicit vLLM with one line."""
    block = str(snapshot(tmp_path, "Block"))
    plan = json.loads(cli("plan", "-m", block, "-t", "4x8xa100-ib", "--json").stdout)
    dp = [c for c in plan["candidates"] if c["layout"]["dp"] > 1]
    assert dp and all(c["layout"]["ep"] == 1 and c["knobs"]["engine"] == "sglang" for c in dp)
    r = cli("compare", "-m", block, "-t", "4x8xa100-ib", "-l", "tp=16", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["engine"] == "sglang"
    assert json.loads(r.stdout)["layouts"][0]["concurrency"] > 0
    r = cli("compare", "-m", block, "-t", "4x8xa100-ib", "-l", "tp=16", "-e", "vllm")
    assert r.exit_code == 2 and "no loader" in r.output and len(r.output.strip().splitlines()) == 1
    mem = cli("memory", "-m", block, "-t", "4x8xa100-ib", "--tp", "16", "--json")      # memory picks SGLang too
    assert mem.exit_code == 0 and json.loads(mem.stdout)["engine"] == "sglang"


@pytest.mark.parametrize("index", ["{not json", '{"weight_map": ["a"]}'])
def test_a_broken_weight_index_is_one_line_not_bf16(cli, tmp_path, index):
    """The index tells the Channel release from BF16 (2x the bytes): a broken one is refused, not ignored."""
    folder = snapshot(tmp_path, "Channel")
    (folder / "model.safetensors.index.json").write_text(index)
    r = cli("show", "-m", str(folder))
    assert r.exit_code == 2 and "model.safetensors.index.json" in r.output and "Traceback" not in r.output


def test_a_shorter_context_at_the_safe_fraction_is_a_way_out(cli, tmp_path):
    """QA: Block INT8 at tp8 on H20 fits neither at the safe memory fraction with the model's full context nor
    with a shorter context at SGLang's default fraction; the shorter context at the safe fraction does, and
    plan serves it that way, so memory offers it too (before more pipeline stages)."""
    topo = tmp_path / "h20x4.yaml"
    topo.write_text("name: h20x4\nnodes: 4\ngpus_per_node: 8\ngpu: H20-96G\nintra_node: {kind: nvswitch, latency_us: 3}"
                    "\ninter_node: {fabric: roce, nics_per_node: 4, nic_gbit_per_s: 200, latency_us: 5}\n")
    r = cli("memory", "-m", str(snapshot(tmp_path, "Block")), "-t", str(topo), "--tp", "8", "-e", "sglang", "--json")
    fixes = json.loads(r.stdout)["ways_out"]
    assert r.exit_code == 1 and fixes[0].startswith("--max-model-len ") and "with --mem-fraction-static 0." in fixes[0]


def test_modelopt_checkpoints_are_not_taken_for_channel_int8(tmp_path):
    """ModelOpt's FP4/FP8 releases (nvidia/DeepSeek-R1-FP4) also name `*_proj.weight_scale` and carry no
    quantization_config, but keep hf_quant_config.json beside it and add weight_scale_2 / input_scale: not INT8."""
    folder = snapshot(tmp_path, "Channel")
    index = folder / "model.safetensors.index.json"
    names = {f"model.layers.0.mlp.down_proj.{t}": "a.safetensors" for t in ("weight", "weight_scale", "weight_scale_2",
                                                                             "input_scale")}
    index.write_text(json.dumps({"weight_map": names}))
    assert load_model(str(folder)).spec.weight_dtype != "int8"
    index.write_text(json.dumps({"weight_map": {"model.layers.0.mlp.down_proj.weight_scale": "a.safetensors"}}))
    assert load_model(str(folder)).spec.weight_dtype == "int8"
    (folder / "hf_quant_config.json").write_text("{}")
    assert load_model(str(folder)).spec.weight_dtype != "int8"
