"""Launch artefacts: flag mapping per engine, network env, layer split, placement, GPU-count guard, the
single-node one-liner and the MoE all-to-all the engines are told to run. The folder writer:
test_launch_folder.py; the `emit` command: test_launch_emit.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from mla_planner.engines.parser.check import check_command
from launch_cases import make_plan

from mla_planner.core.errors import PlanError
from mla_planner.launch.build import build, launch_inputs, single_node_command
from mla_planner.launch.claims import check_gpu_counts
from mla_planner.launch.emit import emit_plan
from mla_planner.launch.env import network_env, partition_env
from mla_planner.launch.placement import place
from mla_planner.search.candidate import CandidateMemory
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology


def commands(topology, layout, engine="vllm", mode="native", **knobs):
    plan = make_plan(topology, layout, Knobs(engine=engine, **knobs))
    return build(launch_inputs(plan, plan.candidates[0], mode), engine)


def flag(argv, name):
    return argv[argv.index(name) + 1]


# vLLM ---------------------------------------------------------------------------------------------

def test_vllm_seed_native_multinode_ranks_and_headless():
    head, worker = commands("2x8xh100-ib", Layout(tp=8, pp=2))
    for rank, c in enumerate((head, worker)):
        assert c.argv[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V3"]
        assert flag(c.argv, "--tensor-parallel-size") == "8" and flag(c.argv, "--pipeline-parallel-size") == "2"
        assert flag(c.argv, "--nnodes") == "2" and flag(c.argv, "--node-rank") == str(rank)
        assert flag(c.argv, "--master-addr") == "${HEAD_IP}" and c.gpus == 8
    assert "--headless" not in head.argv and "--port" in head.argv
    assert "--headless" in worker.argv and "--port" not in worker.argv


def test_vllm_dp_ep_recipe_rank_arithmetic():
    head, worker = commands("2x8xh200-ib", Layout(tp=1, dp=16, ep=16))
    for c in (head, worker):
        assert flag(c.argv, "--data-parallel-size") == "16" and flag(c.argv, "--data-parallel-size-local") == "8"
        assert "--enable-expert-parallel" in c.argv and flag(c.argv, "--data-parallel-rpc-port") == "13345"
    assert "--data-parallel-start-rank" not in head.argv
    assert flag(worker.argv, "--data-parallel-start-rank") == "8" and "--headless" in worker.argv


def test_vllm_knob_flags():
    (c,) = commands("8xh200", Layout(tp=8), kv_cache_dtype="fp8", prefix_caching=False, cuda_graphs=False, mtp=True,
                    attention_backend="FLASHMLA", block_size=64, max_num_seqs=32, memory_fraction=0.85)
    a = c.argv
    assert flag(a, "--kv-cache-dtype") == "fp8" and "--no-enable-prefix-caching" in a and "--enforce-eager" in a
    assert json.loads(flag(a, "--speculative-config")) == {"method": "mtp", "num_speculative_tokens": 1}
    assert flag(a, "--attention-backend") == "FLASHMLA" and flag(a, "--gpu-memory-utilization") == "0.85"
    assert check_command(c.engine_args, "vllm", "sm90", model_max_len=163840) == []
    (d,) = commands("8xh200", Layout(tp=8))
    assert flag(d.argv, "--kv-cache-dtype") == "auto" and "--enforce-eager" not in d.argv
    assert "--attention-backend" not in d.argv and "--enable-prefix-caching" in d.argv


@pytest.mark.parametrize("layout, words", [
    (Layout(tp=8, ep=4), r"always tp\*dp"),
    (Layout(tp=8, pp=2, dp=2, ep=16), "must fit whole on a node"),
    (Layout(tp=8, kv_layout="latent-sharded"), "latent-sharded KV layout has no flag"),
])
def test_vllm_inexpressible_layouts(layout, words):
    with pytest.raises(PlanError, match=words):
        commands("4x8xh800-roce", layout)


def test_ray_mode():
    head, worker = commands("2x8xh100-ib", Layout(tp=8, pp=2), mode="ray")
    assert head.role == "ray-head" and head.cluster_gpus == 16 and head.before[0][:3] == ["ray", "start", "--head"]
    assert flag(head.argv, "--distributed-executor-backend") == "ray" and "--nnodes" not in head.argv
    assert worker.argv[:2] == ["ray", "start"] and "--block" in worker.argv
    (dp_head, _) = commands("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), mode="ray")
    assert flag(dp_head.argv, "--data-parallel-backend") == "ray"
    assert flag(dp_head.argv, "--data-parallel-address") == "${VLLM_HOST_IP}"
    with pytest.raises(PlanError, match="fits one node"):
        commands("8xh200", Layout(tp=8), mode="ray")
    with pytest.raises(PlanError, match="ray is vLLM's form"):
        commands("2x8xh100-ib", Layout(tp=8, pp=2), engine="sglang", mode="ray")


# SGLang -------------------------------------------------------------------------------------------

def test_sglang_dp_attention_sizes_are_totals():
    head, worker = commands("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), engine="sglang", max_num_seqs=64,
                            max_num_batched_tokens=4096)
    a = head.argv
    assert a[:3] == ["python3", "-m", "sglang.launch_server"]
    assert flag(a, "--tp-size") == "16" and flag(a, "--attn-dp-size") == "16" and flag(a, "--ep-size") == "16"
    assert flag(a, "--moe-a2a-backend") == "deepep" and "--enable-dp-attention" not in a
    assert flag(a, "--max-running-requests") == str(64 * 16) and flag(a, "--chunked-prefill-size") == str(4096 * 16)
    assert flag(a, "--dist-init-addr") == "${HEAD_IP}:5000" and flag(a, "--port") == "30000"
    assert flag(worker.argv, "--node-rank") == "1" and "--port" not in worker.argv
    drop = {"--node-rank", "--host", "--port"}
    same = [[w for i, w in enumerate(c.argv) if w not in drop and c.argv[i - 1] not in drop] for c in (head, worker)]
    assert same[0] == same[1]   # one command for every node, only the rank (and the HTTP server) differ


def test_sglang_knob_flags():
    (c,) = commands("8xh200", Layout(tp=8), engine="sglang", kv_cache_dtype="fp8", prefix_caching=False,
                    cuda_graphs=False, mtp=True, attention_backend="flashmla", block_size=64)
    a = c.argv
    assert flag(a, "--kv-cache-dtype") == "fp8_e4m3" and "--disable-radix-cache" in a
    assert flag(a, "--cuda-graph-backend-decode") == "disabled" and "--disable-cuda-graph" not in a
    assert flag(a, "--speculative-algorithm") == "EAGLE" and flag(a, "--page-size") == "64"
    assert check_command(c.engine_args, "sglang", "sm90") == []
    with pytest.raises(PlanError, match="no 'fp8_ds_mla'"):
        commands("8xh200", Layout(tp=8), engine="sglang", kv_cache_dtype="fp8_ds_mla")


def test_engine_of_knobs_must_match():
    plan = make_plan("8xh200", Layout(tp=8), Knobs(engine="vllm"))
    with pytest.raises(PlanError, match="chosen for vllm"):
        build(launch_inputs(plan, plan.candidates[0]), "sglang")


def test_attention_backend_checked_against_gpu():
    with pytest.raises(PlanError, match="does not run on blackwell"):
        commands("8xb200", Layout(tp=8), attention_backend="FLASH_ATTN_MLA")


# network env and layer split ----------------------------------------------------------------------

def test_network_env_per_fabric():
    ib = network_env(load_topology("2x8xh100-ib")).env
    assert ib["NCCL_IB_DISABLE"] == "0" and ib["NCCL_SOCKET_IFNAME"] == ib["GLOO_SOCKET_IFNAME"] == "eth0"
    assert ib["NCCL_IB_HCA"].startswith("mlx5_0,") and "NCCL_IB_GID_INDEX" not in ib
    roce = load_topology("2x8xh20-roce")
    roce_default = replace(roce, inter_node=replace(roce.inter_node, ib_gid_index=None))
    env = network_env(roce_default, a2a="deepep").env
    assert env["NCCL_IB_GID_INDEX"] == "3" and env["NVSHMEM_IB_GID_INDEX"] == "3"
    eth = network_env(load_topology("2x8xl40s-eth"))
    assert eth.env["NCCL_IB_DISABLE"] == "1" and "NET/Socket" in eth.notes[0]
    no_if = replace(roce, inter_node=replace(roce.inter_node, socket_ifname=None))
    bare = network_env(no_if)
    assert bare.env["NCCL_SOCKET_IFNAME"] == "^lo,docker,veth" and "GLOO_SOCKET_IFNAME" not in bare.env
    assert "GLOO_SOCKET_IFNAME" in bare.notes[0]
    amd = network_env(load_topology("2x8xmi355x-roce")).env     # the GID index its published RCCL run exported
    assert amd["NCCL_IB_DISABLE"] == "0" and amd["NCCL_IB_GID_INDEX"] == "1"


def test_single_node_instances_get_no_network_env():
    (c,) = commands("8xh100", Layout(tp=8))
    assert not any(k.startswith("NCCL") for k in c.env) and not c.needs


def test_layer_partition_matches_the_engines_own_split():
    assert partition_env("vllm", 61, 4, None) == {"VLLM_PP_LAYER_PARTITION": "15,15,16,15"}   # vLLM PR 46217
    assert partition_env("vllm", 61, 2, None) == {"VLLM_PP_LAYER_PARTITION": "31,30"}
    assert partition_env("sglang", 61, 2, None) == {"SGLANG_PP_LAYER_PARTITION": "30,31"}
    assert partition_env("vllm", 60, 2, None) == {}
    assert partition_env("vllm", 60, 2, (29, 31)) == {"VLLM_PP_LAYER_PARTITION": "29,31"}
    with pytest.raises(PlanError, match="does not split 61 layers"):
        partition_env("vllm", 61, 2, (30, 30))


def test_plan_partition_is_used():
    plan = make_plan("2x8xh100-ib", Layout(tp=8, pp=2), Knobs())
    cand = replace(plan.candidates[0], memory=CandidateMemory(pp_layer_partition=[30, 31]))
    cmds = build(launch_inputs(replace(plan, candidates=[cand]), cand), "vllm")
    assert all(c.env["VLLM_PP_LAYER_PARTITION"] == "30,31" for c in cmds)


# placement and the GPU-count guard ----------------------------------------------------------------

def test_replicas_pack_with_visible_devices_and_own_ports():
    cmds = commands("2x8xh200-ib", Layout(tp=4, replicas=4), engine="sglang")
    assert [(c.node_rank, c.env.get("CUDA_VISIBLE_DEVICES"), c.port) for c in cmds] == [
        (0, "0,1,2,3", 30000), (0, "4,5,6,7", 30010), (1, "0,1,2,3", 30020), (1, "4,5,6,7", 30030)]
    wide = place(Layout(tp=8, pp=2, replicas=2), load_topology("4x8xh800-roce"))
    assert [p.nodes for p in wide] == [(0, 1), (2, 3)]
    with pytest.raises(PlanError, match="needs 32 GPUs"):
        place(Layout(tp=8, pp=2, replicas=2), load_topology("2x8xh100-ib"))


@pytest.mark.parametrize("engine, word, bad", [("vllm", "--tensor-parallel-size", "4"),
                                               ("vllm", "--nnodes", "1"),
                                               ("sglang", "--tp-size", "16")])
def test_gpu_count_guard_catches_a_wrong_flag(engine, word, bad):
    layout, topo = Layout(tp=8, pp=2), load_topology("2x8xh100-ib")
    cmds = commands("2x8xh100-ib", layout, engine=engine)
    check_gpu_counts(engine, cmds, place(layout, topo), layout)   # the real ones pass
    argv = list(cmds[1].argv)
    argv[argv.index(word) + 1] = bad
    with pytest.raises(PlanError, match="bug:"):
        check_gpu_counts(engine, [cmds[0], replace(cmds[1], argv=argv)], place(layout, topo), layout)
    with pytest.raises(PlanError, match="bug:"):
        check_gpu_counts(engine, cmds[:1], place(layout, topo), layout)   # a node left out


# single-node one-liner ----------------------------------------------------------------------------

def test_single_node_command():
    plan = make_plan("8xh200", Layout(tp=4), Knobs())
    line = single_node_command(plan, 1, "vllm")
    assert line.startswith("CUDA_VISIBLE_DEVICES=0,1,2,3 VLLM_ENGINE_READY_TIMEOUT_S=3600 vllm serve "
                           "deepseek-ai/DeepSeek-V3 --tensor-parallel-size 4")   # a 671B load outlasts 600 s
    assert single_node_command(make_plan("2x8xh100-ib", Layout(tp=8, pp=2), Knobs()), 1, "vllm") is None
    assert single_node_command(make_plan("8xh200", Layout(tp=8, ep=4), Knobs()), 1, "vllm") is None
    assert single_node_command(make_plan("8xh200", Layout(tp=8), Knobs(engine="sglang")), 1, "sglang").startswith(
        "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8")


# the MoE all-to-all: what the step model prices is what the engines are told to run -----------------

@pytest.mark.parametrize("topology, layout, expected", [
    ("8xh200", Layout(tp=1, dp=8, ep=8), "deepep_low_latency"),          # inside one node: not pplx (removed)
    ("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), "deepep_low_latency"),   # across nodes
    ("2x8xh200-ib", Layout(tp=2, dp=8, ep=16), "deepep_low_latency"),
    ("8xh200", Layout(tp=8, ep=8), None),                                # no DP: all-reduce, no all-to-all
    ("8xh200", Layout(tp=1, dp=8, ep=1), None),                          # DP without EP: allgather_reducescatter
])
def test_vllm_all2all_backend_matches_the_step_model(topology, layout, expected):
    for c in [c for c in commands(topology, layout) if c.runs_engine]:
        got = flag(c.argv, "--all2all-backend") if "--all2all-backend" in c.argv else None
        assert got == expected
        assert check_command(c.engine_args, "vllm", "sm90", model_max_len=163840) == []


@pytest.mark.parametrize("topology, layout, expected", [
    ("8xh200", Layout(tp=1, dp=8, ep=8), "deepep"),           # inside one node too (was: none)
    ("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), "deepep"),
    ("2x8xh100-ib", Layout(tp=8, pp=2, ep=8), None),          # multi-node by PP, no DP: all-reduce (was: deepep)
    ("8xh200", Layout(tp=2, dp=4, ep=4), None),               # ep < tp*dp: not what the model prices as DeepEP
])
def test_sglang_moe_a2a_backend_matches_the_step_model(topology, layout, expected):
    for c in commands(topology, layout, engine="sglang"):
        got = flag(c.argv, "--moe-a2a-backend") if "--moe-a2a-backend" in c.argv else None
        assert got == expected
        assert check_command(c.engine_args, "sglang", "sm90") == []


def test_sglang_deepep_dispatch_holds_the_decode_batch():
    (c,) = commands("8xh200", Layout(tp=1, dp=8, ep=8), engine="sglang", max_num_seqs=64)
    assert "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK" not in c.env   # 64 <= SGLang's 128
    (c,) = commands("8xh200", Layout(tp=1, dp=8, ep=8), engine="sglang", max_num_seqs=200, mtp=True)
    assert c.env["SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"] == "400"   # 2 tokens per sequence with MTP
    with pytest.raises(PlanError, match="at most 1024"):
        commands("8xh200", Layout(tp=1, dp=8, ep=8), engine="sglang", max_num_seqs=600, mtp=True)


@pytest.mark.parametrize("engine, flag_text, gib", [("vllm", "--all2all-backend deepep_low_latency", "14.2"),
                                                   ("sglang", "--moe-a2a-backend deepep", "1.8")])
def test_deepep_readme_install_buffer_and_fallback(tmp_path, engine, flag_text, gib):
    knobs = Knobs(engine=engine, max_num_batched_tokens=1024, max_num_seqs=64)
    plan = make_plan("8xh200", Layout(tp=1, dp=8, ep=8), knobs)
    emit_plan(plan, 1, engine, tmp_path / "out")
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "## Expert-parallel all-to-all (DeepEP)" in readme and "IBGDA-enabled NVSHMEM" in readme
    assert f"If DeepEP cannot be brought up, delete `{flag_text}` from every node-K.sh" in readme
    # DeepEP LowLatencyLayout: 4 x 256 experts x tokens x (2 x 7168 + 4 x 56) B = 14.22 GiB for vLLM's 1024 tokens
    # (--max-num-batched-tokens), 1.78 GiB for SGLang's default 128
    assert f"about {gib} GiB per GPU" in readme
    assert f"# MoE all-to-all: {flag_text}" in (tmp_path / "out" / "node-0.sh").read_text()
    plain = make_plan("8xh200", Layout(tp=8), Knobs(engine=engine))
    emit_plan(plain, 1, engine, tmp_path / "plain")
    assert "DeepEP" not in (tmp_path / "plain" / "README.md").read_text()
