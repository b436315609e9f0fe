"""What `verify` checks: one plan candidate made concrete for the GPU this process drives.

A `Chosen` candidate (model, topology, layout, knobs, workload, calibration) becomes a `Target`:
the planned decode point (sequences per DP rank, the micro-batch one stage runs, the context each
sequence has), the pipeline stage this GPU plays, the step model's prediction at that point
(step.decode_step) and the memory model's footprint of this GPU (memory.memory_report). Torch-free:
the CLI builds a Target before anything imports torch.

The planned batch is the plan's own (`performance.concurrency_per_dp_rank`, what metrics.summary
writes) or, without a plan, the one metrics.evaluate sustains; the context is the workload's mean
decode context (input + output / 2), the point the step model prices (metrics.mean_tpot_s).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from math import ceil
from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.memory.report import memory_report
from mla_planner.memory.results import MemoryReport, RankMemory
from mla_planner.perf.layer_comm import dp_rank_blocks
from mla_planner.perf.metrics import evaluate
from mla_planner.perf.step import DecodeStep, decode_step
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout, query_heads_per_rank
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


@dataclass(frozen=True)
class Chosen:
    """One candidate to verify, wherever it came from (a plan file or command-line options)."""
    spec: ModelSpec
    topo: Topology
    layout: Layout
    knobs: Knobs
    workload: Workload
    calib: Calibration
    source: str                       # e.g. "plan.json candidate 1" or "--layout tp=8"
    batch: Optional[int] = None       # decode sequences per DP rank, when the plan or a flag says so
    context: Optional[int] = None     # tokens per sequence at the checked point
    notes: tuple = ()                 # how the candidate's knobs were completed (verify/as_planned.py)


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in a `torchrun` job (torch.distributed's env:// variables)."""
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @property
    def distributed(self) -> bool:
        return self.world > 1


def rank_info_from_env(env: Optional[dict] = None) -> RankInfo:
    """RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE as torchrun sets them (defaults: one process)."""
    env = os.environ if env is None else env
    try:
        world = int(env.get("WORLD_SIZE", "1"))
        rank, local = int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0"))
        local_world = int(env.get("LOCAL_WORLD_SIZE", str(world)))
    except ValueError as exc:
        raise PlanError(f"torchrun environment is malformed: {exc}") from None
    if world < 1 or not 0 <= rank < world:
        raise PlanError(f"torchrun environment is inconsistent: RANK={rank}, WORLD_SIZE={world}")
    return RankInfo(rank, world, local, max(local_world, 1))


@dataclass(frozen=True)
class Caps:
    """Shape caps of a CPU rehearsal: the code paths run, at sizes a CPU finishes in seconds."""
    batch: int          # decode sequences in the attention check
    context: int        # tokens per sequence in the attention check
    rows: int           # GEMM rows and collective tokens
    experts: int        # routed experts in the expert GEMM
    fit_bytes: int      # bytes the memory-fit rehearsal allocates in all


def caps_for(device_type: str, quick: bool) -> Optional[Caps]:
    """None on CUDA (planned shapes); small fixed shapes on CPU (smaller with --quick)."""
    if device_type == "cuda":
        return None
    if quick:
        return Caps(batch=2, context=128, rows=4, experts=2, fit_bytes=32 * 2**20)
    return Caps(batch=4, context=256, rows=8, experts=4, fit_bytes=128 * 2**20)


@dataclass(frozen=True)
class Target:
    chosen: Chosen
    batch: int              # decode sequences per DP rank (planned)
    micro_batch: int        # rows one stage runs per forward pass (batch split over pp micro-batches)
    context: int            # tokens per sequence, the new one included
    stage: int              # pipeline stage this GPU plays
    step: DecodeStep        # the step model at (batch, context)
    memory: RankMemory      # this GPU's planned footprint
    report: MemoryReport
    ranks: RankInfo
    notes: tuple = field(default_factory=tuple)

    @property
    def heads_per_rank(self) -> int:
        """Query heads the attention kernel of one rank runs: H / tp, x dcp (queries all-gathered
        over the DCP group, perf.layer_work._decode_core)."""
        layout = self.chosen.layout
        return query_heads_per_rank(self.chosen.spec, layout)

    @property
    def attention_context(self) -> int:
        """Cached tokens per sequence one rank reads: context / dcp (each DCP rank holds 1/dcp)."""
        return ceil(self.context / self.chosen.layout.dcp)

    @property
    def layer_kind(self) -> str:
        return "moe" if self.chosen.spec.is_moe else "dense"


def _planned_batch(c: Chosen) -> tuple[int, list[str]]:
    if c.batch:
        return c.batch, []
    m = evaluate(c.spec, c.topo, c.layout, c.knobs, c.workload, c.calib)
    if m.concurrency_per_dp_rank:
        return m.concurrency_per_dp_rank, []
    return 1, ["the plan sustains no batch at its targets (metrics: limited by "
               f"{m.concurrency_limit}); checking one sequence per DP rank"]


def rank_stage(rank: int, layout: Layout, engine: str) -> int:
    """The pipeline stage of global rank `rank` as the engine places ranks (perf.layer_comm.dp_rank_blocks):
    vLLM with DP and PP keeps each DP rank's tp x pp GPUs together; otherwise stages are in GPU order."""
    r = rank % layout.instance_gpus
    if dp_rank_blocks(layout, engine):
        return (r % (layout.tp * layout.pp)) // layout.tp
    return r // layout.stage_gpus


def _stage(report: MemoryReport, layout: Layout, ranks: RankInfo, engine: str) -> int:
    """This rank's stage when the job covers a whole instance; otherwise the stage with the least free
    memory (the tightest fit)."""
    if ranks.world >= layout.instance_gpus:
        return rank_stage(ranks.rank, layout, engine)
    return min(report.per_gpu, key=lambda g: g.terms["free"]).pp_stage


def make_target(c: Chosen, ranks: RankInfo = RankInfo()) -> Target:
    """The planned decode point, step prediction and footprint of the GPU this process drives."""
    if not attention_of(c.spec).verify_kernel:
        raise PlanError(f"verify checks MLA models; {c.spec.name} uses {c.spec.attention} attention")
    report = memory_report(c.spec, c.topo, c.layout, c.knobs)
    if not report.per_gpu:
        raise PlanError(f"layout {c.layout.label} cannot exist on {c.topo.name}: {'; '.join(report.reasons)}")
    batch, notes = _planned_batch(c)
    notes = list(c.notes) + notes
    if not report.fits:
        notes += [f"memory: {r}" for r in report.reasons]
    context = c.context or c.workload.mean_decode_context
    block = max(c.knobs.block_size, 1)
    tokens = batch * ceil(context / block) * block      # each sequence holds whole blocks (metrics.tokens_per_request)
    fit = report.requests_fit(ceil(context / block) * block)     # DeepSeek-V4: by the engine's rule in blocks
    if batch > fit:
        held = f"{report.kv_capacity_tokens:,}" if not report.capacity_rule else f"{fit:,} such sequences"
        notes.append(f"{batch:,} sequences of {context:,} tokens (in whole {block}-token blocks: "
                     f"{tokens:,}) per DP rank are more than the KV pool holds ({held}): "
                     "the engine would never run this point; the checks still time it")
    step = decode_step(c.spec, c.topo, c.layout, replace(c.knobs, mtp=False), batch, context, c.calib)
    if c.knobs.mtp:
        notes.append("MTP: the checks time a plain decode step (one query token per sequence, no drafter), and "
                     "the prediction they hold it to is of that step")
    stage = _stage(report, c.layout, ranks, c.knobs.engine)
    return Target(c, batch, step.micro_batch, context, stage, step, report.per_gpu[stage], report, ranks,
                  tuple(notes) + tuple(c.calib.notes))
