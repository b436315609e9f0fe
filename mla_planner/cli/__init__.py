"""The `mla-plan` command line: one module per command, renderers beside them."""
