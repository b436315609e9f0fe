"""AutoAWQ 4-bit checkpoints (community DeepSeek-V3/R1 AWQ releases): read from config.json, priced per tensor,
planned. The config below is DeepSeek-V3's with an AutoAWQ quantization_config (bits 4, group 128, zeros)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.memory.accounting import evaluate
from mla_planner.memory.report import memory_report
from mla_planner.memory.ways_out import awq_spec
from mla_planner.memory.weights import mla_absorb_bytes
from mla_planner.specs.catalogue import spec_from_hf_config
from mla_planner.specs.layout import Layout
from mla_planner.specs.sizing import weight_bytes_breakdown, weight_bytes_by_format
from mla_planner.specs.topology import load_topology
from mla_planner.specs.weights import inventory, stored_bytes

AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def awq_config(tmp_path, **quant) -> Path:
    cfg = json.load(open("tests/fixtures/hf/DeepSeek-V3/config.json"))
    cfg["quantization_config"] = AWQ | quant
    folder = tmp_path / "DeepSeek-R1-AWQ"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder / "config.json"


def test_awq_config_is_read_as_int4_with_scales_and_zeros(tmp_path):
    """Every decoder-layer linear layer int4 (0.5 B/param + a 16-bit scale and a 4-bit zero per 128 values);
    embedding, lm_head, norms and the router gate stay as they are. DeepSeek-V3's 671 B parameters then
    take ~351 GB, against 673 GB in the fp8 release."""
    spec = spec_from_hf_config(awq_config(tmp_path))
    assert (spec.weight_dtype, spec.expert_dtype, spec.int4_group_size, spec.int4_zero_point) == ("int4", "int4",
                                                                                                 128, True)
    tensors = {t.name: t for t in inventory(spec)}
    expert = tensors["routed_experts.w1"]
    assert stored_bytes(expert, spec) == pytest.approx(expert.numel * (0.5 + 2.5 / 128))
    assert {tensors[n].dtype for n in ("embed_tokens", "lm_head", "gate.weight")} == {"bf16"}
    total = weight_bytes_breakdown(spec)["total"]
    assert 340e9 < total < 360e9
    assert total < 0.55 * weight_bytes_by_format(spec)["fp8 block-scaled"]
    assert weight_bytes_by_format(spec)["int4 AWQ, group 128"] == pytest.approx(total)


def test_modules_to_not_convert_stay_bf16(tmp_path):
    """modules_to_not_convert names modules the engines load unquantized (substring of the module's full name,
    vLLM `is_layer_skipped`): those tensors are bf16, and a bf16 kv_b_proj needs no dequantized W_UK/W_UV copy."""
    plain = spec_from_hf_config(awq_config(tmp_path))
    spec = spec_from_hf_config(awq_config(tmp_path, modules_to_not_convert=["fused_qkv_a_proj", "kv_b_proj"]))
    dtypes = {t.name: t.dtype for t in inventory(spec)}
    assert dtypes["attn.wq_a"] == dtypes["attn.wkv_a"] == dtypes["attn.wkv_b"] == "bf16"   # the fused name: both
    assert dtypes["attn.wq_b"] == dtypes["attn.wo"] == dtypes["routed_experts.w2"] == "int4"
    assert weight_bytes_breakdown(spec)["attention"] > weight_bytes_breakdown(plain)["attention"]
    layout = Layout(tp=8)
    assert mla_absorb_bytes(plain, layout, 61) > 0 == mla_absorb_bytes(spec, layout, 61)
    experts_only = spec_from_hf_config(awq_config(tmp_path, modules_to_not_convert=["self_attn", "shared_experts"]))
    kinds = {t.group: t.dtype for t in inventory(experts_only) if t.group in ("attention", "shared_experts")}
    assert kinds == {"attention": "bf16", "shared_experts": "bf16"}


def test_awq_fits_one_node_where_fp8_does_not(cli, tmp_path):
    """SGLang's DeepSeek guide: FP8 needs 8 x H200 or 2 x 8 H100; AWQ runs on 8 x A100 / H100
    (docs/basic_usage/deepseek_v3.md). The memory model agrees on 8 x H100 (exit 0 FITS, 1 DOES NOT FIT)."""
    awq = str(awq_config(tmp_path))
    assert cli("memory", "-m", awq, "-t", "8xh100", "--tp", "8", "--max-model-len", "32768").exit_code == 0
    assert cli("memory", "-m", "deepseek-v3", "-t", "8xh100", "--tp", "8", "--max-model-len", "32768").exit_code == 1
    r = cli("plan", "-m", awq, "-t", "8xh100", "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["meets_targets"] and plan["candidates"][0]["performance"]["concurrency"] >= 1
    (tmp_path / "plan.json").write_text(r.stdout)
    assert cli("emit", "--plan", str(tmp_path / "plan.json"), "--out", str(tmp_path / "out")).exit_code == 0
    assert "int4 weights (AWQ, W4A16)" in (tmp_path / "out" / "README.md").read_text()   # the unvalidated caveat


@pytest.mark.parametrize("quant, field", [({"bits": 8}, "bits"), ({"bits": "4"}, "bits"),
                                          ({"group_size": "x"}, "group_size"),
                                          ({"group_size": True}, "group_size"), ({"group_size": 100000}, "group_size"),
                                          ({"zero_point": "yes"}, "zero_point"),
                                          ({"lm_head": True}, "lm_head"),
                                          ({"modules_to_not_convert": "gate"}, "modules_to_not_convert"),
                                          ({"modules_to_not_convert": ["kv_a_proj_with_mqa"]}, "fused layer"),
                                          ({"modules_to_not_convert": ["layers.1.mlp.up_proj"]}, "fused layer")])
def test_awq_it_cannot_price_is_one_clear_line(cli, tmp_path, quant, field):
    """One error line naming the config.json and the field, for values the engines would not load either."""
    r = cli("show", "-m", str(awq_config(tmp_path, **quant)))
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "config.json" in lines[0] and "Traceback" not in r.output


def test_sglang_has_no_deepep_path_for_int4_experts(cli, tmp_path):
    """SGLang 0.5.23's Marlin MoE runner (AWQ, compressed-tensors W4A16) is registered for the standard dispatch
    only: DP attention + EP over DeepEP is rejected for SGLang, not for vLLM, and compare says it will not start."""
    awq = str(awq_config(tmp_path))
    plan = json.loads(cli("plan", "-m", awq, "-t", "2x8xh200-ib", "-l", "tp=1,dp=16,ep=16", "--json").stdout)
    engines = {c["knobs"]["engine"] for c in plan["candidates"]}
    assert "sglang" not in engines and "vllm" in engines
    assert any(r["engine"] == "sglang" and "no DeepEP path" in r["reason"] for r in plan["rejected"])
    row = json.loads(cli("compare", "-m", awq, "-t", "2x8xh200-ib", "-e", "sglang", "-l", "tp=1,dp=16,ep=16",
                         "--json").stdout)["layouts"][0]
    assert any("no DeepEP path" in n for n in row["notes"])
    mem = cli("memory", "-m", awq, "-t", "2x8xh200-ib", "-e", "sglang", "--tp", "1", "--dp", "16")
    assert mem.exit_code == 2 and "no DeepEP path" in mem.output


@pytest.mark.parametrize("value", ["awq", ["awq"]])
def test_a_quantization_config_that_is_not_a_mapping(cli, tmp_path, value):
    cfg = json.load(open("tests/fixtures/hf/DeepSeek-V3/config.json")) | {"quantization_config": value}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = cli("show", "-m", str(tmp_path / "config.json"))
    assert r.exit_code == 2 and "quantization_config" in r.output and "Traceback" not in r.output


def test_a_split_that_breaks_the_groups_is_warned_not_refused(cli, tmp_path):
    """At tp32 a GPU holds 64 of the experts' 2,048 input columns, half a 128-value group: the engines load it on
    slower fallback kernels (vLLM MoeWNA16 halves the groups), so the plan warns instead of refusing."""
    plan = json.loads(cli("plan", "-m", str(awq_config(tmp_path)), "-t", "4x8xa100-ib", "-l", "tp=32",
                          "--json").stdout)
    warned = [w for c in plan["candidates"] for w in c["warnings"] if "fall back from Marlin" in w]
    assert plan["candidates"] and any("routed experts: 64 input columns" in w for w in warned)
    ok = json.loads(cli("plan", "-m", str(awq_config(tmp_path)), "-t", "8xh100", "-l", "tp=8", "--json").stdout)
    assert not any("fall back from Marlin" in w for c in ok["candidates"] for w in c["warnings"])


def test_a_4bit_checkpoint_is_offered_as_a_way_out(tmp_path):
    """Quantized fallbacks (sgl-project/sglang#3880, #6312): when the FP8 release does not fit, name the
    quantized alternative that does. The 4-bit model ways_out prices is the one read from an AutoAWQ
    config.json (same bytes, tensor by tensor), it is offered
    after any flag or layout on the same GPUs and before more hardware, and its KV capacity is what
    `memory` gives the AWQ config."""
    v3 = spec_from_hf_config(Path("tests/fixtures/hf/DeepSeek-V3/config.json"))
    synthesized, read = awq_spec(v3), spec_from_hf_config(awq_config(tmp_path))
    assert [stored_bytes(t, synthesized) for t in inventory(synthesized)] == \
        [stored_bytes(t, read) for t in inventory(read)]
    assert awq_spec(read) is None
    topo = load_topology("8xh100")
    knobs = engine_default_knobs("vllm", v3, topo, max_model_len=32768)
    fixes = memory_report(v3, topo, Layout(tp=8), knobs).ways_out
    assert [f.split(" ")[0:2] for f in fixes] == [["a", "4-bit"], ["more", "nodes:"]]
    capacity = evaluate(read, topo, Layout(tp=8), knobs).kv_capacity_tokens
    assert capacity > 0 and f"KV capacity {capacity:,} tokens" in fixes[0]


def test_no_4bit_checkpoint_when_a_flag_does():
    """Where a flag on the same GPUs fits the model (here the safe memory fraction, after a too-low one),
    neither a new checkpoint nor more hardware is offered."""
    v3 = spec_from_hf_config(Path("tests/fixtures/hf/DeepSeek-V3/config.json"))
    topo = load_topology("2x8xh100-ib")
    knobs = engine_default_knobs("vllm", v3, topo, max_model_len=32768)
    report = memory_report(v3, topo, Layout(tp=8, pp=2), replace(knobs, memory_fraction=0.55))
    assert not report.fits and report.ways_out[0].startswith("--gpu-memory-utilization")
    assert not any(f.startswith(("a 4-bit", "more nodes")) for f in report.ways_out)
