"""Fuzz every command with random but plausible option values.

The house rule, checked for whatever is thrown at `models`, `topologies`, `show`, `memory`, `compare`,
`plan`, `emit` and `verify`:
  - the exit status is 0, 1 (does not fit / no candidate / a verify check failed) or 2 (bad input);
  - on 2, stderr is exactly one non-empty line starting with "error:";
  - no traceback: no "Traceback" in stdout or stderr, and no exception escaping the command (under
    CliRunner an escaping exception is what a user would see as a traceback);
  - on 0 or 1 there is output;
  - on 2, no output file or folder was left behind (no half-written files, no temporary folders).

Values are numbers (0, negative, 1e12, floats where ints are expected, nan, inf), odd strings (empty,
blanks, unicode, newlines, `$(x)`, 5000 characters), unknown model and topology names, impossible
layouts and labels, bad percentile lengths, conflicting flags, and files of the wrong kind (a folder, an
empty file, a plan given as a model, a plan.json with a mutated field). Paths are written as tokens
("@DIR", "@NEW", "@MUT:<plan>:<field>=<json>") so failing examples stay readable; `Files.resolve` turns them
into real paths under a scratch folder. Every command runs with the scratch folder as the working
directory so that nothing is ever written into the repository.

Small models and clusters keep each call quick. The values and options are in fuzz_strategies.py, the
scratch folder and the check of the rule in fuzz_harness.py; `test_pinned` (test_cli_fuzz_pinned.py) re-runs
the minimised inputs that broke the rule when this file was written.
"""

from __future__ import annotations

from fuzz_harness import invoke
from fuzz_strategies import (COMPARE, COMPARE_COMBOS, EMIT, EMIT_COMBOS, FUZZ, MEMORY, MEMORY_COMBOS, OUT_PATHS, PLAN,
                             PLAN_COMBOS, VERIFY, VERIFY_COMBOS, VERIFY_ONLY, command, ints, layouts, models,
                             needs_torch, plan_files, small_models, small_topologies, topologies, words)
from hypothesis import given
from hypothesis import strategies as st


# ---------------------------------------------------------------------------------------------------------
# one property test per command


@FUZZ
@given(argv=st.one_of(
    command("models", [], {"--json": None, "--tp": ints(8), "extra": None}, 2),
    command("topologies", [], {"--json": None, "-t": words("8xh100"), "extra": None}, 2)))
def test_catalogues(files, argv):
    invoke(files, argv)


@FUZZ
@given(argv=st.one_of(
    st.builds(lambda m, rest: ["show", m, *rest],
              models("deepseek-v3", "deepseek-v2-lite", "kimi-k2", "llama-3.1-70b", "@MODELYAML", "@HFDIR"),
              st.lists(st.sampled_from(["--json", "--topology", "8xh100", "extra"]), max_size=2)),
    command("show", [("--topology", topologies("8xh100", "2x8xh100-ib", "@TOPOYAML"))], {"--json": None}, 1),
    command("show", [], {"--json": None}, 1)))
def test_show(files, argv):
    invoke(files, argv)


@FUZZ
@given(argv=command("memory", [("-m", small_models), ("-t", small_topologies)], MEMORY, 5, MEMORY_COMBOS))
def test_memory(files, argv):
    invoke(files, argv)


@FUZZ
@given(argv=command("compare", [("-m", small_models), ("-t", small_topologies), ("--layout", layouts)],
                    COMPARE, 5, COMPARE_COMBOS))
def test_compare(files, argv):
    invoke(files, argv)


@FUZZ
@given(argv=command("plan", [("-m", small_models), ("-t", small_topologies)], PLAN, 4, PLAN_COMBOS))
def test_plan(files, argv):
    invoke(files, argv)


@FUZZ
@given(argv=st.builds(lambda plan, out, rest: ["emit", *plan, *out, *rest],
                      st.one_of(plan_files.map(lambda p: ["--plan", p]), st.just([])),
                      st.one_of(OUT_PATHS.map(lambda o: ["--out", o]), st.sampled_from([["--out", ""], ["--out", " "]]),
                                st.just([])),
                      command("", [], EMIT, 3, EMIT_COMBOS).map(lambda a: a[1:])))
def test_emit(files, argv):
    invoke(files, argv)


@needs_torch
@FUZZ
@given(argv=st.builds(lambda source, rest: ["verify", "--device", "cpu", "--quick", *source, *rest],
                      st.one_of(st.builds(lambda m, t: ["-m", m, "-t", t], small_models, small_topologies),
                                st.builds(lambda m, t, lay: ["-m", m, "-t", t, "--layout", lay],
                                          small_models, small_topologies, layouts),
                                plan_files.map(lambda p: ["--plan", p])),
                      st.builds(lambda only, rest: ["--only", only, *rest], VERIFY_ONLY,
                                command("", [], VERIFY, 4, VERIFY_COMBOS).map(lambda a: a[1:]))))
def test_verify(files, argv):
    invoke(files, argv)
