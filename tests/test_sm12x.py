"""RTX PRO 6000 Blackwell (sm120): a Blackwell the engines keep apart from B200's sm10x. Only Triton MLA (and SGLang's
FlashInfer) run there, vLLM captures 512-token graphs, and what the engines run for sparse and compressed attention
there is refused by name, not priced as the sm10x kernels (issue 20)."""

from __future__ import annotations

import json

import pytest

from mla_planner.engines.cuda_graphs import vllm_default_capture_tokens
from mla_planner.engines.parser.check import check_command
from mla_planner.launch.build import build, launch_inputs
from mla_planner.search.planfile_read import read_plan
from mla_planner.specs.topology import load_topology

SM10X_ONLY = ("FLASHINFER_MLA", "CUTLASS_MLA", "FLASHMLA", "FLASH_ATTN_MLA", "trtllm_mla", "fa3", "flashmla")


def test_the_gpu_is_its_own_blackwell_family():
    gpu = load_topology("8xrtxpro6000").gpu
    assert (gpu.arch_id, gpu.arch, gpu.vendor) == ("sm120", "blackwell-sm12x", "nvidia")
    assert load_topology("8xb200").gpu.arch == "blackwell"
    assert vllm_default_capture_tokens(gpu) == 512 < vllm_default_capture_tokens(load_topology("8xb200").gpu)
    assert gpu.memory_bytes == 101_972_967_424 and gpu.nvlink_bytes_per_s == 0


@pytest.mark.parametrize("engine, backends", [("vllm", {"TRITON_MLA"}), ("sglang", {"triton", "flashinfer"})])
def test_deepseek_r1_plans_and_emits_with_sm12x_backends_only(cli, tmp_path, engine, backends):
    r = cli("plan", "-m", "deepseek-r1", "-t", "8xrtxpro6000", "-e", engine, "--json")
    assert r.exit_code in (0, 1), r.output
    plan = json.loads(r.stdout)
    assert plan["candidates"]
    assert {c["knobs"]["attention_backend"] for c in plan["candidates"]} <= backends
    path = tmp_path / "plan.json"
    path.write_text(r.stdout)
    out = tmp_path / "out"
    assert cli("emit", "-p", str(path), "-o", str(out)).exit_code == 0
    script = (out / "node-0.sh").read_text()
    assert not any(f"--attention-backend {name} " in script + " " for name in SM10X_ONLY), script
    saved = read_plan(path)
    for c in build(launch_inputs(saved, saved.candidates[0], "native"), engine):
        if c.runs_engine:
            assert check_command(c.engine_args, engine, "sm120",
                                 model_max_len=saved.spec.max_position_embeddings) == [], c.argv


@pytest.mark.parametrize("engine, argv, words", [
    ("vllm", ["vllm", "serve", "deepseek-ai/DeepSeek-R1", "-tp", "8", "--attention-backend", "FLASHINFER_MLA"],
     "FLASHINFER_MLA does not run on blackwell-sm12x (sm120); it needs blackwell (sm10x"),
    ("sglang", ["python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-R1", "--tp", "8",
                "--attention-backend", "fa3"], "fa3 does not run on blackwell-sm12x (sm120); it needs hopper"),
    ("sglang", ["python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-R1", "--tp", "8",
                "--attention-backend", "trtllm_mla"], "FlashInfer's sm12x kernel behind it (XQA)"),
])
def test_lint_flags_an_sm10x_backend_on_sm120(cli, engine, argv, words):
    r = cli("lint", "-m", "deepseek-r1", "-t", "8xrtxpro6000", "--json", "--", *argv)
    findings = json.loads(r.stdout)["findings"]
    assert r.exit_code == 1 and any(f["level"] == "error" and words in f["text"] for f in findings), findings


@pytest.mark.parametrize("model, words", [("deepseek-v3.2", "FLASHINFER_MLA_SPARSE_SM120"),
                                          ("glm-5", "flashinfer_sparse_mla"),
                                          ("deepseek-v4-flash", "FLASHINFER_MLA_SPARSE_DSV4")])
@pytest.mark.parametrize("command", [["plan"], ["memory", "--tp", "8"], ["lint", "--", "vllm", "serve", "x", "-tp", "8"]])
def test_attention_the_planner_does_not_model_on_sm12x_is_refused_in_one_line(cli, model, words, command):
    """Not a misfit, not an engine refusal: the engines run these there, the planner has no model of it yet."""
    where = command.index("--") if "--" in command else len(command)
    r = cli(*command[:where], "-m", model, "-t", "8xrtxpro6000", *command[where:])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert "does not model yet" in r.output and words in r.output and "refuses to start" not in r.output
