"""Fuzzing every command (test_cli_fuzz.py): the inputs the fuzzing found breaking the house rule (exit status
0, 1 or 2; on 2 one "error:" line on stderr and nothing left behind; never a traceback), minimised and
pinned so that each is checked on every run."""

from __future__ import annotations

import pytest
from fuzz_harness import invoke, shown
from fuzz_strategies import LONG, needs_torch


# ---------------------------------------------------------------------------------------------------------
# inputs the fuzzing found breaking the rule, minimised, pinned so that each is checked on every run

SMALL = ["-m", "deepseek-v2-lite", "-t", "8xh100"]
VERIFY_CPU = ["verify", "--device", "cpu", "--quick", *SMALL]
PINNED = [
    # click's own usage errors: a boxed multi-line message, not one "error:" line
    ["models", "--tp", "8"],                                     # unknown option
    ["show", "deepseek-v3", "extra"],                            # unexpected extra argument
    ["show", "--topology"],                                      # option without its value
    ["memory", *SMALL, "--tp", "1.5"],                           # float where an int is expected
    ["memory", *SMALL, "--tp", "1e12"],
    ["plan", *SMALL, "--tpot-ms", "abc"],                        # not a number
    ["emit", "--out", "@NEW"],                                   # required --plan missing
    # a layout value str.isdigit() accepts but int() does not: ValueError escapes parse_layout
    ["compare", *SMALL, "--layout", "tp=²"],
    ["plan", *SMALL, "--layout", "tp=²"],
    [*VERIFY_CPU, "--layout", "tp=²"],
    # a path too long for the file system: OSError (ENAMETOOLONG) escapes
    ["show", LONG],
    ["show", "--topology", LONG],
    ["compare", *SMALL, "--layout", "tp=8", "--calibration", LONG],
    ["emit", "--plan", LONG, "--out", "@NEW"],
    ["plan", *SMALL, "--plot", "@LONG"],
    # ~user of a user that does not exist: RuntimeError from Path.expanduser escapes
    ["show", "~nosuchuser"],
    ["show", "--topology", "~nosuchuser"],
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--calibration", "~nosuchuser"],
    # a newline in a user-given word is echoed into the error: two lines
    ["show", "a\nb"],
    ["memory", *SMALL, "--engine", "a\nb"],
    ["compare", *SMALL, "--layout", "tp=8\nx"],
    # numbers that overflow: OverflowError / ValueError escape
    ["plan", *SMALL, "--request-rate", "1.7976931348623157e308"],
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--memory-limit-gib", "nan"],
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--memory-limit-gib", "inf"],
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--memory-limit-gib", "1e300"],
    # a plan file whose pp_layer_partition is not a list of ints: TypeError escapes emit
    ["emit", "--plan", '@MUT:plan_pp:candidates.0.memory.pp_layer_partition=["14", "13"]', "--out", "@NEW"],
    ["emit", "--plan", "@MUT:plan_pp:candidates.0.memory.pp_layer_partition=5", "--out", "@NEW"],
    ["emit", "--plan", "@MUT:plan_pp:candidates.0.memory.pp_layer_partition=1.5", "--out", "@NEW"],
    # exit 2 after an output file was written: the plot stays behind when --emit is refused
    ["plan", *SMALL, "--plot", "@NEW", "--emit", "@FULLDIR"],
    # verify --write-calibration that cannot be written: exit 2 with no error line (--json) or with a
    # blank line before it (the transient progress line, on a non-terminal)
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--json", "--write-calibration", "@NEW"],
    [*VERIFY_CPU, "--layout", "tp=1", "--only", "fit", "--write-calibration", "@NEW"],
]


def pinned_id(argv: list[str]) -> str:
    text = shown(argv)[len("mla-plan "):].replace(" --device cpu --quick", "").replace(" ".join(SMALL), "...")
    return text if len(text) <= 100 else text[:100] + "..."


@pytest.mark.parametrize("argv", [pytest.param(a, marks=needs_torch if a[0] == "verify" else (), id=pinned_id(a))
                                  for a in PINNED])
def test_pinned(files, argv):
    invoke(files, argv)
