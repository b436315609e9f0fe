"""Wall time of whole `mla-plan` processes (start-up included), on this machine.

    python benchmarks/startup.py                # the real entry script, 9 runs per command
    python benchmarks/startup.py --runs 15      # more runs
    python benchmarks/startup.py --via-shim     # through PATH, as a user types it (pyenv's bash shim included)
    python benchmarks/startup.py --json         # one JSON object on stdout, for scripts
    python benchmarks/startup.py --instructions # also count each command's CPU instructions once (valgrind)

Each command runs as a fresh process RUNS times, output thrown away, and the table gives the median,
min and max wall seconds: `mla-plan --help`, `--version`, `models`, `topologies`, `show deepseek-v3` and
`plan` (the built-in default). `python -c pass` is the interpreter's own floor (site-packages' .pth files
included). For `plan` it also times, in this process, the searches the default plan runs - `search(...)`, the
disaggregated search and its crossover, the MTP hint - warm, memo caches cleared before each run as
benchmarks/plan_speed.py clears them, and prints the overhead: median process time - median search time
(start-up, parsing, loading, rendering).

Wall times on a shared machine move by 20-30 % from one minute to the next. `--instructions` adds what does not:
the instructions each process executes, counted once under valgrind's callgrind (the same total run after
run; several seconds per command, a minute for `plan`), for comparing two versions of the code.

Targets (2-core machine): `--help` and `models` under 0.2 s; `plan` at most 0.15 s above its search.

By default the real entry script of the Python that runs this benchmark is run: the `mla-plan` beside its
interpreter (a virtualenv's bin/, or pyenv's version folder - not pyenv's bash shim on PATH, which costs its
own time before Python starts); else the one on PATH that is not a shim; else `python -m mla_planner.cli`.
So `VENV/bin/python benchmarks/startup.py` measures the install in VENV. Other processes on the machine
skew the numbers: the load average is printed; measure again when it is above 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

COMMANDS = [["--help"], ["--version"], ["models"], ["topologies"], ["show", "deepseek-v3"], ["plan"]]
TARGETS = {"--help": 0.2, "models": 0.2}      # seconds for the whole process
PLAN_OVERHEAD_TARGET = 0.15                   # seconds above the in-process search
DEFAULT_MODEL, DEFAULT_TOPOLOGY = "deepseek-v3", "2x8xh100-ib"   # what `mla-plan plan` plans with no arguments


def entry_point(via_shim: bool) -> tuple[list[str], str]:
    """The argv prefix that runs mla-plan, and a word on what it is."""
    on_path = shutil.which("mla-plan", path=user_path())
    if via_shim:
        if not on_path:
            sys.exit("error: --via-shim: no mla-plan on PATH")
        return [on_path], f"PATH: {on_path}"
    beside = os.path.join(os.path.dirname(sys.executable), "mla-plan")
    if os.path.isfile(beside) and not _is_shim(beside):
        return [beside], f"entry script beside {sys.executable}: {beside}"
    if on_path and not _is_shim(on_path):
        return [on_path], f"entry script on PATH: {on_path}"
    return [sys.executable, "-m", "mla_planner.cli"], f"{sys.executable} -m mla_planner.cli"


def user_path() -> str:
    """PATH as the user's shell has it: run through pyenv's `python` shim, this process's PATH starts with
    the interpreter's own bin folder, which `pyenv exec` put there and which hides the shims."""
    pyenv_root = os.environ.get("PYENV_ROOT")
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if pyenv_root:
        versions = os.path.join(pyenv_root, "versions") + os.sep
        parts = [p for p in parts if not p.startswith(versions)]
    return os.pathsep.join(parts)


def _is_shim(path: str) -> bool:
    """A pyenv (or similar) shell shim, not a Python entry script."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
    except OSError:
        return False
    return b"python" not in first


def time_process(argv: list[str], runs: int, env: dict | None = None) -> tuple[list[float], list[float]]:
    """Wall seconds and CPU seconds (user + system; less swayed by other processes) of RUNS fresh
    processes of ARGV, stdout and stderr discarded."""
    wall, cpu = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        _, _, usage = os.wait4(proc.pid, 0)
        wall.append(time.perf_counter() - t0)
        cpu.append(usage.ru_utime + usage.ru_stime)
    return wall, cpu


def instructions(argv: list[str], env: dict | None = None) -> int | None:
    """Instructions one process of ARGV executes (valgrind callgrind's "Collected" total), None without valgrind."""
    valgrind = shutil.which("valgrind")
    if not valgrind:
        return None
    out = subprocess.run([valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    found = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    return int(found.group(1)) if found else None


def search_times(runs: int) -> list[float]:
    """The default plan's searches in this process, warm, memo caches cleared before each run (as
    benchmarks/plan_speed.py clears them): what cli/planning.run_plan searches for `mla-plan plan` with no
    arguments - the aggregated search, the disaggregated one and its crossover (2 nodes over InfiniBand), the MTP
    hint - without loading the files, which count as start-up."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import plan_speed   # noqa: E402 - beside this file; imports the planner
    from mla_planner.search.disagg import crossover_nodes, search_disaggregated
    from mla_planner.search.mtp import mtp_hint
    from mla_planner.search.run import search
    from mla_planner.search.tuning import Overrides
    from mla_planner.specs.calibration import load_calibration
    from mla_planner.specs.catalogue import load_model
    from mla_planner.specs.knobs import ENGINES, Workload
    from mla_planner.specs.topology import load_topology

    spec, topo = load_model(DEFAULT_MODEL).spec, load_topology(DEFAULT_TOPOLOGY)
    calib, work = load_calibration(None, topo), Workload()

    def plan_searches():
        result = search(spec, topo, work, calib)
        found = search_disaggregated(spec, topo, work, calib, ENGINES, None, Overrides(), "per-gpu")
        best = result.options[0].tuned.metrics if result.options else None
        if found and best is not None and best.meets_targets:
            crossover_nodes(spec, topo, work, calib, best.throughput_tokens_per_s_per_gpu, ENGINES, None, Overrides())
        mtp_hint(spec, topo, result.options, work, calib, Overrides())

    plan_searches()          # warm-up (imports, data files)
    times = []
    for _ in range(runs):
        plan_speed.clear_caches()
        t0 = time.perf_counter()
        plan_searches()
        times.append(time.perf_counter() - t0)
    return times


def summary(times: list[float], cpu: list[float] | None = None) -> dict:
    out = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": len(times)}
    if cpu:
        out["cpu_median_s"] = statistics.median(cpu)
    return out


def child_env(bytecode: bool) -> dict:
    """The environment the measured processes run in. With `bytecode` the package is compiled first and
    PYTHONDONTWRITEBYTECODE (set on this project's machines) is dropped, so each process loads compiled
    modules as an installed wheel does; without, every process compiles what it imports."""
    env = dict(os.environ)
    if bytecode:
        import mla_planner
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.dirname(mla_planner.__file__)], check=True)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(runs: int, via_shim: bool, bytecode: bool = True, count: bool = False) -> dict:
    prefix, how = entry_point(via_shim)
    env = child_env(bytecode)
    rows = [{"command": "python -c pass", **summary(*time_process([sys.executable, "-c", "pass"], runs))}]
    if count:
        rows[0]["instructions"] = instructions([sys.executable, "-c", "pass"], env)
    shim_python = shutil.which("python", path=user_path()) if via_shim else None
    if shim_python and _is_shim(shim_python):      # what the shim alone costs, before Python starts
        rows.append({"command": "python -c pass (via shim)",
                     **summary(*time_process([shim_python, "-c", "pass"], runs))})
    for args in COMMANDS:
        rows.append({"command": "mla-plan " + " ".join(args), **summary(*time_process(prefix + args, runs, env))})
        if count:
            rows[-1]["instructions"] = instructions(prefix + args, env)
        target = TARGETS.get(args[0])
        if target:
            rows[-1].update(target_s=target, meets=rows[-1]["median_s"] < target)
    search = summary(search_times(runs))
    plan = rows[-1]
    plan["search_median_s"] = search["median_s"]
    plan["overhead_s"] = plan["median_s"] - search["median_s"]
    plan.update(target_overhead_s=PLAN_OVERHEAD_TARGET, meets=plan["overhead_s"] <= PLAN_OVERHEAD_TARGET)
    return {"entry": how, "via_shim": via_shim, "cpus": os.cpu_count(), "load_average": _load(),
            "python": sys.version.split()[0], "bytecode_cached": bytecode or bytecode_cached(), "rows": rows,
            "search": search}


def bytecode_cached() -> bool:
    """Whether the package's compiled bytecode is kept: with PYTHONDONTWRITEBYTECODE set and no __pycache__
    (an editable install here), every process compiles each module it imports (`plan`: ~80 modules)."""
    import mla_planner
    root = os.path.dirname(mla_planner.__file__)
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    return bool(prefix) or any("__pycache__" in dirs for _, dirs, _ in os.walk(root))


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def print_table(result: dict) -> None:
    print(f"entry: {result['entry']}")
    print(f"{'command':28} {'median s':>9} {'min s':>7} {'max s':>7} {'cpu s':>7} {'search s':>9} {'overhead s':>11}"
          "  target")
    for r in result["rows"]:
        search = f"{r['search_median_s']:.3f}" if "search_median_s" in r else "-"
        overhead = f"{r['overhead_s']:.3f}" if "overhead_s" in r else "-"
        if "target_overhead_s" in r:
            target = f"overhead <= {r['target_overhead_s']}: {'met' if r['meets'] else 'NOT met'}"
        elif "target_s" in r:
            target = f"< {r['target_s']}: {'met' if r['meets'] else 'NOT met'}"
        else:
            target = ""
        counted = f"  {r['instructions'] / 1e6:,.0f} M instructions" if r.get("instructions") else ""
        print(f"{r['command']:28} {r['median_s']:>9.3f} {r['min_s']:>7.3f} {r['max_s']:>7.3f} "
              f"{r['cpu_median_s']:>7.3f} {search:>9} "
              f"{overhead:>11}  {target}{counted}")
    s = result["search"]
    print(f"(search in-process: median {s['median_s']:.3f} s, min {s['min_s']:.3f}, max {s['max_s']:.3f}; "
          f"{result['cpus']} CPUs; load average {result['load_average']}; {s['runs']} runs each)")
    if not result["bytecode_cached"]:
        print("note: no compiled bytecode is kept for mla_planner (PYTHONDONTWRITEBYTECODE, no __pycache__): every "
              "process compiles its modules, which an installed wheel does not")
    if result["load_average"] and result["load_average"][0] > 1:
        print("note: load average above 1 - other processes share the CPUs; measure again")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=9, help="processes per command (default 9)")
    ap.add_argument("--via-shim", action="store_true", help="run mla-plan as found on PATH (pyenv's shim)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("--instructions", action="store_true",
                    help="also count each command's instructions once under valgrind (repeatable; slow)")
    ap.add_argument("--no-bytecode", action="store_true",
                    help="keep PYTHONDONTWRITEBYTECODE as set: every process compiles the modules it imports")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    result = measure(args.runs, args.via_shim, bytecode=not args.no_bytecode, count=args.instructions)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print_table(result)


if __name__ == "__main__":
    main()
