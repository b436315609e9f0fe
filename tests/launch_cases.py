"""Shared helpers for the launch tests: hand-built plans, and running an emitted script against stub
engines that record exactly the argv and environment they were started with."""

from __future__ import annotations

import subprocess
from pathlib import Path

from mla_planner.search.planfile import Candidate, Plan
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

STUB_PROGRAMS = ("vllm", "python3", "ray", "curl")
STUB_HOST_IP = "10.9.8.7"


def make_plan(topology: str, layout: Layout, knobs: Knobs, workload: Workload = Workload(),
              model: str = "deepseek-v3", warnings: tuple[str, ...] = ()) -> Plan:
    loaded = load_model(model)
    topo = load_topology(topology) if isinstance(topology, str) else topology
    return Plan(loaded.spec, loaded.model_path, topo, workload, [Candidate(layout, knobs, warnings=list(warnings))])


def install_stubs(bin_dir: Path) -> None:
    """`vllm`, `python3`, `ray`, `curl`: write argv and env (NUL-separated) to $STUB_LOG.N and succeed;
    `ip`: also prints an address line so the scripts' VLLM_HOST_IP lookup finds STUB_HOST_IP."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    record = ('out="$STUB_LOG.$(date +%s%N).$$"\n'
              'printf "%s\\0" "$(basename "$0")" "$@" > "$out.argv"\n'
              'env -0 > "$out.env"\n')
    for name in STUB_PROGRAMS + ("ip",):
        body = "#!/bin/bash\n" + record
        if name == "ip":
            body += f'echo "2: eth0    inet {STUB_HOST_IP}/24 brd 10.9.8.255 scope global eth0"\n'
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    for name in ("pip", "pip3"):   # the scripts' version check: "not installed" here, silently, and fast
        (bin_dir / name).write_text("#!/bin/bash\nexit 1\n")
        (bin_dir / name).chmod(0o755)


def run_script(script: Path, bin_dir: Path, log_dir: Path, env: dict[str, str]) -> list[tuple[list[str], dict]]:
    """Run `script` in log_dir's parent with the stubs first on PATH; return [(argv, env)] of every
    stubbed call, in order."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.iterdir():
        old.unlink()
    full_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log_dir / "call"), **env}
    done = subprocess.run(["bash", str(script)], env=full_env, capture_output=True, text=True, timeout=30,
                          cwd=log_dir.parent)
    assert done.returncode == 0, f"{script.name} failed: {done.stderr}"
    calls = []
    for argv_file in sorted(log_dir.glob("*.argv"), key=lambda p: int(p.name.split(".")[1])):
        argv = argv_file.read_bytes().split(b"\0")[:-1]
        env_items = argv_file.with_suffix(".env").read_bytes().split(b"\0")[:-1]
        calls.append(([a.decode() for a in argv],
                      dict(item.decode().split("=", 1) for item in env_items if b"=" in item)))
    return calls


def expand(argv: list[str], values: dict[str, str]) -> list[str]:
    """argv with ShellRef words replaced by what the shell would substitute."""
    return [values[w.var] + w.suffix if hasattr(w, "var") else str(w) for w in argv]


def bash_syntax_ok(path: Path) -> bool:
    return subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def scripts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix == ".sh")

