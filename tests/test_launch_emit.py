"""Launch artefacts: the `emit` command (engine choice, output folder errors, --json), the budgets it
refuses to emit, and the node scripts and warnings it writes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from launch_cases import make_plan

from mla_planner.core.errors import PlanError
from mla_planner.launch.build import build, launch_inputs
from mla_planner.launch.emit import emit_plan
from mla_planner.launch.outdir import FolderNotEmpty
from mla_planner.search.planfile import plan_to_dict
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout


# the emit command: engine choice, output folder errors, --json -------------------------------------

def test_emit_cli(cli, tmp_path):
    plan = make_plan("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), Knobs(engine="sglang"), Workload(concurrency=64))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan_to_dict(plan)))
    out = tmp_path / "launch"
    result = cli("emit", "--plan", str(plan_file), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "--attn-dp-size 16" in (out / "node-1.sh").read_text().replace(" \\\n    ", " ")
    assert 'CONCURRENCY="${CONCURRENCY:-64}"' in (out / "bench.sh").read_text()
    again = cli("emit", "--plan", str(plan_file), "--out", str(out))
    assert again.exit_code == 2 and "--force" in again.output
    assert cli("emit", "--plan", str(plan_file), "--out", str(out), "--force").exit_code == 0
    ray = cli("emit", "--plan", str(plan_file), "--out", str(tmp_path / "x"), "--mode", "ray")
    assert ray.exit_code == 2 and "vLLM's form" in ray.output
    wrong = cli("emit", "--plan", str(plan_file), "--out", str(tmp_path / "y"), "--engine", "vllm")
    assert wrong.exit_code == 2 and "this plan has no vllm candidate; re-run `mla-plan plan --engine vllm`" in wrong.output


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
