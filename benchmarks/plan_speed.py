"""Wall time of the full plan search (issue 5's speed targets), on this machine.

    python benchmarks/plan_speed.py            # prints a table; --json FILE to save

Targets (2-core machine): DeepSeek-V3 on 2 x 8 H200 < 0.3 s; on 64 nodes x 8 H100 < 1 s. The time is
the search itself (layouts, screening, tuning, ranking) and the MTP hint on the best candidate (one more
tuning, for a model with an MTP layer; search.mtp.mtp_hint), median of repeats after one warm-up run, with
the model, topology and calibration already loaded - as `mla-plan plan` spends it after start-up. The
model's memo caches are cleared before every timed run, so each run is as cold as a fresh CLI call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace

from mla_planner.search.mtp import mtp_hint
from mla_planner.search.run import search
from mla_planner.search.tuning import Overrides
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Workload
from mla_planner.specs.topology import load_topology

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
CASES = [("deepseek-v3", "2x8xh200-ib", None, 0.3), ("deepseek-v3", "2x8xh100-ib", 64, 1.0),
         ("deepseek-v2", "2x8xh100-ib", None, None), ("kimi-k2", "4x8xh800-roce", None, None),
         # the 2026 MLA family on the first case's cluster: each as fast as DeepSeek-V3 there (issue 18)
         (os.path.join(FIXTURES, "hf", "DeepSeek-V3.2"), "2x8xh200-ib", None, None),
         (os.path.join(FIXTURES, "hf", "GLM-5.2-FP8"), "2x8xh200-ib", None, None),
         (os.path.join(FIXTURES, "hf", "Kimi-K2.5"), "2x8xh200-ib", None, None),
         (os.path.join(FIXTURES, "mistral", "Mistral-Large-3"), "2x8xh200-ib", None, None),
         # DeepSeek-V4 (issue 19) on the same cluster, and a GB200 NVL72 rack (issue 20)
         (os.path.join(FIXTURES, "hf", "DeepSeek-V4-Pro"), "2x8xh200-ib", None, None),
         (os.path.join(FIXTURES, "hf", "DeepSeek-V4-Flash-0731"), "2x8xh200-ib", None, None),
         ("deepseek-r1", "gb200-nvl72", None, None)]


def clear_caches() -> None:
    from mla_planner.perf import comm, request_times, step, layer_work as step_work
    from mla_planner.specs import layout
    from mla_planner.memory import accounting as memory, weights as memory_weights
    from mla_planner.search import disagg, tuning
    for fn in (comm.collective, layout.weight_key, memory.evaluate, memory.safe_memory_fraction,
               memory_weights._stage_weight_terms, request_times.mean_tpot_s,
               step_work._layer_weights,
               step._forward_memo, tuning._draft_knobs, disagg._pairs):
        fn.cache_clear()


def time_case(model: str, topology: str, nodes: int | None, repeats: int) -> dict:
    spec, topo = load_model(model).spec, load_topology(topology)
    if nodes:
        topo = replace(topo, nodes=nodes, name=f"{nodes}x8xh100-ib")
    calib = load_calibration(None, topo)
    search(spec, topo, Workload(), calib)  # warm-up (caches, imports)
    times = []
    for _ in range(repeats):
        clear_caches()
        t0 = time.perf_counter()
        result = search(spec, topo, Workload(), calib)
        mtp_hint(spec, topo, result.options, Workload(), calib, Overrides())
        times.append(time.perf_counter() - t0)
    best = result.options[0] if result.options else None
    return {"model": spec.name, "topology": topo.name, "gpus": topo.total_gpus, "median_s": statistics.median(times),
            "screened": result.screened, "tuned": len(result.options),
            "best": f"{best.layout.label} {best.engine} {best.kv_dtype}" if best else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    rows = []
    print(f"{'model':14} {'topology':14} {'GPUs':>5} {'median s':>9} {'target s':>9} {'screened':>9} best")
    for model, topology, nodes, target in CASES:
        r = time_case(model, topology, nodes, args.repeats)
        r["target_s"] = target
        rows.append(r)
        print(f"{r['model']:14} {r['topology']:14} {r['gpus']:>5} {r['median_s']:>9.3f} "
              f"{target if target else '-':>9} {r['screened']:>9} {r['best']}")
    print(f"({os.cpu_count()} CPUs)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
