import os

import pytest

os.environ.setdefault("COLUMNS", "160")  # stable rich table widths under CliRunner


@pytest.fixture
def cli():
    """Invoke the app as a user would; returns click's Result (exit_code, stdout, stderr)."""
    from click.testing import CliRunner

    from mla_planner.cli.app import app

    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, list(args), env={"COLUMNS": "160"})
    return run


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The fuzz tests' scratch folder (tests/fuzz_harness.py's Files), one per test module."""
    from fuzz_harness import Files
    from click.testing import CliRunner

    from mla_planner.cli.app import app

    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(app, list(args), env={"COLUMNS": "160"})
    return Files(tmp_path_factory.mktemp("fuzz"), run)
