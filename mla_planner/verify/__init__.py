"""`mla-plan verify`: the plan held against the GPUs. What is checked (target.py), the checks and their
common result (check.py, checks.py, env.py, fit.py, gemms.py, collectives.py), the torch MLA decode
microkernel (kernel.py, fast.py, bench.py) and its sparse (DSA) sibling (sparse_kernel.py), calibration written back (calibrate.py), the report
(report.py) and the torchrun lines (torchrun.py). The modules that load torch are imported only when
`verify` runs its checks."""
