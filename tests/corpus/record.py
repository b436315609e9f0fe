"""Run the behaviour corpus (scenarios.py) and record, or check, what each scenario prints and writes.

    python tests/corpus/record.py            # record every scenario into tests/corpus/expected/
    python tests/corpus/record.py NAME ...   # record only these

A recording is the command's exit status and its parsed `--json` (for `plan`, also each emitted folder's
files), with the repository root and the scratch folder written as `<repo>` and `<tmp>`, gzipped so the
repository stays small. `tests/test_behaviour_corpus.py` runs the same code and compares, ignoring only
`schema_version` keys.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ROOT / "tests" / "corpus" / "expected"
sys.path.insert(0, str(ROOT / "tests" / "corpus"))

from scenarios import COMMANDS, COMPARE_PLANS, PLANS  # noqa: E402


def _invoke(words: list[str], scratch: Path) -> dict:
    from click.testing import CliRunner

    from mla_planner.cli.app import app

    result = CliRunner().invoke(app, words, env={"COLUMNS": "160"})
    text = result.stdout.replace(str(scratch), "<tmp>").replace(str(ROOT), "<repo>")
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        body = {"unparsed_stdout": text}
    record = {"exit": result.exit_code, "json": body}
    if result.exit_code != 0:
        record["stderr"] = result.stderr.replace(str(scratch), "<tmp>").replace(str(ROOT), "<repo>")
    return record


def _folder(path: Path, scratch: Path) -> dict:
    """The files under PATH by relative name; JSON files parsed (so `schema_version` can be set aside)."""
    files = {}
    for f in sorted(path.rglob("*")):
        if f.is_file():
            text = f.read_text().replace(str(scratch), "<tmp>").replace(str(ROOT), "<repo>")
            files[str(f.relative_to(path))] = json.loads(text) if f.suffix == ".json" else text
    return files


def _plan_file(name: str, scratch: Path) -> Path:
    out = scratch / f"{name}.json"
    from click.testing import CliRunner

    from mla_planner.cli.app import app

    out.write_text(CliRunner().invoke(app, ["plan", *PLANS[name][0], "--json"], env={"COLUMNS": "160"}).stdout)
    return out


def run_scenario(name: str) -> dict:
    """What scenario NAME prints (and, for a plan, what its emits write), normalised."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp).resolve()
            if name in PLANS:
                args, emits = PLANS[name]
                record = _invoke(["plan", *args, "--json"], scratch)
                if record["exit"] == 0:
                    plan = scratch / "plan.json"
                    plan.write_text(json.dumps(record["json"]))
                    record["emits"] = {}
                    for i, extra in enumerate([["--candidate", "1"], *emits]):
                        out = scratch / f"emit-{i}"
                        printed = _invoke(["emit", "--plan", str(plan), "--out", str(out), *extra, "--json"],
                                          scratch)
                        record["emits"][" ".join(extra)] = printed | {"files": _folder(out, scratch)}
                return record
            if name in COMPARE_PLANS:
                source, numbers = COMPARE_PLANS[name]
                plan = _plan_file(source, scratch)
                words = ["compare", "--plan", str(plan)]
                for n in numbers:
                    words += ["-c", n]
                return _invoke([*words, "--json"], scratch)
            return _invoke([*COMMANDS[name], "--json"], scratch)
    finally:
        os.chdir(cwd)


def all_names() -> list[str]:
    return [*PLANS, *COMMANDS, *COMPARE_PLANS]


def expected_path(name: str) -> Path:
    return EXPECTED / f"{name}.json.gz"


def load_expected(name: str) -> dict:
    with gzip.open(expected_path(name), "rt") as f:
        return json.load(f)


def write_expected(name: str, record: dict) -> None:
    EXPECTED.mkdir(parents=True, exist_ok=True)
    data = json.dumps(record, indent=1, sort_keys=True).encode()
    with open(expected_path(name), "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                                 filename="") as f:
        f.write(data)


def without_schema_version(obj):
    """OBJ with every `schema_version` key dropped (the one field issue 17 adds to every --json output)."""
    if isinstance(obj, dict):
        return {k: without_schema_version(v) for k, v in obj.items() if k != "schema_version"}
    if isinstance(obj, list):
        return [without_schema_version(v) for v in obj]
    return obj


def main(names: list[str]) -> None:
    for name in names or all_names():
        write_expected(name, run_scenario(name))
        print(f"recorded {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
