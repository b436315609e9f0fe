"""DeepSeek-V4 under DP attention + EP on AMD (issue 20): the engines' MoRI all-to-all as each builds it for V4's
MXFP4 experts (engines.dispatch). vLLM 0.33 dispatches them in BF16 (its only ROCm MXFP4 MoE backend is W4A16) on
MoRI's EPv1 heap, outside its budget; SGLang 0.5.23 dispatches them in FP4 and, with the EP group inside one host,
builds MoRI's EPv2 op, whose arena is made while the weights load and so comes out of its memory fraction; across
hosts it falls back to EPv1 on the heap. Commands pass the engines' parsers and lint clean."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from mla_planner.engines.dispatch import dispatch_format, scale_bytes_per_token, uses_mori_epv2, wire_bytes_per_value
from mla_planner.engines.parser.check import check_command
from mla_planner.memory.terms import mori_epv2_arena_bytes, mori_heap_bytes
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

V4 = "deepseek-v4-flash"
DP8 = ["--tp", "1", "--dp", "8", "--ep", "8"]


def _terms(cli, model, topo, engine, layout=DP8):
    r = cli("memory", "-m", model, "-t", topo, "-e", engine, *layout, "--json")
    assert r.exit_code == 0, r.output
    mem = json.loads(r.stdout)
    return (mem["per_gpu"][0] if "per_gpu" in mem else mem["stages"][0])["terms"]


def test_each_engine_dispatches_in_its_own_format():
    """FP8 experts go out in FP8 on both engines and on DeepEP; V4's MXFP4 experts in BF16 on vLLM (W4A16 on ROCm),
    in FP4 on SGLang; int4 experts (Kimi-K2.5, W4A16) in BF16."""
    mi355x, h200 = load_topology("8xmi355x").gpu, load_topology("8xh200").gpu
    v4, r1, kimi = (load_model(m).spec for m in (V4, "deepseek-r1", "kimi-k2.5"))
    assert [dispatch_format(e, r1, mi355x) for e in ("vllm", "sglang")] == ["fp8", "fp8"]
    assert [dispatch_format(e, v4, mi355x) for e in ("vllm", "sglang")] == ["bf16", "fp4"]
    assert dispatch_format("vllm", kimi, mi355x) == "bf16"
    assert dispatch_format("sglang", v4, h200) == "fp8"              # DeepEP: FP8 where the GPU has it
    # FP8's fp32 per 128 and FP4's e8m0 per 32 are the same scale bytes per token
    assert scale_bytes_per_token("fp8", 4096) == scale_bytes_per_token("fp4", 4096) == 128
    assert (wire_bytes_per_value("fp4"), wire_bytes_per_value("bf16")) == (0.5 + 1 / 32, 2.0)


def test_epv2_arena_follows_sglangs_own_bound():
    """SGLang's _epv2_arena_bytes for V4-Flash (hidden 4096, top-6) at EP8 and 4,096 tokens per rank: 32,768
    receivable rows of 2,048 B FP4 + 8,192 B BF16 combine + 128 B of scales + 6 x 8 + 4, plus 12 B a rank and
    twelve 256-byte alignments; MoRI's EPv1 heap for the same op with FP4's scales."""
    spec = load_model(V4).spec
    assert mori_epv2_arena_bytes(spec, 8, 4096, "fp4") == 32768 * (2048 + 8192 + 128 + 52) + 8 * 12 + 12 * 256
    assert mori_heap_bytes(spec, 8, 4096, "fp4") - mori_heap_bytes(spec, 8, 4096, "bf16") == 32768 * 5 * 128


def test_sglang_charges_the_epv2_arena_and_vllm_the_heap(cli):
    """SGLang: a `mori_epv2_arena` term and no heap inside one host; EPv1's heap across two hosts (EP16). vLLM: the
    heap outside its budget, sized for BF16 dispatch."""
    sglang = _terms(cli, V4, "8xmi355x", "sglang")
    assert sglang["mori_epv2_arena"] > 0 and "mori_heap" not in sglang and "deepep_buffer" not in sglang
    vllm = _terms(cli, V4, "8xmi355x", "vllm")
    assert vllm["mori_heap"] >= 2 * 2**30 and "mori_epv2_arena" not in vllm
    wide = _terms(cli, V4, "2x8xmi355x-roce", "sglang", ["--tp", "1", "--dp", "16", "--ep", "16"])
    assert wide["mori_heap"] >= 2 * 2**30 and "mori_epv2_arena" not in wide
    assert not uses_mori_epv2("sglang", load_model(V4).spec, Layout(tp=1, dp=16, ep=16),
                              load_topology("2x8xmi355x-roce").gpu)


def test_fp4_dispatch_is_priced_cheaper_than_bf16():
    """The step prices SGLang's FP4 dispatch of V4's tokens below vLLM's BF16 one (about a quarter of the bytes);
    the BF16 combine costs both the same."""
    from mla_planner.perf.layer_comm import ffn_comm
    from mla_planner.perf.layer_work import Batch
    from mla_planner.specs.calibration import load_calibration
    topo = load_topology("8xmi355x")
    spec, calib, batch = load_model(V4).spec, load_calibration(None, topo), Batch(0, 0, 8192, 0)
    vllm, sglang = (ffn_comm(spec, Layout(tp=1, dp=8, ep=8), batch, topo, calib, True, e) for e in ("vllm", "sglang"))
    assert sglang["moe.combine"] == vllm["moe.combine"]
    assert sglang["moe.dispatch"] < 0.5 * vllm["moe.dispatch"]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_v4_dp_ep_on_mi355x_emits_commands_the_engines_accept(cli, tmp_path, engine):
    """plan --emit for V4 at DP8 + EP8 on 8 x MI355X: the MoRI flag, the engine's parser accepts every word, lint finds
    no error; SGLang's script sets no MoRI heap (EPv2 does not use it) and its README names the arena; vLLM's sets the
    heap the memory model priced."""
    out = tmp_path / "out"
    r = cli("plan", "-m", V4, "-t", "8xmi355x", "-e", engine, "-l", "tp=1,dp=8,ep=8", "--emit", str(out))
    assert r.exit_code in (0, 1), r.output
    script, readme = (out / "node-0.sh").read_text(), (out / "README.md").read_text()
    argv = shlex.split(script[script.index("exec ") + 5:].replace("\\\n", " "))
    assert {"mori", "mori_low_latency"} & set(argv) and "deepep" not in " ".join(argv)
    args = argv[2:] if engine == "vllm" else argv[3:]
    assert check_command(args, engine, "gfx950", model_max_len=load_model(V4).spec.max_position_embeddings) == []
    env = re.findall(r"^export (\S+)=(\S+)$", script, re.M)
    if engine == "sglang":
        assert "MORI_SHMEM_HEAP_SIZE" not in dict(env) and "EPv2" in readme and "mori_epv2_arena" in readme
    else:
        assert dict(env)["MORI_SHMEM_HEAP_SIZE"].endswith("G") and "mori_heap" in readme
    lint = json.loads(cli("lint", "-m", V4, "-t", "8xmi355x", "--json", "--", *[f"{k}={v}" for k, v in env],
                          *argv).stdout)
    assert not [f for f in lint["findings"] if f["level"] == "error"], lint["findings"]


def test_sglangs_epv1_combines_fp4_tokens_in_fp8():
    """Across hosts (EP16) SGLang falls back to MoRI's EPv1, whose default combine for FP4 weights is MoRI's FP8
    blockwise one (1 B a value and 56 scales a token); inside a host EPv2 combines in BF16, as vLLM always does."""
    from mla_planner.engines.dispatch import combine_format, combine_wire_bytes_per_value
    spec, wide, one = load_model(V4).spec, load_topology("2x8xmi355x-roce"), load_topology("8xmi355x")
    assert combine_format("sglang", spec, Layout(tp=1, dp=16, ep=16), wide.gpu) == "fp8"
    assert combine_format("sglang", spec, Layout(tp=1, dp=8, ep=8), one.gpu) == "bf16"
    assert combine_format("vllm", spec, Layout(tp=1, dp=16, ep=16), wide.gpu) == "bf16"
    assert combine_wire_bytes_per_value("fp8", 4096) == 1 + 56 * 4 / 4096


@pytest.mark.parametrize("env, warned", [([], False), (["SGLANG_MORI_EP_V2=false"], True),
                                         (["MORI_ENABLE_SDMA=1"], True)])
def test_lint_asks_for_a_heap_only_where_sglang_runs_epv1(cli, env, warned):
    """A V4 SGLang command inside one host runs EPv2 (no heap to size), --ep-size given or not (SGLang sets it to the
    stage's for MoRI); turned off, or with MoRI's SDMA path (EPv1 only), its heap is checked: at 16,384 tokens per
    rank it needs 5.1 GiB, above MoRI's 2 GiB default."""
    argv = ["SGLANG_USE_AITER=1", "SGLANG_MORI_NUM_MAX_DISPATCH_TOKENS_PER_RANK=16384", *env, "python", "-m",
            "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V4-Flash", "--tp", "8", "--dp", "8",
            "--enable-dp-attention", "--moe-a2a-backend", "mori", "--chunked-prefill-size", "131072"]
    findings = json.loads(cli("lint", "-m", V4, "-t", "8xmi355x", "--json", "--", *argv).stdout)["findings"]
    assert any(f["flag"] == "MORI_SHMEM_HEAP_SIZE" for f in findings) == warned, findings


def test_disaggregated_pools_on_epv1_and_epv2_each_get_their_section(cli, tmp_path):
    """With prefill across two hosts (EPv1, its heap) and decode inside one (EPv2, its arena), the README says each
    pool's own memory and combine format, not one pool's for both."""
    import yaml
    topo = yaml.safe_load(open("topologies/2x8xmi355x-roce.yaml"))
    topo["nodes"], topo["name"] = 3, "3x8xmi355x-roce"
    path = tmp_path / "3x8.yaml"
    path.write_text(yaml.safe_dump(topo))
    r = cli("plan", "-m", V4, "-t", str(path), "-e", "sglang", "--json")
    assert r.exit_code in (0, 1), r.output
    plan = tmp_path / "plan.json"
    plan.write_text(r.stdout)
    pools = [i for i, d in enumerate(json.loads(r.stdout)["disaggregated"], 1)
             if sorted(p["layout"]["ep"] for p in d["pools"]) == [8, 16]]
    assert pools, "no deployment with one pool across hosts and one inside"
    out = tmp_path / "d"
    assert cli("emit", "--plan", str(plan), "--disaggregated", str(pools[0]), "--out", str(out)).exit_code == 0
    readme = (out / "README.md").read_text()
    assert "MoRI, prefill pool" in readme and "MoRI, decode pool" in readme
    assert "`mori_heap` term" in readme and "`mori_epv2_arena` term" in readme
