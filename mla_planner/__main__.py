"""`python -m mla_planner ...` is `mla-plan ...`."""

from mla_planner.cli.app import main

main()
