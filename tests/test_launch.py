"""Launch artefacts: flag mapping per engine, network env, layer split, placement, GPU-count guard,
the folder writer and the `emit` command."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from engine_check import check_command
from launch_cases import bash_syntax_ok, make_plan, scripts

from mla_planner.core.errors import PlanError
from mla_planner.launch.build import build, launch_inputs
from mla_planner.launch.build import single_node_command
from mla_planner.launch.claims import check_gpu_counts
from mla_planner.launch.emit import emit_plan
from mla_planner.launch.env import network_env, partition_env
from mla_planner.launch.outdir import MANIFEST, FolderNotEmpty, write_folder
from mla_planner.launch.placement import place
from mla_planner.search.candidate import CandidateMemory
from mla_planner.search.planfile import plan_to_dict
from mla_planner.specs.knobs import Knobs, Workload
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
    roce_default = roce.model_copy(update={"inter_node": roce.inter_node.model_copy(update={"ib_gid_index": None})})
    env = network_env(roce_default, deepep=True).env
    assert env["NCCL_IB_GID_INDEX"] == "3" and env["NVSHMEM_IB_GID_INDEX"] == "3"
    eth = network_env(load_topology("2x8xl40s-eth"))
    assert eth.env["NCCL_IB_DISABLE"] == "1" and "NET/Socket" in eth.notes[0]
    no_if = roce.model_copy(update={"inter_node": roce.inter_node.model_copy(update={"socket_ifname": None})})
    bare = network_env(no_if)
    assert bare.env["NCCL_SOCKET_IFNAME"] == "^lo,docker,veth" and "GLOO_SOCKET_IFNAME" not in bare.env
    assert "GLOO_SOCKET_IFNAME" in bare.notes[0]


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


# the folder ---------------------------------------------------------------------------------------

def test_emit_folder_files_and_syntax(tmp_path):
    plan = make_plan("2x8xh100-ib", Layout(tp=8, pp=2), Knobs())
    paths = emit_plan(plan, 1, "vllm", tmp_path / "out")
    assert [p.name for p in paths] == ["node-0.sh", "node-1.sh", "bench.sh", "README.md", "plan.json"]
    for p in scripts(tmp_path / "out"):
        assert p.stat().st_mode & 0o111 and bash_syntax_ok(p)
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "vLLM 0.33.0" in readme and "/health" in readme and "NET/IB" in readme and "NET/Socket" in readme


def test_write_folder_refuses_non_empty_and_force_replaces_wholesale(tmp_path):
    out = tmp_path / "out"
    write_folder({"node-0.sh": ("a", True), "node-1.sh": ("b", True), "README.md": ("r", False)}, out)
    with pytest.raises(FolderNotEmpty, match="is not empty; choose an empty folder"):
        write_folder({"node-0.sh": ("c", True)}, out)
    write_folder({"node-0.sh": ("c", True)}, out, force=True)
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "node-0.sh"]   # stale node-1.sh and README gone
    assert (out / "node-0.sh").read_text() == "c" and not list(tmp_path.glob(".out*"))


def test_force_refuses_a_folder_with_files_emit_did_not_write(tmp_path):
    out = tmp_path / "out"
    write_folder({"node-0.sh": ("a", True)}, out)
    (out / "my-notes.txt").write_text("keep")
    with pytest.raises(PlanError, match=r"files that emit did not write \(my-notes.txt\)"):
        write_folder({"node-0.sh": ("c", True)}, out, force=True)
    assert (out / "my-notes.txt").read_text() == "keep" and (out / "node-0.sh").read_text() == "a"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("not written by emit")   # no manifest: nothing in it is emit's
    with pytest.raises(PlanError, match=r"did not write \(README.md\)"):
        write_folder({"README.md": ("x", False)}, mine, force=True)
    assert (mine / "README.md").read_text() == "not written by emit"


def test_force_never_deletes_a_folder_or_link_that_carries_an_emitted_name(tmp_path):
    """A user's folder (or symlink) named like an emitted file is not emit's: --force refuses and keeps it."""
    out = tmp_path / "out"
    write_folder({"node-0.sh": ("a", True), "bench.sh": ("b", True)}, out)
    (out / "bench.sh").unlink()
    (out / "bench.sh").mkdir()
    (out / "bench.sh" / "data.txt").write_text("precious")
    with pytest.raises(PlanError, match=r"did not write \(bench.sh\)"):
        write_folder({"node-0.sh": ("c", True)}, out, force=True)
    assert (out / "bench.sh" / "data.txt").read_text() == "precious"
    (tmp_path / "elsewhere.txt").write_text("theirs")
    (out / "node-0.sh").unlink()
    (out / "node-0.sh").symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(PlanError, match="did not write"):
        write_folder({"node-0.sh": ("c", True)}, out, force=True)
    assert (tmp_path / "elsewhere.txt").read_text() == "theirs" and (out / "node-0.sh").is_symlink()


def test_force_leaves_no_stale_node_scripts(tmp_path):
    four = make_plan("4x8xh800-roce", Layout(tp=8, pp=4), Knobs())
    two = make_plan("4x8xh800-roce", Layout(tp=8, pp=2), Knobs())
    emit_plan(four, 1, "vllm", tmp_path / "out")
    assert (tmp_path / "out" / "node-3.sh").exists()
    emit_plan(two, 1, "vllm", tmp_path / "out", force=True)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        MANIFEST, "README.md", "bench.sh", "node-0.sh", "node-1.sh", "plan.json"]


def test_write_folder_into_an_existing_empty_folder_and_the_cwd(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    write_folder({"node-0.sh": ("a", True)}, tmp_path / "empty")
    assert (tmp_path / "empty" / "node-0.sh").read_text() == "a"
    monkeypatch.chdir(tmp_path / "empty")
    write_folder({"node-0.sh": ("b", True)}, Path("."), force=True)   # replaced in place, the cwd survives
    assert Path("node-0.sh").read_text() == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


@pytest.mark.parametrize("where, words", [("/proc/mla-plan-test/out", "cannot write the launch folder there"),
                                          ("{tmp}/a-file/out", "{tmp}/a-file is a file, not a folder")])
def test_write_folder_os_errors_are_one_line(tmp_path, where, words):
    (tmp_path / "a-file").write_text("x")
    target = Path(where.format(tmp=tmp_path))
    with pytest.raises(PlanError, match=f"^{target}: {words.format(tmp=tmp_path)}"):
        write_folder({"node-0.sh": ("a", True)}, target)


def test_write_folder_is_all_or_nothing(tmp_path):
    with pytest.raises(TypeError):
        write_folder({"node-0.sh": ("fine", True), "node-1.sh": (None, True)}, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []   # neither the folder nor a temporary one is left


def test_model_path_that_looks_like_a_flag_is_refused(tmp_path):
    plan = make_plan("8xh200", Layout(tp=8), Knobs())
    with pytest.raises(PlanError, match="starts with '-'"):
        emit_plan(plan, 1, "vllm", tmp_path / "out", model_path="--help")


def test_head_address_needs_a_single_head(tmp_path):
    plan = make_plan("4x8xh800-roce", Layout(tp=8, pp=2, replicas=2), Knobs())
    with pytest.raises(PlanError, match="names one head"):
        emit_plan(plan, 1, "vllm", tmp_path / "out", head_address="10.0.0.1")


def test_bench_loads_one_replica_and_says_how_to_load_all(tmp_path):
    """bench.sh talks to one endpoint (node 0's server), so by default it offers one replica's share of the
    requests; the header and README give the total for a balancer in front of every replica."""
    plan = make_plan("4x8xa100-ib", Layout(tp=16, replicas=2), Knobs(max_num_seqs=72))
    emit_plan(plan, 1, "vllm", tmp_path / "out")
    bench, readme = (tmp_path / "out" / "bench.sh").read_text(), (tmp_path / "out" / "README.md").read_text()
    assert "--max-concurrency 72 " in bench.replace(" \\\n    ", " ") and "144 requests in flight in all" in bench
    assert "raise `--max-concurrency` to 144" in readme


def test_emit_cli(cli, tmp_path):
    plan = make_plan("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), Knobs(engine="sglang"), Workload(concurrency=64))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan_to_dict(plan)))
    out = tmp_path / "launch"
    result = cli("emit", "--plan", str(plan_file), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "--attn-dp-size 16" in (out / "node-1.sh").read_text().replace(" \\\n    ", " ")
    assert "--max-concurrency 64" in (out / "bench.sh").read_text()
    again = cli("emit", "--plan", str(plan_file), "--out", str(out))
    assert again.exit_code == 2 and "--force" in again.output
    assert cli("emit", "--plan", str(plan_file), "--out", str(out), "--force").exit_code == 0
    ray = cli("emit", "--plan", str(plan_file), "--out", str(tmp_path / "x"), "--mode", "ray")
    assert ray.exit_code == 2 and "vLLM's form" in ray.output
    wrong = cli("emit", "--plan", str(plan_file), "--out", str(tmp_path / "y"), "--engine", "vllm")
    assert wrong.exit_code == 2 and "this plan has no vllm candidate; re-run `mla-plan plan --engine vllm`" in wrong.output


# the emit command: engine choice, output folder errors, --json -------------------------------------

def _plan_file(tmp_path, plan) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_dict(plan)))
    return path


def _mixed_plan():
    """Candidates #1 vLLM, #2 and #3 SGLang (a plan searched over both engines)."""
    plan = make_plan("8xh200", Layout(tp=8), Knobs(engine="vllm", attention_backend="FLASHMLA"))
    sg = [replace(plan.candidates[0], knobs=Knobs(engine="sglang", attention_backend="flashmla", max_num_seqs=n))
          for n in (64, 32)]
    return replace(plan, candidates=plan.candidates + sg)


def test_emit_refuses_a_candidate_planned_for_the_other_engine(tmp_path):
    plan = _mixed_plan()
    with pytest.raises(PlanError) as err:
        emit_plan(plan, 1, "sglang", tmp_path / "out")
    assert str(err.value) == ("emit: candidate 1 was planned for vllm (its backend, block size and memory fraction "
                              "are vllm's); choose a sglang candidate (#2, #3 in this plan) or re-run "
                              "`mla-plan plan --engine sglang`")
    only_vllm = replace(plan, candidates=plan.candidates[:1])
    with pytest.raises(PlanError, match="this plan has no sglang candidate; re-run `mla-plan plan --engine sglang`"):
        emit_plan(only_vllm, 1, "sglang", tmp_path / "out")
    with pytest.raises(PlanError, match="engine 'tgi' is not one of vllm, sglang"):
        emit_plan(plan, 1, "tgi", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_emit_engine_defaults_to_the_candidates_own(cli, tmp_path):
    plan_file = _plan_file(tmp_path, _mixed_plan())
    done = cli("emit", "--plan", str(plan_file), "--candidate", "3", "--out", str(tmp_path / "sg"))
    assert done.exit_code == 0, done.output
    assert "--max-running-requests 32" in (tmp_path / "sg" / "node-0.sh").read_text()
    wrong = cli("emit", "--plan", str(plan_file), "--candidate", "1", "--engine", "sglang",
                "--out", str(tmp_path / "x"))
    assert wrong.exit_code == 2 and "(#2, #3 in this plan)" in wrong.output and "Traceback" not in wrong.output


def test_emit_engine_alone_picks_that_engines_best(cli, tmp_path):
    plan_file = _plan_file(tmp_path, _mixed_plan())
    done = cli("emit", "--plan", str(plan_file), "--engine", "sglang", "--out", str(tmp_path / "sg"), "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["candidate"] == 2 and json.loads(done.stdout)["engine"] == "sglang"
    assert "sglang.launch_server" in (tmp_path / "sg" / "node-0.sh").read_text()
    (tmp_path / "v").mkdir()
    only_vllm = _plan_file(tmp_path / "v", replace(_mixed_plan(), candidates=_mixed_plan().candidates[:1]))
    none = cli("emit", "--plan", str(only_vllm), "--engine", "sglang", "--out", str(tmp_path / "x"))
    assert none.exit_code == 2 and "this plan has no sglang candidate" in none.output


@pytest.mark.parametrize("out, words", [("", "--out is empty"),
                                        ("/proc/mla-plan-test", "/proc/mla-plan-test: cannot write the launch folder"),
                                        ("{tmp}/plan.json/out", "plan.json is a file, not a folder")])
def test_emit_cli_output_folder_errors_are_one_line(cli, tmp_path, out, words):
    plan_file = _plan_file(tmp_path, make_plan("8xh200", Layout(tp=8), Knobs()))
    result = cli("emit", "--plan", str(plan_file), "--out", out.format(tmp=tmp_path))
    assert result.exit_code == 2, result.output
    assert words in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_not_empty_message_names_only_the_callers_options(cli, tmp_path):
    """`plan --emit DIR` has no --out or --force: the library's message is neutral, emit adds its option."""
    plan = make_plan("8xh200", Layout(tp=8), Knobs())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("x")
    with pytest.raises(FolderNotEmpty) as err:
        emit_plan(plan, 1, "vllm", tmp_path / "out")   # what `plan --emit` calls
    assert str(err.value) == f"{tmp_path / 'out'} is not empty; choose an empty folder"
    result = cli("emit", "--plan", str(_plan_file(tmp_path, plan)), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "choose an empty folder, or pass --force" in result.output


def test_emit_json(cli, tmp_path):
    plan_file = _plan_file(tmp_path, make_plan("2x8xh100-ib", Layout(tp=8, pp=2), Knobs()))
    result = cli("emit", "--plan", str(plan_file), "--out", str(tmp_path / "out"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["engine"] == "vllm" and data["candidate"] == 1
    assert [Path(f).name for f in data["files"]] == ["node-0.sh", "node-1.sh", "bench.sh", "README.md", "plan.json"]
    assert all(Path(f).exists() for f in data["files"])
    head, worker = data["commands"]
    assert (head["node"], head["role"], head["gpus"], head["port"]) == (0, "server", 8, 8000)
    assert worker["script"] == "node-1.sh" and "--headless" in worker["argv"] and worker["port"] is None
    assert worker["argv"][worker["argv"].index("--master-addr") + 1] == "${HEAD_IP}"
    assert worker["command"].startswith("vllm serve deepseek-ai/DeepSeek-V3 ") and '"${HEAD_IP}"' in worker["command"]
    assert worker["env"]["NCCL_IB_DISABLE"] == "0" and data["bench"]["argv"][:3] == ["vllm", "bench", "serve"]


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


def test_a_vllm_budget_below_its_sequence_cap_is_never_emitted():
    """vLLM 0.33 refuses max_num_batched_tokens < max_num_seqs at start-up (config/scheduler.py), so a plan
    file carrying that pair (edited by hand, or from an older planner) is refused, not written."""
    plan = make_plan("8xh200", Layout(tp=8), Knobs(max_num_seqs=392, max_num_batched_tokens=256))
    with pytest.raises(PlanError, match="refuses to start"):
        build(launch_inputs(plan, plan.candidates[0]), "vllm")
    ok = make_plan("8xh200", Layout(tp=8), Knobs(max_num_seqs=256, max_num_batched_tokens=256))
    assert build(launch_inputs(ok, ok.candidates[0]), "vllm")


def test_a_node_running_several_replicas_fails_when_one_of_them_fails(tmp_path):
    """Replicas on one node run in the background; the script waits for all and exits non-zero if any
    failed (a bare `wait` returned 0 whatever happened)."""
    import subprocess
    plan = make_plan("8xh200", Layout(tp=4, replicas=2), Knobs(), model="deepseek-v2-lite")
    emit_plan(plan, 1, "vllm", tmp_path / "out")
    node = tmp_path / "out" / "node-0.sh"
    assert "--port 8010" in node.read_text()          # the second replica's server
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for ok in (True, False):
        stub = "#!/bin/bash\n" + ("exit 0\n" if ok else 'for a in "$@"; do [ "$a" = 8010 ] && exit 3; done; exit 0\n')
        (bin_dir / "vllm").write_text(stub)
        (bin_dir / "vllm").chmod(0o755)
        done = subprocess.run(["bash", str(node)], env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True,
                              text=True, timeout=30)
        assert (done.returncode == 0) == ok, done.stderr


def test_a_folder_without_weights_is_warned_about(cli, tmp_path):
    """Planning from a config.json fetched alone serves its folder, which holds no weights: emit says so on
    stderr (QA) and still writes; not once the folder has weight files, nor with --model-path."""
    import json as _json
    import shutil
    folder = tmp_path / "DeepSeek-V3"
    shutil.copytree("tests/fixtures/hf/DeepSeek-V3", folder)
    plan = cli("plan", "-m", str(folder), "-t", "2x8xh200-ib", "--json")
    assert plan.exit_code == 0
    (tmp_path / "p.json").write_text(plan.stdout)
    assert _json.loads(plan.stdout)["model"]["model_path"] == str(folder.resolve())
    bare = cli("emit", "--plan", str(tmp_path / "p.json"), "--out", str(tmp_path / "a"))
    assert bare.exit_code == 0 and "no weight files here" in bare.stderr and "--model-path" in bare.stderr
    direct = cli("plan", "-m", str(folder), "-t", "2x8xh200-ib", "--emit", str(tmp_path / "d"))
    assert direct.exit_code == 0 and "no weight files here" in direct.stderr        # plan --emit says it too
    named = cli("emit", "--plan", str(tmp_path / "p.json"), "--out", str(tmp_path / "b"), "--model-path",
                "deepseek-ai/DeepSeek-V3")
    assert named.exit_code == 0 and "no weight files" not in named.stderr
    (folder / "model-00001-of-00163.safetensors").write_bytes(b"")
    full = cli("emit", "--plan", str(tmp_path / "p.json"), "--out", str(tmp_path / "c"))
    assert full.exit_code == 0 and "no weight files" not in full.stderr
