"""The fuzz tests' harness: the scratch folder with files of every wrong kind and two real plans (`Files`, the
module-scoped `files` fixture in tests/conftest.py), and `invoke`, which runs a command with the scratch folder as the working
directory and checks the house rule described in test_cli_fuzz.py."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shlex
import traceback
from pathlib import Path

from fuzz_strategies import LONG

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------------------------
# files and the property


class Files:
    """The scratch folder: fixed files of every wrong kind, two real plans, and fresh paths per call."""

    def __init__(self, base: Path, cli):
        self.base, self.cli, self.count = base, cli, itertools.count()
        self.scratch = base / "cwd"
        self.scratch.mkdir()
        (base / "dir").mkdir()
        (base / "dir" / "keep.txt").write_text("not written by emit\n")
        (base / "empty").write_text("")
        (base / "notyaml.yaml").write_text("name: [unclosed\n  x: :")
        (base / "list.yaml").write_text("- a\n- b\n")
        self.plans = {"plan": self._plan(base / "plan.json", "-m", "deepseek-v2-lite", "-t", "8xh100"),
                      "plan_pp": self._plan(base / "plan_pp.json", "-m", "deepseek-v2-lite", "-t", "8xh100",
                                            "--layout", "tp=4,pp=2", "--layout", "tp=2,pp=2", "--engine", "vllm")}
        self.fixed = {"@DIR": base / "dir", "@EMPTY": base / "empty", "@NOTYAML": base / "notyaml.yaml",
                      "@LIST": base / "list.yaml", "@MISSING": base / "missing.yaml", "@PLAN": base / "plan.json",
                      "@PLAN_PP": base / "plan_pp.json", "@TOPOYAML": ROOT / "topologies" / "2x8xh100-ib.yaml",
                      "@MODELYAML": ROOT / "mla_planner" / "data" / "models" / "deepseek-v2-lite.yaml",
                      "@HFDIR": ROOT / "tests" / "fixtures" / "hf" / "DeepSeek-V3",
                      "@FILE/sub": base / "empty" / "sub"}

    def _plan(self, path: Path, *args: str) -> dict:
        r = self.cli("plan", *args, "--json")
        assert r.exit_code == 0, r.output
        path.write_text(r.stdout)
        return json.loads(r.stdout)

    def fresh(self) -> Path:
        """A new, empty parent folder; the property checks it is still empty after a refused call."""
        parent = self.base / f"out{next(self.count)}"
        parent.mkdir()
        return parent

    def resolve(self, word: str) -> tuple[str, Path | None]:
        """(the argument, the folder to watch for leftovers or None)."""
        if word in self.fixed:
            return str(self.fixed[word]), None
        if word == "@NEW":
            parent = self.fresh()
            return str(parent / "out"), parent
        if word in ("@EMPTYDIR", "@FULLDIR"):
            parent = self.fresh()
            (parent / "out").mkdir()
            if word == "@FULLDIR":
                (parent / "out" / "keep.txt").write_text("not written by mla-plan\n")
            return str(parent / "out"), parent
        if word in ("@OLDFILE", "@UNDERFILE"):
            parent = self.fresh()
            (parent / "out").write_text("an earlier file\n")
            return str(parent / "out" / "sub" if word == "@UNDERFILE" else parent / "out"), parent
        if word == "@LONG":
            parent = self.fresh()
            return str(parent / LONG), parent
        if word.startswith("@MUT:"):
            return str(self._mutated(word)), None
        return word, None

    def _mutated(self, word: str) -> Path:
        base, _, rest = word[len("@MUT:"):].partition(":")
        field, _, value = rest.partition("=")
        data = json.loads(json.dumps(self.plans[base]))
        *parents, last = field.split(".")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        key = int(last) if isinstance(node, list) else last
        value = json.loads(value)
        if value == "DEL":
            node.pop(key, None) if isinstance(node, dict) else node.pop(key)
        else:
            node[key] = value
        path = self.base / f"mutated{next(self.count)}.json"
        path.write_text(json.dumps(data))
        return path


def shown(argv: list[str]) -> str:
    """The command line as a user would type it, long words abbreviated."""
    return "mla-plan " + shlex.join(w if len(w) <= 80 else f"{w[:40]}...<{len(w)} chars>" for w in argv)


def listing(folder: Path) -> list[tuple]:
    """Names in `folder` with the size of each file and the names inside each subfolder."""
    return sorted((p.name, sorted(c.name for c in p.iterdir()) if p.is_dir() else p.stat().st_size)
                  for p in folder.iterdir())


@contextlib.contextmanager
def cwd(folder: Path):
    old = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(old)


def invoke(files: Files, argv: list[str]):
    """Run the command (tokens resolved) with the scratch folder as cwd; check the property."""
    real, watched = [], []
    for word in argv:
        arg, parent = files.resolve(word)
        real.append(arg)
        if parent is not None:
            watched.append((parent, listing(parent)))
    watched.append((files.fixed["@DIR"], listing(files.fixed["@DIR"])))
    with cwd(files.scratch):
        before = listing(files.scratch)
        result = files.cli(*real)
        watched.append((files.scratch, before))
    check(result, real, watched)
    return result


def check(result, argv: list[str], watched: list[tuple[Path, list[str]]]) -> None:
    cmd = shown(argv)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        tb = "".join(traceback.format_exception(*result.exc_info))
        raise AssertionError(f"{cmd}\n  -> uncaught {type(exc).__name__}: {str(exc)[:200]}\n{tb[-1500:]}")
    out, err = result.stdout, result.stderr
    assert "Traceback" not in out and "Traceback" not in err, f"{cmd}\n  -> traceback printed:\n{result.output[-1500:]}"
    assert result.exit_code in (0, 1, 2), f"{cmd}\n  -> exit status {result.exit_code}:\n{result.output[-800:]}"
    if result.exit_code == 2:
        lines = err.rstrip("\n").split("\n")   # lines as a terminal shows them (not str.splitlines)
        assert len(lines) == 1 and lines[0].startswith("error:") and lines[0][len("error:"):].strip(), \
            f"{cmd}\n  -> exit 2 with {len(lines)} stderr line(s), not one 'error:' line:\n{err[:800]}"
        for folder, before in watched:
            assert listing(folder) == before, \
                f"{cmd}\n  -> exit 2 but {folder} changed: {before} -> {listing(folder)}\n{err[:300]}"
    else:
        assert out.strip(), f"{cmd}\n  -> exit {result.exit_code} with no output; stderr: {err[:500]}"
