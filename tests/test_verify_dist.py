"""A real two-process gloo run of verify's collective checks, started the way a user starts it: torchrun
(`python -m torch.distributed.run`) on `-m mla_planner.cli verify`. Rank 0 gathers both ranks' results
into one JSON document; each collective's busbw follows nccl-tests' definition from its own timing. The layout,
tp2·pp2·dp2 (EP over the stage: the step model prices DeepEP's all-to-all there, not with dp = 1), is rehearsed on
two processes: every kind over groups of two."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port

pytest.importorskip("torch")

from mla_planner.perf.comm import bus_factor

ROOT = Path(__file__).resolve().parent.parent



def test_two_rank_gloo_collectives():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "mla_planner.cli", "verify", "--device", "cpu", "--only", "collectives", "--json", "--quick",
           "--model", "deepseek-v2-lite", "--topology", "8xh200", "--layout", "tp=2,pp=2,dp=2", "--timeout", "30"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)             # rank 0 alone prints, with every rank's checks
    assert data["verdict"] == "rehearsal" and data["ranks"] == [0, 1]   # CPU: none judged
    rates = [c for c in data["checks"] if c["unit"] == "B/s" and c["ratio"]]
    assert rates and all(c["speed_vs_predicted"] == c["ratio"] for c in rates)
    kinds = ("all_reduce", "all_gather", "all_to_all", "p2p")
    for rank in (0, 1):
        mine = {c["name"]: c for c in data["checks"] if c["rank"] == rank}
        assert mine["env.gpu"]["status"] == "info"
        for kind in kinds:
            c = mine[f"collective.{kind}"]
            extra = c["extra"]
            assert c["status"] == "info" and c["unit"] == "B/s" and extra["group_size"] == 2, c
            assert c["measured"] == pytest.approx(extra["message_bytes"] / extra["time_s"] * bus_factor(kind, 2))
            assert c["predicted"] > 0 and extra["predicted_time_s"] > 0 and extra["nodes"] == 1
        stepped = mine["collective.all_reduce.in_step"]     # the same all-reduce after half a layer's compute
        assert stepped["extra"]["filler_s"] > 0 and stepped["extra"]["time_s"] > 0
        assert stepped["extra"]["message_bytes"] == mine["collective.all_reduce"]["extra"]["message_bytes"]
        assert "as in a decode step" in stepped["detail"] and "back to back" in mine["collective.all_reduce"]["detail"]
    # both ranks ran the same filler (the group's largest), and inside a node the in-step timing calibrates nothing
    edges = {c["extra"]["filler_edge"] for c in data["checks"] if c["name"] == "collective.all_reduce.in_step"}
    assert len(edges) == 1
    assert all("evidence" not in c["extra"] for c in data["checks"] if c["name"] == "collective.all_reduce.in_step")
    # message sizes are the step model's, at the CPU cap of 4 rows: n x d x 2 B for the TP all-reduce
    first = {c["name"]: c["extra"].get("message_bytes") for c in data["checks"] if c["rank"] == 0}
    assert first["collective.all_reduce"] == 4 * 2048 * 2
    assert first["collective.all_gather"] == 4 * 102400 * 2
    assert first["collective.p2p"] == 2 * 4 * 2048 * 2 // 2
