"""The package keeps the shape docs/architecture.md describes: packages by concept, dependencies one way
(core -> specs -> engines -> memory -> perf -> search -> launch -> audit -> verify -> cli), no import
cycle, no import inside a function but torch & co. and the CLI's loading of its own commands, no module
over 300 lines; and each of these rules fails on a planted violation."""

import ast
import importlib
import inspect
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from shape import LAYERS, MAX_LINES, violations  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_keeps_its_shape():
    assert violations(ROOT, "mla_planner") == []


@pytest.mark.parametrize("folder", ["tools", "benchmarks", "tests"])
def test_no_module_over_the_limit_outside_the_package_either(folder):
    long = [f"{p.relative_to(ROOT)}: {n}" for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert long == []


def plant(root: Path, files: dict[str, str]) -> None:
    """A throw-away package `pkg` with one package per layer and FILES (path under pkg -> source)."""
    for layer in LAYERS:
        (root / "pkg" / layer).mkdir(parents=True, exist_ok=True)
        (root / "pkg" / layer / "__init__.py").write_text("")
    (root / "pkg" / "__init__.py").write_text("")
    for name, text in files.items():
        (root / "pkg" / name).write_text(text)


def test_a_clean_planted_package_passes(tmp_path):
    plant(tmp_path, {"core/a.py": "X = 1\n", "specs/b.py": "from pkg.core.a import X\n",
                     "cli/c.py": "from pkg.specs import b\n\ndef f():\n    import torch\n    return torch\n"})
    assert violations(tmp_path, "pkg") == []


def test_an_upward_import_fails(tmp_path):
    plant(tmp_path, {"core/a.py": "from pkg.cli.c import Y\n", "cli/c.py": "Y = 1\n"})
    assert violations(tmp_path, "pkg") == ["pkg.core.a imports pkg.cli.c: upward (core -> cli)"]


def test_an_import_cycle_fails(tmp_path):
    plant(tmp_path, {"specs/x.py": "from pkg.specs import y\n", "specs/y.py": "from . import x\n"})
    assert violations(tmp_path, "pkg") == ["import cycle: pkg.specs.x -> pkg.specs.y -> pkg.specs.x"]


def test_an_import_inside_a_function_fails_unless_it_loads_torch(tmp_path):
    plant(tmp_path, {"specs/y.py": "Y = 1\n",
                     "verify/heavy.py": "import torch\n",
                     "search/z.py": "def f():\n    from pkg.specs.y import Y\n    return Y\n",
                     "cli/v.py": "def g():\n    from pkg.verify import heavy\n    return heavy\n"})
    assert violations(tmp_path, "pkg") == [
        "pkg.search.z imports pkg.specs.y inside a function (only torch, numpy, matplotlib, triton, flash_mla "
        "and modules that load them may be)"]


def test_pydantic_is_deferred_only_where_a_users_file_is_validated(tmp_path):
    plant(tmp_path, {"core/validation.py": "def v():\n    from pydantic import TypeAdapter\n    return TypeAdapter\n",
                     "specs/t.py": "def w():\n    import pydantic\n    return pydantic\n"})
    assert violations(tmp_path, "pkg") == [
        "pkg.specs.t imports pydantic inside a function (only torch, numpy, matplotlib, triton, flash_mla "
        "and modules that load them may be)"]


def test_an_import_by_name_outside_the_cli_loader_fails(tmp_path):
    plant(tmp_path, {"search/z.py": "import importlib\n\ndef f():\n    return importlib.import_module('pkg.cli.c')\n",
                     "cli/app.py": "import importlib\n\ndef load(m):\n    return importlib.import_module(m)\n"})
    assert violations(tmp_path, "pkg") == [
        "pkg.search.z imports by name at run time (only pkg.cli.app may: it loads the commands)"]


def test_a_stray_module_and_a_long_one_fail(tmp_path):
    plant(tmp_path, {"helpers.py": "", "perf/long.py": "X = 1\n" * (MAX_LINES + 1)})
    found = violations(tmp_path, "pkg")
    assert found == ["pkg/helpers.py: a module at the top level (only packages and ('__init__', '__main__'))",
                     f"pkg/perf/long.py: {MAX_LINES + 1} lines (at most {MAX_LINES})"]


def test_the_command_list_shows_each_commands_own_summary():
    """`mla-plan --help` lists the commands without importing them (cli.app.COMMANDS); each summary there is
    the first paragraph of the command's docstring, which `mla-plan COMMAND --help` shows."""
    from mla_planner.cli.app import COMMANDS

    for name, (module, attr, summary) in COMMANDS.items():
        doc = inspect.getdoc(getattr(importlib.import_module(module), attr))
        assert summary == doc.split("\n\n")[0], name


def loaded_after(command: str, env: dict | None = None) -> list[str]:
    """The modules a fresh process has imported once `mla-plan COMMAND` ran (a subprocess: this one has them all)."""
    import subprocess

    code = (f"import sys; from mla_planner.cli.app import main; sys.argv = ['mla-plan', '{command}']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nprint(sorted(sys.modules), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-500:]
    return ast.literal_eval(out.stderr.strip().splitlines()[-1])


def test_help_imports_no_command():
    """The listing and `--version` load the CLI's frame only: no command module, no search, no engine."""
    frame = ("mla_planner.cli", "mla_planner.cli.app", "mla_planner.cli.params")
    assert [m for m in loaded_after("--help") if m.startswith("mla_planner.") and m not in frame] == []


def test_listings_start_without_the_schema_or_engine_tables():
    """`mla-plan models` (a target of the fast start) imports neither pydantic, rich, nor the engine tables:
    a helper added to cli/common that pulls engines/backends brought all three back once (0.1 s -> 0.3 s)."""
    heavy = ("pydantic", "rich", "jinja2", "mla_planner.engines.backends", "mla_planner.specs.topology")
    assert [m for m in loaded_after("models") if m in heavy] == []


def test_a_plan_on_builtins_loads_neither_pydantic_nor_jinja2():
    """`mla-plan plan` on the built-in default (the fast start's third target) builds the built-in model, GPU and
    topology directly and renders no template: pydantic (a user's file) and jinja2 (--emit) stay unloaded."""
    assert [m for m in loaded_after("plan") if m.split(".")[0] in ("pydantic", "jinja2")] == []


def test_a_plan_on_builtins_reads_its_data_without_pyyaml_once_the_parses_are_kept():
    """Where Python writes bytecode, the built-in data files' parses are kept too (core/resources.read_data), and
    a later `plan` on built-ins reads them back without importing PyYAML (10 ms of start-up, and 10 ms more to
    parse the files). The first run keeps them; this machine may set PYTHONDONTWRITEBYTECODE, so it is dropped."""
    if not os.access(ROOT / "mla_planner" / "data", os.W_OK):
        pytest.skip("a read-only install keeps no parses: every plan parses (and imports PyYAML)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    loaded_after("plan", env)
    assert [m for m in loaded_after("plan", env) if m.split(".")[0] == "yaml"] == []
