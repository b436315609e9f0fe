"""Launch artefacts: the folder writer (the files emitted, their syntax, --force, all or nothing, errors in
one line) and what the folder holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from launch_cases import bash_syntax_ok, make_plan, scripts

from mla_planner.core.errors import PlanError
from mla_planner.launch.emit import emit_plan
from mla_planner.launch.outdir import MANIFEST, FolderNotEmpty, write_folder
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout


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
    assert 'CONCURRENCY="${CONCURRENCY:-72}"' in bench and "144 requests in flight in all" in bench
    assert "run it with `CONCURRENCY=144 REPLICAS=2`" in readme
