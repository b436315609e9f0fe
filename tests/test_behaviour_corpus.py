"""Behaviour must not change under the restructure (issue 17): every scenario of tests/corpus/scenarios.py prints
(and, for a plan, emits) exactly what was recorded before any module moved, but for the `schema_version` key the
restructure adds. Re-record (python tests/corpus/record.py NAME) only when a change of behaviour is intended and
said in its commit."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "corpus"))

from record import all_names, load_expected, run_scenario, without_schema_version  # noqa: E402


def first_difference(a, b, path="$"):
    """The first JSON path where A and B differ, with both values (for a readable failure)."""
    if type(a) is not type(b):
        return f"{path}: {a!r:.200} != {b!r:.200}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'recorded' if k in a else 'now'}"
            found = first_difference(a[k], b[k], f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items recorded, {len(b)} now"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: recorded {a!r:.300}, now {b!r:.300}"


def test_the_corpus_is_large_enough():
    assert len(all_names()) >= 30


@pytest.mark.parametrize("name", all_names())
def test_behaviour_is_as_recorded(name):
    recorded = without_schema_version(load_expected(name))
    now = without_schema_version(run_scenario(name))
    assert recorded == now, first_difference(recorded, now)
