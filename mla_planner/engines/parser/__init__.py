"""Offline checker for vLLM / SGLang launch commands.

``check.check_command(argv, engine, gpu_arch)`` parses ``argv`` the way the
engine's argparse parser would (using the flag tables extracted from the
published wheels, see ``mla_planner/data/engines/README.md``) and then applies the
cross-flag rules recorded under ``rules`` in the same fixtures.  It returns a
list of human-readable problems; an empty list means the command is accepted.

Only the standard library is used; nothing from vLLM or SGLang is imported.

Parsing follows CPython 3.11 argparse (allow_abbrev=True for both engines):
exact option strings, ``--opt=value``, unique-prefix abbreviations of long
options (an ambiguous prefix is an error), ``-xVALUE`` for one-letter short
options, negative numbers as values, nargs None/?/*/+/N.  vLLM's
FlexibleArgumentParser pre-processing is reproduced as well: ``--model X`` is
moved to the positional model, underscores in option names become dashes,
``-O3`` means ``--optimization-level 3`` and dotted JSON options
(``--compilation-config.cudagraph_mode FULL``) are merged into their JSON
option.

The package: ``fixtures`` (the flag tables and rules, ``load_table``), ``values`` (value conversion),
``preprocess`` (vLLM's pre-processing), ``parsing`` (the argparse emulation), ``vllm_rules`` and
``sglang_rules`` (the cross-flag rules); this module holds the entry point, ``check_command``.
"""
