"""Torch MLA decode microkernel used by `mla-plan verify`: reference math (`kernel`),
a Triton fast path for the attention core (`fast`) and timing helpers (`bench`).

Needs torch (the `verify` extra); the rest of `mla_planner` never imports this package at
import time.
"""
