"""FP4 and compressed-tensors checkpoints as the engines read them (specs/quantization.py): ModelOpt NVFP4
(quant_method modelopt, or hf_quant_config.json beside config.json), compressed-tensors NVFP4 / MXFP4 / FP8
blocks with their `ignore` lists, gpt-oss-style mxfp4; the bytes each stores (specs/weights.py) and the
tensor cores an NVFP4 GEMM runs on."""

import json
from pathlib import Path

import pytest

from mla_planner.core.errors import InputError
from mla_planner.perf.layer_work import tensor_precision
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.sizing import param_breakdown, weight_bytes_breakdown
from mla_planner.specs.topology import load_topology
from mla_planner.specs.weights import Tensor, bytes_of, inventory, mtp_inventory

V3 = json.loads(Path("tests/fixtures/hf/DeepSeek-V3/config.json").read_text())
# NVIDIA's DeepSeek-R1 FP4 recipe (TensorRT-Model-Optimizer examples/deepseek/quantize_to_nvfp4.py) leaves
# attention, lm_head and the MTP layer (model.layers.61) out of FP4.
MODELOPT = {"quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
            "exclude_modules": ["lm_head", "model.layers.*.self_attn*", "model.layers.61*"]}


def snapshot(tmp_path: Path, quant=None, side=None) -> Path:
    cfg = {k: v for k, v in V3.items() if k != "quantization_config"}
    if quant is not None:
        cfg["quantization_config"] = quant
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    if side is not None:
        (tmp_path / "hf_quant_config.json").write_text(json.dumps(side))
    return tmp_path


def dtypes(spec) -> dict:
    return {t.name: t.dtype for t in inventory(spec)}


@pytest.mark.parametrize("how", ["config", "hf_quant_config.json"])
def test_modelopt_nvfp4_keeps_what_it_excludes_in_bf16(tmp_path, how):
    folder = (snapshot(tmp_path, {"quant_method": "modelopt", **MODELOPT}) if how == "config"
              else snapshot(tmp_path, side={"producer": {"name": "modelopt"}, "quantization": MODELOPT}))
    spec = load_model(str(folder)).spec
    assert (spec.weight_dtype, spec.expert_dtype) == ("nvfp4", "nvfp4")
    d = dtypes(spec)
    assert d["attn.wq_a"] == d["attn.wkv_b"] == d["attn.wo"] == "bf16"
    assert d["routed_experts.w1"] == d["shared_experts.w2"] == d["dense_ffn.w3"] == "nvfp4"
    assert {t.dtype for t in mtp_inventory(spec) if t.name.startswith(("attn.", "routed_experts."))} == {"bf16"}


def test_nvfp4_and_mxfp4_bytes():
    """NVFP4: half a byte per value, an e4m3 scale per 16, two fp32 per tensor; MXFP4: an e8m0 scale per 32."""
    t = Tensor("routed_experts.w1", "routed_experts", (2048, 7168), 256, "expert_column", "nvfp4")
    n = 2048 * 7168
    assert bytes_of(t) == 256 * (n / 2 + n / 16 + 8)
    assert bytes_of(Tensor(t.name, t.group, t.shape, 1, t.split, "mxfp4")) == n / 2 + n / 32


def test_an_nvfp4_r1_is_about_a_quarter_of_bf16_in_its_experts(tmp_path):
    spec = load_model(str(snapshot(tmp_path, {"quant_method": "modelopt", **MODELOPT}))).spec
    w, p = weight_bytes_breakdown(spec), param_breakdown(spec)
    assert w["routed_experts"] / p["routed_experts"] == pytest.approx(0.5 + 1 / 16, rel=1e-3)
    assert w["attention"] / p["attention"] == pytest.approx(2.0, rel=1e-3)


@pytest.mark.parametrize("weights, ignore, expect", [
    # Mistral-Small-4-NVFP4 style: attention, router, lm_head ignored
    ({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
     ["lm_head", "re:.*self_attn.*", "re:.*gate$"], "nvfp4"),
    # Kimi-K3 style MXFP4: routed experts only
    ({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32},
     ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"], "mxfp4"),
    # Mistral Large 3 FP8 / RedHatAI FP8-BLOCK: 128 x 128 blocks, the low-rank A projections ignored
    ({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
     ["lm_head", "re:.*kv_a_proj_with_mqa$", "re:.*q_a_proj$", "re:.*gate$"], "fp8"),
])
def test_compressed_tensors_formats_and_their_ignore_lists(tmp_path, weights, ignore, expect):
    quant = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"targets": ["Linear"],
                                                                               "weights": weights}}, "ignore": ignore}
    d = dtypes(load_model(str(snapshot(tmp_path, quant))).spec)
    assert d["routed_experts.w1"] == expect and d["attn.wq_a"] == "bf16"
    assert d["shared_experts.w1"] == ("bf16" if expect == "mxfp4" else expect)
    assert d["dense_ffn.w1"] == ("bf16" if expect == "mxfp4" else expect)
    assert d["attn.wkv_b"] == ("bf16" if expect != "fp8" else "fp8")


@pytest.mark.parametrize("quant, needle", [
    ({"quant_method": "compressed-tensors",
      "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 64}}}}, "not modelled"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "quant_algo 'FP8' is not modelled"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32}, "expected 16"),
])
def test_a_format_it_does_not_know_is_refused(tmp_path, quant, needle):
    with pytest.raises(InputError, match=needle):
        load_model(str(snapshot(tmp_path, quant)))


def test_gpt_oss_style_mxfp4_is_experts_only(tmp_path):
    spec = load_model(str(snapshot(tmp_path, {"quant_method": "mxfp4"}))).spec
    assert (spec.weight_dtype, spec.expert_dtype) == ("bf16", "mxfp4")


def test_nvfp4_gemms_run_on_fp4_tensor_cores_only_where_the_gpu_has_them():
    """Blackwell's FP4 tensor cores (B200: 9 PFLOP/s dense); Hopper runs NVFP4 weight-only through Marlin."""
    b200, h200 = load_topology("8xb200").gpu, load_topology("8xh200").gpu
    assert b200.tensor_flops_per_s(tensor_precision("nvfp4")) == 9e15
    assert h200.tensor_flops_per_s(tensor_precision("nvfp4")) == h200.bf16_flops_per_s
    # MXFP4 (DeepSeek-V4's experts) with FP8 activations: the mixed-input MMA at the FP8 rate on Blackwell
    assert b200.tensor_flops_per_s(tensor_precision("mxfp4")) == b200.fp8_flops_per_s
    assert h200.tensor_flops_per_s(tensor_precision("mxfp4")) == h200.bf16_flops_per_s


def test_an_nvfp4_r1_plans_on_b200(cli, tmp_path):
    folder = snapshot(tmp_path, {"quant_method": "modelopt", **MODELOPT})
    r = cli("memory", "-m", str(folder), "-t", "8xb200", "--json")
    assert r.exit_code == 0, r.output
    r = cli("plan", "-m", str(folder), "-t", "8xb200", "--json")
    assert r.exit_code in (0, 1) and json.loads(r.stdout)["candidates"], r.output


@pytest.mark.parametrize("engine_argv", [["vllm", "serve", "nvidia/DeepSeek-R1-FP4", "-tp", "8"],
                                         ["python3", "-m", "sglang.launch_server", "--model-path",
                                          "nvidia/DeepSeek-R1-FP4", "--tp", "8"]])
def test_lint_takes_an_fp4_checkpoints_own_method_as_redundant_not_a_contradiction(cli, tmp_path, engine_argv):
    """--quantization modelopt_fp4 on a ModelOpt NVFP4 checkpoint (QA: it was an error, "contradicts the
    checkpoint"); the engines read the checkpoint's own quantization_config, so the flag is redundant."""
    folder = snapshot(tmp_path, {"quant_method": "modelopt", **MODELOPT})
    r = cli("lint", "-m", str(folder), "-t", "8xb200", "--json", "--", *engine_argv, "--quantization", "modelopt_fp4")
    found = [f for f in json.loads(r.stdout)["findings"] if f["flag"] == "--quantization"]
    assert found and found[0]["level"] == "warn" and found[0]["text"].startswith("redundant"), r.output
    r = cli("lint", "-m", str(folder), "-t", "8xb200", "--json", "--", *engine_argv, "--quantization", "awq")
    assert any(f["level"] == "error" and "contradicts" in f["text"] for f in json.loads(r.stdout)["findings"])


def test_plan_refuses_deepseek_v4s_bf16_rows_as_memory_does(cli):
    r = cli("plan", "-m", "deepseek-v4-pro", "-t", "8xb200", "--kv-cache-dtype", "bf16")
    assert r.exit_code == 2 and "DeepSeek-V4's bf16 rows" in r.stderr
