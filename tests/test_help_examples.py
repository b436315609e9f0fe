"""Every example in a command's --help that needs no file of the user's runs, and succeeds (exit 0)."""

import shlex

import pytest

from mla_planner.cli import compare as cli_compare, memory as cli_memory, plan as cli_plan


def _examples():
    for module, name in ((cli_plan, "plan_cmd"), (cli_compare, "compare_cmd"), (cli_memory, "memory_cmd")):
        doc = getattr(module, name).__doc__ or ""
        for line in doc.split("Examples:")[-1].splitlines():
            line = line.strip().split("    (")[0]
            words = shlex.split(line) if line.startswith("mla-plan ") else []
            if words and not any(w.endswith((".json", ".yaml", ".log")) or w in (">", "|") for w in words):
                yield words[1:]


EXAMPLES = list(_examples())


def test_the_examples_are_found():
    assert len(EXAMPLES) >= 5          # plan 1, compare 2, memory 2 today: a format change must not empty the list


@pytest.mark.parametrize("args", EXAMPLES, ids=" ".join)
def test_help_example_runs(cli, args):
    r = cli(*args)
    assert r.exit_code == 0, r.output


def test_emit_help_examples_run_on_the_plan_help_makes(cli, tmp_path, monkeypatch):
    """emit's examples read the plan that `plan --help` says to write (`mla-plan plan --json > plan.json`): each
    runs on that plan (one once asked for candidate 3 in vLLM's Ray form, and candidate 3 was SGLang's)."""
    from mla_planner.cli import emit as cli_emit
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.json").write_text(cli("plan", "--json").stdout)
    doc = cli_emit.emit_cmd.__doc__.split("Examples:")[-1]
    examples = [shlex.split(line.strip())[1:] for line in doc.splitlines() if line.strip().startswith("mla-plan ")]
    assert len(examples) >= 3
    for args in examples:
        r = cli(*args)
        assert r.exit_code == 0, (args, r.output)


@pytest.mark.parametrize("command", ["plan", "memory", "compare", "emit", "lint", "check-log", "validate",
                                     "calibrate", "verify"])
def test_example_commands_are_printed_whole(cli, command):
    """Found by QA: --help filled each example into its paragraph, so a long one broke across lines (lint's gained a
    `\\` mid-line) and pasted as two commands. Every `mla-plan ...` line of the docstring is printed as written."""
    from mla_planner.cli.app import COMMANDS, load_command
    doc = load_command(command).callback.__doc__ or ""
    lines = [line.strip() for line in doc.split("Examples:")[-1].splitlines() if line.strip().startswith("mla-plan ")]
    shown = [line.strip() for line in cli(command, "--help").stdout.splitlines()]
    assert lines and all(line in shown for line in lines), (COMMANDS[command], lines)
