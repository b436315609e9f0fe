"""docs/architecture.md matches the tree: it names every package and every module under mla_planner/, and
every path it names exists.

The convention the page keeps: a package is named as a code span of its path under mla_planner/ with a
trailing slash (`perf/`, `specs/attention/`), a module as a code span of its path (`perf/step.py`); the
entry modules at the top are named with their prefix (`mla_planner/__main__.py`). A code span that is a
path with a known suffix must exist, under mla_planner/ or the repository root, unless it is a recipe's
placeholder (`cli/NAME.py`)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mla_planner"
DOC = ROOT / "docs" / "architecture.md"
# a code span that is one path: letters, digits, _ . - and /, with at least one slash
PATH_SPAN = re.compile(r"`([\w./-]*/[\w./-]*)`")
PLACEHOLDER = "NAME"   # `cli/NAME.py`: a file a recipe asks for, not one that exists
CHECKED_SUFFIXES = (".py", ".md", ".yaml", ".j2", ".json", ".toml")


def spans() -> set[str]:
    return set(PATH_SPAN.findall(DOC.read_text(encoding="utf-8")))


def packages(package: Path = PACKAGE) -> list[str]:
    """Every folder under mla_planner/ that holds Python: with an __init__.py, or a namespace folder of
    modules (a package being built)."""
    found = {p.parent for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    return sorted(p.relative_to(package).as_posix() + "/" for p in found if p != package)


def modules(package: Path = PACKAGE) -> list[str]:
    """Every module file under mla_planner/ but the packages' __init__.py, as its path there."""
    return sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def named(path: str, found: set[str]) -> bool:
    return path in found or f"mla_planner/{path}" in found


def test_the_page_names_every_package():
    found = spans()
    assert [p for p in packages() if not named(p, found)] == []


def test_the_page_names_every_module():
    found = spans()
    missing = [m for m in modules() if not named(m if "/" in m else f"mla_planner/{m}", found)]
    assert missing == []


def test_the_entry_modules_are_named():
    found = spans()
    assert {"mla_planner/__init__.py", "mla_planner/__main__.py"} <= found


def test_every_path_the_page_names_exists():
    absent = [s for s in sorted(spans())
              if (s.endswith("/") or s.endswith(CHECKED_SUFFIXES)) and "*" not in s and PLACEHOLDER not in s
              and not (PACKAGE / s).exists() and not (ROOT / s).exists()]
    assert absent == []


def test_every_package_path_names_a_real_package():
    """A `pkg/...` span whose first part is a package of mla_planner/ resolves inside mla_planner/: a module
    that moved or was renamed fails here, not only when it is missing from the list."""
    tops = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    wrong = [s for s in sorted(spans())
             if s.split("/")[0] in tops and PLACEHOLDER not in s and not (PACKAGE / s).exists()]
    assert wrong == []


def test_a_module_the_page_does_not_name_is_caught(tmp_path):
    """The check is not vacuous: a new module and a new package the page does not name are reported."""
    for rel in ("perf/__init__.py", "perf/step.py", "perf/brand_new.py", "perf/extra/thing.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    found = spans()
    assert [m for m in modules(tmp_path) if not named(m, found)] == ["perf/brand_new.py", "perf/extra/thing.py"]
    assert [p for p in packages(tmp_path) if not named(p, found)] == ["perf/extra/"]
