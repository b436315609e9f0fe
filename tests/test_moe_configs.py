"""Which tuned fused-MoE kernel config each engine looks up for a candidate, and whether its wheel ships one
(mla_planner/engines/moe_configs.py; the shipped names in data/moe_kernel_configs.yaml, from the vLLM 0.33.0 and
SGLang 0.5.23 wheels; sgl-project/sglang#4161)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from mla_planner.engines.moe_configs import _shipped, moe_kernel_config
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

V3, V2, KIMI = (load_model(m).spec for m in ("deepseek-v3", "deepseek-v2", "kimi-k2"))
BLOCK = {"vllm": "[128,128]", "sglang": "[128, 128]"}


def gpu(topology: str):
    return load_topology(topology).gpu


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_deepseek_v3_fp8_tp8_is_tuned_on_h200_not_on_h100(engine):
    e = 256 if engine == "vllm" else 257          # SGLang fuses the shared expert in at ep = 1
    h200 = moe_kernel_config(V3, gpu("8xh200"), Layout(tp=8), engine)
    assert h200.file_name == f"E={e},N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape={BLOCK[engine]}"
    assert h200.shipped
    h100 = moe_kernel_config(V3, gpu("2x8xh100-ib"), Layout(tp=8, pp=2), engine)
    assert h100.file_name == (f"E={e},N=256,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,"
                              f"block_shape={BLOCK[engine]}") and not h100.shipped
    tp16 = moe_kernel_config(V3, gpu("2x8xh100-ib"), Layout(tp=16), engine)
    assert tp16.file_name.startswith(f"E={e},N=128,") and tp16.shipped


def test_where_the_engines_run_another_kernel_there_is_nothing_to_look_up():
    deepep = Layout(tp=1, dp=8, ep=8)
    assert moe_kernel_config(V3, gpu("8xh200"), deepep, "vllm") is None      # a batched DeepEP-format kernel
    assert moe_kernel_config(V3, gpu("8xh200"), deepep, "sglang") is None    # DeepGEMM under DeepEP
    assert moe_kernel_config(V3, gpu("8xb200"), Layout(tp=8), "vllm") is None     # TensorRT-LLM's on Blackwell
    assert moe_kernel_config(V3, gpu("8xb200"), Layout(tp=8), "sglang") is None
    assert moe_kernel_config(V3, gpu("4x8xa100-ib"), Layout(tp=8, pp=4), "vllm") is None   # FP8 Marlin on Ampere


def test_bf16_experts_and_kimi_shapes():
    v2 = moe_kernel_config(V2, gpu("2x8xh100-ib"), Layout(tp=8, pp=2), "vllm")
    assert v2.file_name == "E=160,N=192,device_name=NVIDIA_H100_80GB_HBM3" and not v2.shipped
    kimi = moe_kernel_config(KIMI, gpu("8xh200"), Layout(tp=8), "sglang")
    assert kimi.file_name.startswith("E=384,N=256,") and not kimi.shipped    # Kimi-K2's 384 experts: no fusion
    ep = moe_kernel_config(V2, gpu("2x8xh100-ib"), Layout(tp=1, dp=16, ep=16), "vllm")   # BF16 under DeepEP
    assert ep.file_name.startswith("E=10,N=1536,")


def test_vllm_calls_every_h200_an_h200():
    nvl = replace(gpu("8xh200"), cuda_name="NVIDIA H200 NVL")
    assert "device_name=NVIDIA_H200," in moe_kernel_config(V3, nvl, Layout(tp=8), "vllm").file_name
    assert "device_name=NVIDIA_H200_NVL," in moe_kernel_config(V3, nvl, Layout(tp=8), "sglang").file_name


def test_the_shipped_lists_are_file_names_of_nvidia_devices():
    shipped = _shipped()
    assert len(shipped["vllm"]) > 200 and len(shipped["sglang"]) > 200
    for names in shipped.values():
        assert all(re.fullmatch(r"E=\d+,N=\d+,device_name=NVIDIA_[^,]+(,dtype=\w+)?(,block_shape=\[\d+, ?\d+\])?"
                                r"(,per_channel_quant=True)?", n) for n in names)


def test_the_plan_warns_where_the_config_is_missing(cli):
    import json
    plan = json.loads(cli("plan", "-m", "deepseek-v3", "-t", "2x8xh100-ib", "-l", "tp=8,pp=2", "-l", "tp=16",
                          "-e", "vllm", "--json").stdout)
    warned = {c["label"]: any("ships no tuned fused-MoE config" in w for w in c["warnings"])
              for c in plan["candidates"]}
    assert warned["tp8·pp2"] and not warned["tp16"]
    lines = [w for c in plan["candidates"] if c["label"] == "tp8·pp2" for w in c["warnings"] if "fused-MoE" in w]
    assert lines and all("benchmark_moe.py --model deepseek-ai/DeepSeek-V3 --tp-size 8 --dtype fp8_w8a8" in w
                         for w in lines)


def test_the_tuning_command_names_the_served_folder_quoted(cli, tmp_path):
    """Planned from a snapshot folder, the tuner's --model is that folder (what the engine serves, and where the
    tuner reads config.json), shell-quoted whatever its name."""
    import json
    import shlex
    folder = tmp_path / "it's $HOME \"q\""
    folder.mkdir()
    (folder / "config.json").write_text(open("tests/fixtures/hf/DeepSeek-V3/config.json").read())
    plan = json.loads(cli("plan", "-m", str(folder), "-t", "2x8xh100-ib", "-l", "tp=8,pp=2", "-e", "vllm",
                          "--json").stdout)
    lines = [w for c in plan["candidates"] for w in c["warnings"] if "fused-MoE" in w]
    assert lines and all(f"--model {shlex.quote(str(folder))} --tp-size 8" in w for w in lines)
