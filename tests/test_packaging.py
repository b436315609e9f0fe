"""The wheel carries the built-in data, and the planner never needs torch."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_planner_imports_without_torch():
    code = ("import sys, mla_planner.cli.app, mla_planner.specs.catalogue, mla_planner.specs.topology;"
            "assert 'torch' not in sys.modules, 'torch imported by the planner'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_wheel_carries_data_and_runs_outside_the_checkout(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path)],
                   check=True, capture_output=True)
    wheel = next(tmp_path.glob("mla_plan-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("mla_planner/topologies/2x8xh100-ib.yaml", "mla_planner/data/gpus.yaml",
                   "mla_planner/data/models/deepseek-v3.yaml", "mla_planner/data/backends.yaml"):
        assert needed in names
    assert any(n.startswith("mla_planner/templates/") for n in names)
    # kept parses of the data files (core/resources.read_data) and bytecode belong to one machine, not the wheel
    assert [n for n in names if "__pycache__" in n] == []
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    out = subprocess.run([sys.executable, "-m", "mla_planner.cli", "topologies", "--json"], cwd=tmp_path,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "2x8xh100-ib" in out.stdout and str(ROOT) not in out.stdout


def test_a_reader_closing_the_pipe_early_is_not_read_as_no_candidate():
    """`plan | head -1` once exited 1 (Click's EPIPE handling), the status that means "none meets the
    targets"; a closed pipe now ends the process by SIGPIPE (141 in the shell), silently."""
    import shutil
    if shutil.which("bash") is None or sys.platform == "win32":
        import pytest
        pytest.skip("needs a POSIX shell")
    cmd = f"{sys.executable} -m mla_planner.cli plan 2>&1 | head -c 20 >/dev/null; echo ${{PIPESTATUS[0]}}"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "141", out.stdout + out.stderr


def test_verify_ends_a_closed_pipe_as_the_other_commands_do(tmp_path):
    """verify keeps SIGPIPE ignored (its torch.distributed sockets must see a closed peer as an error), so a closed
    stdout came out as Click's exit 1, which verify uses for a failed check; it is 141 now, with nothing on stderr."""
    import shutil
    if shutil.which("bash") is None or sys.platform == "win32":
        import pytest
        pytest.skip("needs a POSIX shell")
    err = tmp_path / "stderr"
    cmd = (f"{sys.executable} -m mla_planner.cli verify --device cpu --quick 2>{err} | head -c 20 >/dev/null; "
           "echo ${PIPESTATUS[0]}")
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "141", out.stdout + out.stderr
    assert err.read_text() == ""
