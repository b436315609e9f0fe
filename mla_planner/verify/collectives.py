"""The planned collectives, measured under `torchrun` (NCCL on GPUs, gloo on CPUs) against comm.py.

Which ones, over which ranks and with what messages: verify/groups.py (every collective the step model prices for
the layout - the TP all-reduce and the logits all-gather, DCP's all-gather and reduce-scatter, the EP all-to-all,
DP attention's all-gather and reduce-scatter, the pipeline hand-off - each with the step model's message for the
micro-batch of n rows one stage runs). Every rank creates every group of a kind, in the same order, then times the
groups it belongs to. busbw is nccl-tests' (PERFORMANCE.md): algbw = S / t, x 2(p-1)/p for all-reduce, x (p-1)/p
for all-gather, reduce-scatter and all-to-all, x 1 for p2p (comm.bus_factor); predicted busbw is
comm.collective's. These are NCCL's collectives (torch.distributed): the step prices a TP all-reduce inside a node
with the engines' own kernels instead (perf/custom_all_reduce.py, their published lines), which this does not
measure, so the factors it writes reach the other collectives and the all-reduces NCCL runs (above the kernels' cap,
over PCIe, across domains).

A collective that does not finish is a failed check, never a hang: the process group gets the
timeout (datetime.timedelta; gloo raises on it), and a watchdog thread ends the process with a
one-line message should a call still block past it (a hung NCCL kernel ignores Python).
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

from mla_planner.core.errors import PlanError
from mla_planner.perf.comm import bus_factor, collective, net_of
from mla_planner.verify.check import COLLECTIVE_BAND, Check, Timing, errored, one_line, ratio_check, skipped
from mla_planner.verify.env import DeviceInfo
from mla_planner.verify.groups import Planned, planned as groups_planned
from mla_planner.verify.in_step import NOISE_FLOOR_S, exposed_all_reduce_s, mean_s
from mla_planner.verify.target import Caps, Target

WATCHDOG_GRACE_S = 30.0
FACTOR = {("all_reduce", "ring"): "nvlink_ring_efficiency",      # intra-node: the one efficiency factor
          ("all_reduce", "nvls"): "nvls_allreduce_efficiency",    # that sets each algorithm's bandwidth term
          ("all_gather", "ring"): "nvlink_allgather_efficiency",
          ("reduce_scatter", "ring"): "nvlink_allgather_efficiency",
          ("all_to_all", "direct"): "nvlink_all_to_all_efficiency",
          ("p2p", "p2p"): "nvlink_p2p_efficiency"}


@contextmanager
def watchdog(seconds: float, what: str):
    """End the process with one line if the block is still running after `seconds`."""
    def give_up() -> None:
        sys.stderr.write(f"error: {what} did not finish within {seconds:g} s (a rank is missing, or a "
                         f"collective hung); verify gave up\n")
        sys.stderr.flush()
        os._exit(1)
    timer = threading.Timer(seconds, give_up)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def planned(t: Target, caps: Optional[Caps]) -> list[Planned]:
    """The required collectives at the checked micro-batch, each with every group of it (groups.planned)."""
    return groups_planned(t, min(t.micro_batch, caps.rows) if caps else t.micro_batch)


def _op(kind: str, nbytes: int, group, members: list[int], me: int, device: torch.device):
    """A closure running one collective of `kind` on `nbytes` (uint8 buffers: the bytes are what count)."""
    g = len(members)
    buf = torch.ones(nbytes, dtype=torch.uint8, device=device)
    if kind == "all_reduce":
        return lambda: dist.all_reduce(buf.view(torch.float16 if device.type == "cuda" else torch.float32)
                                       if nbytes % 4 == 0 else buf, group=group)
    if kind == "all_gather":
        part = torch.ones(nbytes // g, dtype=torch.uint8, device=device)   # not a view: NCCL in-place wants rank's slot
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(buf, part, group=group)
    if kind == "all_to_all":
        out = torch.empty_like(buf)
        return lambda: dist.all_to_all_single(out, buf, group=group)
    if kind == "reduce_scatter":
        part = torch.empty(nbytes // g, dtype=torch.uint8, device=device)
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(part, buf, group=group)
    peer = members[1] if me == members[0] else members[0]
    return (lambda: dist.send(buf, peer)) if me == members[0] else (lambda: dist.recv(buf, peer))


def _time(fn, group, device: torch.device, timing: Timing) -> float:
    """Mean seconds per call, back to back after warm-up and a barrier (nccl-tests' method; in_step.mean_s)."""
    return mean_s(fn, device, timing.warmup, timing.repeats, group)


def _prediction(t: Target, p: Planned, members: list[int]):
    nodes = len({r // t.ranks.local_world for r in members})
    try:
        return collective(p.op, p.nbytes, len(members), t.chosen.topo, t.chosen.calib, spans_nodes=nodes > 1), nodes
    except PlanError as exc:
        return exc, nodes


def _evidence(topo, calib, cost, measured_s: float, in_step: bool = False) -> Optional[dict]:
    """The factor a measured collective calibrates, or None.
    Inside a node (and p2p between nodes) one efficiency sets the bandwidth term, so it inverts:
    eff' = eff x bandwidth_s / (t - latency). A group spanning nodes mixes NVLink and NIC rates in its
    bandwidth term, so only a latency-bound all-reduce (latency_s >= bandwidth_s, e.g. a TP decode all-reduce
    of a few MB) is used, for `internode_latency_s`: the value that makes the prediction equal the
    measurement, internode' = t - (predicted - internode). A measurement below the model's other terms
    cannot be explained by that latency and calibrates nothing (nor does a cross-node all-to-all: NCCL's,
    which verify times, is not the DeepEP one the model prices). That latency comes from the all-reduce timed
    inside a step (`in_step`, verify/in_step.py), what the step model prices; the back-to-back timing is
    reported beside it, nccl-tests style, but does not calibrate it."""
    factor = FACTOR.get((cost.kind, cost.algorithm))
    net = net_of(topo, calib)
    if in_step and cost.nodes == 1:
        return None       # inside a node the back-to-back timing calibrates the bandwidth factor, once
    if cost.nodes > 1 and cost.kind != "p2p":
        rest_s = cost.time_s - calib.internode_latency_s
        if cost.kind != "all_reduce" or not in_step or cost.latency_s < cost.bandwidth_s or measured_s <= rest_s:
            return None   # bandwidth-bound, another kind's algorithm, back to back, or faster than the model's rest
        return {"factor": "internode_latency_s", "value": measured_s - rest_s, "seconds": measured_s}
    if cost.nodes > 1:
        inter = topo.inter_node
        factor = "socket_efficiency" if inter and inter.fabric == "ethernet" else "nic_efficiency"
    if factor is None or measured_s <= 1.1 * cost.latency_s:
        return None
    line = net.nic_line_bytes_per_s if cost.nodes > 1 else net.nvlink_bytes_per_s
    amount = cost.bandwidth_s * line * getattr(calib, factor)
    return {"factor": factor, "amount": amount, "peak": line, "seconds": measured_s - cost.latency_s}


def _check(t: Target, p: Planned, members: list[int], measured_s: float, judged: bool,
           in_step: Optional[tuple[float, int]] = None) -> Check:
    """`in_step`: (the filler's seconds, its matmul edge) when `measured_s` was timed after it (in_step.py)."""
    g = len(members)
    busbw = p.nbytes / measured_s * bus_factor(p.op, max(g, 2))
    cost, nodes = _prediction(t, p, members)
    where = f"{p.nbytes:,} B over {g} ranks on {nodes} node(s)" + (
        f" (rehearsal: {g} of the planned {p.planned_size})" if g < p.planned_size else "")
    extra = {"time_s": measured_s, "message_bytes": p.nbytes, "group_size": g, "nodes": nodes,
             "algbw_bytes_per_s": p.nbytes / measured_s, "members": list(members),
             "planned_group_size": p.planned_size}
    if p.kind == "p2p":
        where = f"ranks {members[0]} -> {members[1]}, " + where
    if isinstance(cost, Exception):
        return Check(f"collective.{p.kind}", None, busbw, "B/s", None, "not predicted", None,
                     f"{p.label}: {where}; {measured_s * 1e6:,.1f} us; no prediction: {cost}", extra=extra)
    evidence = _evidence(t.chosen.topo, t.chosen.calib, cost, measured_s, in_step is not None)
    extra |= {"predicted_time_s": cost.time_s, "algorithm": cost.algorithm}
    if evidence:
        extra["evidence"] = evidence
    how = (f" after {in_step[0] * 1e6:,.0f} us of compute ({in_step[1]}^2 matmul), as in a decode step"
           if in_step else " back to back")
    detail = (f"{p.label}: {where}; {measured_s * 1e6:,.1f} us measured{how}, {cost.time_s * 1e6:,.1f} us "
              f"predicted ({cost.algorithm})")
    name = f"collective.{p.kind}" + (".in_step" if in_step else "")
    if in_step:
        extra |= {"filler_s": in_step[0], "filler_edge": in_step[1]}
    return ratio_check(name, cost.busbw_bytes_per_s, busbw, "B/s", COLLECTIVE_BAND, judged, detail, extra)


GATHER: list = []    # the gloo group the ranks' results are gathered over, once the collectives' group is up


def _start(dev: DeviceInfo, timeout_s: float) -> None:
    """The process group (NCCL on GPUs, gloo on CPUs), and beside an NCCL one a gloo group for gathering the
    results (objects gathered on the CPU; created now, while every rank is here)."""
    backend = "nccl" if dev.type == "cuda" else "gloo"
    pg_timeout = timeout_s + (2 * WATCHDOG_GRACE_S if backend == "nccl" else 0)  # our watchdog speaks first
    with watchdog(timeout_s + WATCHDOG_GRACE_S, f"torch.distributed ({backend}) start-up"):
        dist.init_process_group(backend, timeout=timedelta(seconds=pg_timeout))
        GATHER[:] = [dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
                     if backend != "gloo" else None]


def collective_checks(t: Target, dev: DeviceInfo, timing: Timing, caps: Optional[Caps],
                      timeout_s: float) -> list[Check]:
    """Every planned collective this rank takes part in, every group of it (a middle pipeline stage's rank: both
    of its pairs, in groups.pipeline_pairs' order); started only under torchrun (WORLD_SIZE > 1)."""
    if not t.ranks.distributed:
        return [skipped("collectives", "not started under torchrun: see `mla-plan verify --print-launch`")]
    try:
        _start(dev, timeout_s)
    except Exception as exc:  # noqa: BLE001 - DistStoreError, DistNetworkError, RuntimeError...
        return [errored("collectives", f"rank {t.ranks.rank} of {t.ranks.world}: the process group did not form "
                        f"within {timeout_s:g} s: {one_line(exc)}")]
    out, me = [], t.ranks.rank
    for p in planned(t, caps):
        try:
            with watchdog(timeout_s + WATCHDOG_GRACE_S, f"collective {p.kind}"):
                handles = [(members, dist.new_group(members)) for members in p.groups]
        except Exception as exc:  # noqa: BLE001 - a group that cannot form ends the section
            return out + [errored(f"collective.{p.kind}", f"rank {me}: {one_line(exc)}")]
        for members, group in handles:
            if me not in members:
                continue
            try:
                with watchdog(timeout_s + WATCHDOG_GRACE_S, f"collective {p.kind} over ranks {members}"):
                    fn = _op(p.op, p.nbytes, group, members, me, dev.torch_device)
                    measured_s = _time(fn, group, dev.torch_device, timing)
                    stepped = (exposed_all_reduce_s(fn, group, dev.torch_device, _half_layer_s(t), timing.warmup,
                                                    timing.repeats) if p.kind == "all_reduce" else None)
            except Exception as exc:  # noqa: BLE001 - a timed-out or broken collective ends the section
                return out + [errored(f"collective.{p.kind}", f"rank {me}, ranks {members}: {one_line(exc)}")]
            out.append(_check(t, p, members, measured_s, dev.type == "cuda"))
            if stepped:
                out.append(_check(t, p, members, stepped[0], dev.type == "cuda" and stepped[0] > NOISE_FLOOR_S,
                                  in_step=stepped[1:]))
    return out


def _half_layer_s(t: Target) -> float:
    """Half a planned layer's kernel time: what runs before each of its two TP all-reduces."""
    return t.step.layers[t.layer_kind].compute_s / 2


def _close() -> None:
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a broken group may not close cleanly; the process ends anyway
        pass


def share_results(checks: list[Check], rank: int, world: int, timeout_s: float) -> Optional[list[Check]]:
    """Tag this rank's checks, gather every rank's on rank 0 (None elsewhere), close the process group. Under
    torchrun the results are gathered whatever ran: where no collective did (`--only attention`), over a gloo
    group formed for it. This rank's checks alone: one process, or a collective of this rank that failed (its
    groups may be broken; it reports in one line), or a gather that failed (named as a check)."""
    mine = [replace(c, rank=rank) for c in checks]
    if world == 1:
        return mine
    if any(c.error for c in mine if c.name.startswith("collective")):
        _close()
        return mine
    gathered: Optional[list] = [None] * world if rank == 0 else None
    try:
        with watchdog(timeout_s + WATCHDOG_GRACE_S, "gathering the ranks' results"):
            if not dist.is_initialized():      # no collective ran: a gloo group only to gather the results
                dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))
                GATHER[:] = [None]
            dist.gather_object(mine, gathered, dst=0, group=GATHER[0] if GATHER else None)
    except Exception as exc:  # noqa: BLE001
        return mine + [errored("collectives.gather", one_line(exc))]
    finally:
        _close()
    return [c for part in gathered for c in part] if gathered is not None else None


def leave_gathered_rank() -> None:
    """End a non-zero rank whose results rank 0 gathered: status 0 (rank 0 carries the verdict), at once. torchrun
    stops every rank still running once one exits with a failure: a failed status here had it SIGTERM rank 0
    mid-report, and a slow exit (interpreter teardown with torch loaded) had it SIGTERM this rank once rank 0 exited
    with the verdict's status."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
