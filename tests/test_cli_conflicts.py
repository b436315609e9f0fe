"""Options that contradict each other or the rest of the input, found by QA as a new user would hit them: each is
one `error:` line and exit 2 (or, for a layout given twice, simply searched once), never a traceback or an option
silently dropped."""

from __future__ import annotations

import json

import pytest


def one_error(result, words: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and words in result.stderr and result.stderr.count("\n") == 1


def test_a_layout_given_twice_is_searched_once(cli):
    """It raised a KeyError from the search (the same layout tuned twice), whichever way it was spelled."""
    result = cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "-l", "tp=8", "-l", "tp=8,pp=1", "--no-disagg",
                 "--json")
    assert result.exit_code in (0, 1), result.output
    tuned = [json.dumps([c["layout"], c["knobs"]], sort_keys=True) for c in json.loads(result.stdout)["candidates"]]
    assert len(tuned) == len(set(tuned)) >= 2      # one layout, each engine and KV dtype tuned once


@pytest.mark.parametrize("flags", [["--bands", "--json"], ["--markdown", "--json"], ["--bands", "--markdown"]])
def test_validate_takes_one_output_form(cli, flags):
    """`--bands --json` printed YAML under a JSON flag."""
    one_error(cli("validate", *flags), "give one of them")


def test_plan_bounds_the_block_size_as_memory_does(cli):
    """A 20-digit block size was planned, and every layout refused for a misleading weights reason."""
    one_error(cli("plan", "--block-size", "99999999999999999999"), "at most 1,024")


@pytest.mark.parametrize("args, words", [
    (["--plan", "PLAN", "-m", "deepseek-v2-lite", "-t", "8xh200"], "--model, --topology: the plan file sets these"),
    (["--plan", "PLAN", "--gpu-memory-utilization", "0.5", "--max-num-seqs", "5"],
     "--gpu-memory-utilization, --max-num-seqs: the plan file sets these"),
    (["-m", "deepseek-v2-lite", "-t", "8xh100", "--gpu-memory-utilization", "0.3"],
     "--gpu-memory-utilization: these are a --layout's knobs")])
def test_verify_refuses_options_that_would_be_ignored(cli, tmp_path, args, words):
    """With --plan, verify ran the plan's candidate whatever -m, -t or knob options said (and did not check them);
    a fresh plan (no --plan, no --layout) chooses its own knobs."""
    plan = tmp_path / "plan.json"
    plan.write_text(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "--no-disagg", "--json").stdout)
    one_error(cli("verify", "--device", "cpu", "--quick", *[str(plan) if a == "PLAN" else a for a in args]), words)


def test_verify_still_takes_a_layouts_knobs(cli):
    result = cli("verify", "--device", "cpu", "--quick", "-m", "deepseek-v2-lite", "-t", "8xh100", "-l", "tp=8",
                 "--gpu-memory-utilization", "0.9", "--json")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("text", ["tp=8,tp=16", "tp=8,kv=replicated,kv=latent-sharded"])
def test_a_layout_key_given_twice_is_refused(cli, text):
    """`tp=8,tp=16` was planned as tp16 without a word."""
    one_error(cli("plan", "-l", text), "given twice")


def test_compare_refuses_what_its_plan_file_sets(cli, tmp_path):
    """`compare --plan` compared the plan's candidates whatever -m, --tpot-ms or a NaN fraction said."""
    plan = tmp_path / "plan.json"
    plan.write_text(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "--no-disagg", "--json").stdout)
    one_error(cli("compare", "--plan", str(plan), "-m", "deepseek-v2-lite", "--tpot-ms", "5",
                  "--gpu-memory-utilization", "nan"), "--model, --tpot-ms, --gpu-memory-utilization: the plan file")
    assert cli("compare", "--plan", str(plan), "-c", "1").exit_code == 0
