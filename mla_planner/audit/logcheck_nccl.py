"""nccl-tests' all_reduce_perf output held against the cross-node all-reduce a plan candidate prices (the
command the emitted README gives for a TP group spanning nodes: launch/netcheck.py).

all_reduce_perf prints one row per message size: size (B), count, type, redop, root (newer releases), then
the out-of-place time (us), algbw and busbw (GB/s), #wrong, then the same in place (NVIDIA/nccl-tests
src/common.cu). The row nearest the planned size is compared with the model's time at that row's size, over
the candidate's TP group: nccl-tests' hot loop is what the model is validated against (tests/test_comm.py),
so a much slower table means the network itself is slower than planned; a table near the model can still hide
a slower all-reduce inside the engine, which only `mla-plan verify`'s in-step timing measures.
"""

from __future__ import annotations

import re
from typing import Optional

from mla_planner.audit.logcheck_read import LogCheck
from mla_planner.launch.build import launch_inputs
from mla_planner.launch.netcheck import cross_node_all_reduce
from mla_planner.perf.comm import collective
from mla_planner.search.planfile import Candidate, Plan
from mla_planner.specs.calibration import load_calibration

# a row, after any `mpirun --tag-output` prefix ("[1,0]<stdout>:"): size, count, type, redop, root?, time ...; every
# field bounded and on one line, the size and time only as int() / float() read them (a row that is not is skipped)
ROW = re.compile(r"^(?:\[[\d,]{1,20}\]<stdout>:)?[ \t]{0,40}(\d{1,15})[ \t]{1,40}\d{1,15}[ \t]{1,40}[a-z]\w{0,20}"
                 r"[ \t]{1,40}(?:sum|prod|max|min|avg)[ \t]{1,40}(?:-?\d{1,6}[ \t]{1,40})?(\d{1,12}(?:\.\d{1,12})?)"
                 r"[ \t]{1,40}[\d.]{1,20}[ \t]{1,40}[\d.]{1,20}(?![\d.])", re.M)
HEADER = re.compile(r"#\s+size\s+count\s+type\s+redop")
TEST_NAME = re.compile(r"Collective test starting:\s*(\w+)")
RANKS = re.compile(r"#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid")
SLOW = 1.3          # over the model's time: beyond the 15-20 % the published tables sit from it (test_comm)
SUSPECT = 0.5       # under the model's time by this much: not a run over the planned GPUs across the nodes
NEAR = 2.0          # the row used must be within this factor of the planned size


def rows(text: str) -> dict[int, float]:
    """{message bytes: out-of-place time in seconds} of every all_reduce_perf row in `text` (the last wins)."""
    return {int(size): float(us) * 1e-6 for size, us in ROW.findall(text)} if HEADER.search(text) else {}


def table_summary(text: str) -> Optional[LogCheck]:
    """Without a plan: the table's span and its largest message's time, nothing to hold them against."""
    table = rows(text)
    if not table:
        return None
    top = max(table)
    return LogCheck("nccl_tests", "absent", f"an all_reduce_perf table of {len(table)} size(s), {min(table):,} B to "
                                            f"{top:,} B ({table[top] * 1e6:,.1f} us at {top:,} B); with --plan it is "
                                            "held against the cross-node all-reduce the plan prices")


def nccl_tests_check(text: str, plan: Plan, cand: Candidate) -> Optional[LogCheck]:
    """None when the text holds no all_reduce_perf table; else the verdict at the planned size."""
    table = rows(text)
    if not table:
        return None
    net = cross_node_all_reduce(launch_inputs(plan, cand), cand.performance)
    if net is None:
        return LogCheck("nccl_tests", "absent", f"an all_reduce_perf table, but {cand.layout.label} runs no "
                                                "all-reduce across nodes: nothing to compare it with")
    named = TEST_NAME.findall(text)
    if named and set(named) != {"all_reduce_perf"}:
        return LogCheck("nccl_tests", "absent", f"a {', '.join(sorted(set(named)))} table: the plan prices the "
                                                "all-reduce, run all_reduce_perf")
    ranks = len(RANKS.findall(text))
    if ranks and ranks != cand.layout.tp:
        return LogCheck("nccl_tests", "warn", f"the table's run had {ranks} rank(s), the all-reduce the plan prices "
                                              f"spans {cand.layout.tp} GPUs: rerun with -np {cand.layout.tp} over the "
                                              "nodes (a binary built with `make MPI=1`)")
    planned = net["nbytes"]
    size = min(table, key=lambda s: abs(s - planned))
    if not planned / NEAR <= size <= planned * NEAR:
        return LogCheck("nccl_tests", "warn", f"no row near the planned {planned:,} B (nearest {size:,} B): rerun "
                                              f"with -b {planned} -e {planned}")
    topo = plan.topology
    # nccl-tests' hot loop against NCCL's own model, as the emitted README prices it (launch/netcheck.py): not the
    # plan's calibration, whose latencies verify measures inside a decode step
    model_s = collective("all_reduce", size, cand.layout.tp, topo, load_calibration(None, topo)).time_s
    got_s, ratio = table[size], table[size] / model_s
    extra_ms = net["per_step"] * max(0.0, got_s - model_s) * 1e3
    words = (f"all_reduce_perf at {size:,} B (planned {planned:,} B): {got_s * 1e6:.0f} us against the model's "
             f"{model_s * 1e6:.0f} us ({ratio:.2f}x) over {cand.layout.tp} GPUs")
    if ratio < SUSPECT:
        return LogCheck("nccl_tests", "warn", f"{words}: faster than any two-node run can be, so not a run over the "
                                              f"{cand.layout.tp} GPUs across the nodes (one node's GPUs, or ranks "
                                              "without MPI: build nccl-tests with `make MPI=1`)")
    if ratio > SLOW:
        return LogCheck("nccl_tests", "fail", f"{words}: the network is slower than planned; at this speed each "
                                              f"decode step takes ~{extra_ms:.1f} ms more than the plan's "
                                              f"{net['step_ms']} ms. Check NET/Socket, NCCL_IB_HCA, GPUDirect RDMA "
                                              "(nvidia_peermem) before the engine")
    return LogCheck("nccl_tests", "ok", f"{words}; inside the engine it can still be slower: `mla-plan verify` "
                                        "under torchrun times it within a step (collective.all_reduce.in_step)")
