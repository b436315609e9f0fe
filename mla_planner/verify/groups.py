"""Which collectives a plan rests on, over which ranks and with how many bytes, torch-free: the groups
`verify/collectives.py` measures under torchrun and the ones the verdict (`verify/coverage.py`) needs measured
before it can say the plan holds.

What is required is what the step model prices for this layout (`required_kinds`: the collective terms of the
target's decode step, perf.layer_comm, as perf.step keeps them), each measured by one check kind:
  all_reduce          TP all-reduce of n x d x 2 B (attn.tp_all_reduce; ffn/moe.all_reduce; the embedding's)
  all_gather          the logits all-gathered over the lm_head's group (logits_comm: tp, or tp x dp for SGLang's
                      DP attention), wide rows x V x 2 B
  dcp_all_gather      the queries all-gathered over the DCP group: dcp x n x H/tp x 576 x 2 B (attn.dcp_gather_q)
  dcp_reduce_scatter  the partial latent outputs reduce-scattered over it: dcp x n x H/tp x 512 x 2 B
                      (attn.dcp_combine; its small fp32 LSE all-gather is the DCP all-gather's kind)
  all_to_all          the MoE dispatch over the stage (DeepEP: moe.dispatch / moe.combine)
  dp_all_gather       DP attention without DeepEP: dp x n x d x 2 B all-gathered over the stage before the MoE or
  dp_reduce_scatter   the dense MLP, and reduce-scattered after (moe/ffn.dp_gather, moe/ffn.dp_scatter)
  p2p                 the pipeline hand-off, (hc_mult or 2) x n x d x 2 B / tp per TP rank (pp_handoff_s)
A latent-sharded layout's exchange (attn.latent_exchange) has no kind: no engine runs it, and the attention check
skips that layout, so such a plan is never verified.

Ranks sit in GPU order, TP innermost, pipeline stages contiguous (perf.layer_comm.stages_share_node); DCP groups are
blocks of dcp consecutive ranks inside a TP group (vLLM's parallel_state: the DCP ranks reshape the TP dimension).
With DP and PP, vLLM keeps each DP rank's tp x pp GPUs together (perf.layer_comm.dp_rank_blocks): a stage's EP /
DP-attention group is then strided over the instance, rank d x pp x tp + s x tp + t for stage s (vLLM's EP group:
all_ranks.transpose(1, 2)). A job smaller than one instance (a rehearsal) runs each collective over blocks of
min(group, world) ranks.

Pipeline pairs: every adjacent pair of stages, at every TP position (and every DP rank), is one pair. A middle
stage's rank belongs to two pairs: it receives from the stage before it and sends to the stage after it, so the
p2p check runs every pair a rank belongs to, in this list's order on every rank (a rank's earlier pair always
comes first in the list, so no wait can close a cycle).
"""

from __future__ import annotations

from dataclasses import dataclass

from mla_planner.core.units import ACT_BYTES
from mla_planner.engines.parallel import dense_tp
from mla_planner.perf.layer_comm import dp_rank_blocks
from mla_planner.perf.layer_work import ffn_rows
from mla_planner.specs.layout import Layout

KINDS = ("all_reduce", "all_gather", "dcp_all_gather", "dcp_reduce_scatter", "all_to_all", "dp_all_gather",
         "dp_reduce_scatter", "p2p")
OP = {"dcp_all_gather": "all_gather", "dp_all_gather": "all_gather", "dcp_reduce_scatter": "reduce_scatter",
      "dp_reduce_scatter": "reduce_scatter"}      # the collective each kind times (the others: the kind itself)
TERM_KIND = {"attn.tp_all_reduce": "all_reduce", "ffn.all_reduce": "all_reduce", "moe.all_reduce": "all_reduce",
             "attn.dcp_gather_q": "dcp_all_gather", "attn.dcp_combine": "dcp_reduce_scatter",
             "moe.dispatch": "all_to_all", "moe.combine": "all_to_all",
             "ffn.dp_gather": "dp_all_gather", "moe.dp_gather": "dp_all_gather",
             "ffn.dp_scatter": "dp_reduce_scatter", "moe.dp_scatter": "dp_reduce_scatter"}
LABEL = {"all_reduce": "TP all-reduce after wo", "all_gather": "all-gather of the logits",
         "dcp_all_gather": "DCP all-gather of the queries", "dcp_reduce_scatter": "DCP reduce-scatter of the "
         "partial outputs", "all_to_all": "EP all-to-all, MoE dispatch", "dp_all_gather": "DP-attention all-gather "
         "of the tokens", "dp_reduce_scatter": "DP-attention reduce-scatter of the outputs",
         "p2p": "pipeline send/recv"}


@dataclass(frozen=True)
class Planned:
    kind: str             # the check's kind: collective.<kind>
    op: str               # the collective it times (comm.collective's kind)
    label: str
    nbytes: int
    groups: list          # every group of this kind, as lists of global ranks (all ranks create all)
    planned_size: int


def op_of(kind: str) -> str:
    return OP.get(kind, kind)


def required_kinds(t) -> list[str]:
    """The check kinds measuring every collective the target's step model prices (module docstring)."""
    c = t.chosen
    layout, engine = c.layout, c.knobs.engine
    terms = {name for lt in t.step.layers.values() for name, s in lt.terms_s.items() if s}
    kinds = {TERM_KIND[name] for name in terms if name in TERM_KIND}
    if layout.tp > 1:
        kinds.add("all_reduce")          # the embedding's all-reduce over TP (stage 0), with attention's
    if dense_tp(layout, engine, "lm_head", c.knobs.dense_per_rank) > 1:
        kinds.add("all_gather")
    if layout.pp > 1:
        kinds.add("p2p")
    return [k for k in KINDS if k in kinds]


def planned_size(kind: str, layout: Layout, engine: str = "vllm", dense_per_rank: bool = False) -> int:
    """Ranks in one group of `kind` as planned (a pipeline pair is 2)."""
    if kind == "all_gather":
        return dense_tp(layout, engine, "lm_head", dense_per_rank)
    if kind.startswith("dcp_"):
        return layout.dcp
    return {"all_reduce": layout.tp, "p2p": 2}.get(kind, layout.stage_gpus)


def blocks(size: int, world: int) -> list[list[int]]:
    """Contiguous groups of min(size, world) ranks covering the world (a trailing remainder sits out)."""
    g = min(size, world)
    return [list(range(i, i + g)) for i in range(0, world - g + 1, g)] if g > 1 else []


def stage_groups(layout: Layout, engine: str, world: int) -> list[list[int]]:
    """Each stage's tp x dp GPUs (the EP / DP-attention group): contiguous, or strided over the instance where
    vLLM keeps each DP rank's stages together; a rehearsal's blocks of min(stage, world)."""
    if world >= layout.instance_gpus and dp_rank_blocks(layout, engine):
        tp, pp = layout.tp, layout.pp
        return [[d * pp * tp + s * tp + r for d in range(layout.dp) for r in range(tp)] for s in range(pp)]
    return blocks(layout.stage_gpus, world)


def pipeline_pairs(layout: Layout, engine: str, world: int) -> list[list[int]]:
    """[sender, receiver] for every adjacent stage pair at every TP position, in rank order of the sender; in a
    rehearsal (fewer ranks than one instance), disjoint pairs (2i, 2i + 1)."""
    if world >= layout.instance_gpus:
        if dp_rank_blocks(layout, engine):   # each DP rank's stages sit together (vLLM)
            return [[r, r + layout.tp] for r in range(layout.instance_gpus)
                    if (r % (layout.tp * layout.pp)) // layout.tp < layout.pp - 1]
        stage = layout.stage_gpus
        return [[r, r + stage] for r in range(stage * (layout.pp - 1))]
    return [[i, i + 1] for i in range(0, world - 1, 2)]


def groups_of(kind: str, layout: Layout, engine: str, dense_per_rank: bool, world: int) -> list[list[int]]:
    """Every group of `kind` over `world` ranks."""
    if kind == "p2p":
        return pipeline_pairs(layout, engine, world)
    if kind in ("all_to_all", "dp_all_gather", "dp_reduce_scatter"):
        return stage_groups(layout, engine, world)
    return blocks(planned_size(kind, layout, engine, dense_per_rank), world)


def planned_groups(t, world: int) -> dict[str, list[list[int]]]:
    """Each required kind -> its groups over `world` ranks."""
    knobs = t.chosen.knobs
    return {k: groups_of(k, t.chosen.layout, knobs.engine, knobs.dense_per_rank, world) for k in required_kinds(t)}


def _even(nbytes: float, size: int, world: int) -> int:
    """nbytes rounded up to a multiple of the group actually used (an even share per rank)."""
    g = max(min(size, world), 1)
    return int(-(-int(nbytes) // g) * g)


def message_bytes(t, kind: str, n: int, world: int) -> int:
    """The step model's message of `kind` (perf.layer_comm) for `n` rows one stage runs (one token a sequence)."""
    c = t.chosen
    s, layout, knobs = c.spec, c.layout, c.knobs
    d, size = s.hidden_size, planned_size(kind, layout, knobs.engine, knobs.dense_per_rank)
    heads = s.num_attention_heads // layout.tp
    nbytes = {
        "all_reduce": lambda: n * d * ACT_BYTES,
        "all_gather": lambda: ffn_rows(layout, knobs.engine, "lm_head", n, knobs.dense_per_rank) * s.vocab_size
        * ACT_BYTES,
        "dcp_all_gather": lambda: layout.dcp * n * heads * (s.kv_lora_rank + s.qk_rope_head_dim) * ACT_BYTES,
        "dcp_reduce_scatter": lambda: layout.dcp * n * heads * s.kv_lora_rank * ACT_BYTES,
        "all_to_all": lambda: max(n / layout.tp, 1) * s.num_experts_per_tok * d
        * (1 + 4 / 128 if c.topo.gpu.has_fp8 else ACT_BYTES),
        "dp_all_gather": lambda: layout.dp * n * d * ACT_BYTES,
        "dp_reduce_scatter": lambda: layout.dp * n * d * ACT_BYTES,
        "p2p": lambda: (s.hc_mult or 2) * n * d * ACT_BYTES // layout.tp,
    }[kind]()
    return int(nbytes) if kind in ("all_reduce", "p2p") else _even(nbytes, size, world)


def planned(t, n: int) -> list[Planned]:
    """The target's required collectives for `n` rows a stage, each with every group of it over the job's ranks."""
    world = t.ranks.world
    knobs = t.chosen.knobs
    return [Planned(kind, op_of(kind), LABEL[kind], message_bytes(t, kind, n, world), groups,
                    planned_size(kind, t.chosen.layout, knobs.engine, knobs.dense_per_rank))
            for kind, groups in planned_groups(t, world).items()]
