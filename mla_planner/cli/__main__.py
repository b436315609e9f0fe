"""`python -m mla_planner.cli ...` (what verify's torchrun lines run) is `mla-plan ...`."""

from mla_planner.cli.app import main

main()
