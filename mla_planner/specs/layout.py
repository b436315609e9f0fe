"""The layout: how one deployment is spread over GPUs. The vocabulary every command shares.

Per pipeline stage, attention runs as `tp` (tensor parallel) x `dp` (data-parallel attention groups)
and the MoE as `moe_tp` x `ep` over the same GPUs (tp*dp == moe_tp*ep). `pp` stages, `dcp` decode
context parallelism (reuses TP ranks; each holds 1/dcp of a sequence's cached tokens), `replicas`
independent copies behind a load balancer, and `kv_layout` for how a TP group holds the latent cache:
  replicated      every TP rank stores every token's full latent (vLLM and SGLang under plain TP;
                  the seed's Route A)
  latent-sharded  each TP rank keeps kv_lora_rank/tp of the latent width (the seed's Route B)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from functools import lru_cache

from mla_planner.core.errors import PlanError
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.model import ModelSpec

KV_LAYOUTS = ("replicated", "latent-sharded")


@dataclass(frozen=True, order=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    dcp: int = 1
    kv_layout: str = "replicated"
    replicas: int = 1

    @property
    def stage_gpus(self) -> int:
        return self.tp * self.dp

    @property
    def moe_tp(self) -> int:
        return self.stage_gpus // self.ep

    @property
    def instance_gpus(self) -> int:
        return self.stage_gpus * self.pp

    @property
    def total_gpus(self) -> int:
        return self.instance_gpus * self.replicas

    @property
    def label(self) -> str:
        parts = [f"tp{self.tp}"]
        for name in ("pp", "dp", "ep", "dcp"):
            if getattr(self, name) > 1 or (name == "ep" and self.dp > 1):   # ep1 said: DP without EP
                parts.append(f"{name}{getattr(self, name)}")
        if self.kv_layout != "replicated":
            parts.append("latent-sharded")
        text = "·".join(parts)
        return f"{self.replicas}x({text})" if self.replicas > 1 else text

    def cache_split_words(self) -> str:
        """How the layout splits the cache beyond the TP group (the attention kind words the TP part)."""
        how = ""
        if self.dcp > 1:
            how += f", tokens split over {self.dcp} DCP ranks"
        if self.dp > 1:
            how += f", requests split over {self.dp} DP-attention ranks"
        return how


@lru_cache(maxsize=None)
def weight_key(layout: Layout) -> Layout:
    """The layout reduced to what splits weights (tp, dp, ep): the memo key of the weight models."""
    return replace(layout, pp=1, dcp=1, kv_layout="replicated", replicas=1)


def rdma_between_nodes(topo) -> bool:
    """Whether the nodes talk over InfiniBand or RoCE (what NVSHMEM, and so DeepEP, needs across nodes)."""
    return topo.inter_node is not None and topo.inter_node.fabric in ("infiniband", "roce")


def deepep_runs(topo, stage_gpus: int) -> bool:
    """Whether both engines' DeepEP can carry a stage's all-to-all (engines.parallel.a2a_problem): NVLink inside
    a node and RDMA between nodes. Where it cannot, DP attention runs with the MoE tensor-parallel over the
    stage (ep=1: vLLM flattens TP across DP, fused_moe/config.py; SGLang --attn-dp-size without --ep-size)."""
    return topo.intra_node.kind != "pcie" and (stage_gpus <= topo.domain_gpus or rdma_between_nodes(topo))


def parse_layout(text: str, topo=None) -> Layout:
    """`"tp=8,pp=2"`, `"tp=1,dp=16,ep=16"`, `"tp=8,kv=latent-sharded"`, `"tp=8,replicas=2"`, or a label as
    the tables print it: `"tp8·pp2"`, `"2x(tp8)"`, `"tp8·latent-sharded"`. DP attention without an ep goes
    with EP over the stage, or with ep=1 on a `topo` where DeepEP cannot run (`deepep_runs`)."""
    text = _from_label(text.strip())
    names = {f.name for f in fields(Layout)}
    values: dict = {}
    for item in filter(None, (p.strip() for p in text.replace(" ", ",").split(","))):
        key, sep, val = item.partition("=")
        key = {"kv": "kv_layout"}.get(key.strip(), key.strip())
        if not sep or key not in names:
            raise PlanError(f"layout '{text}': expected key=value with keys {sorted(names - {'kv_layout'}) + ['kv']}, "
                            f"got '{item}'")
        if key in values:      # `tp=8,tp=16` was taken as tp=16
            raise PlanError(f"layout '{text}': {item.partition('=')[0].strip()} is given twice")
        if key == "kv_layout":
            if val not in KV_LAYOUTS:
                raise PlanError(f"layout '{text}': kv must be one of {', '.join(KV_LAYOUTS)}, got '{val}'")
            values[key] = val
            continue
        if not (val.isascii() and val.isdigit()) or int(val) < 1:
            raise PlanError(f"layout '{text}': {key} must be a positive integer, got '{val}'")
        values[key] = int(val)
    if not values:
        raise PlanError(f"layout '{text}': empty; expected e.g. 'tp=8,pp=2'")
    layout = Layout(**values)
    if "ep" not in values and layout.dp > 1 and (topo is None or deepep_runs(topo, layout.stage_gpus)):
        layout = replace(layout, ep=layout.stage_gpus)  # DP attention goes with EP over the stage (SGLang/vLLM recipes)
    return layout


def _from_label(text: str) -> str:
    """`2x(tp8·pp2·latent-sharded)` -> `tp=8,pp=2,kv=latent-sharded,replicas=2`; other text unchanged."""
    match = re.fullmatch(r"(\d+)x\((.*)\)", text)
    replicas, body = (match.group(1), match.group(2)) if match else (None, text)
    if "·" not in body and not re.fullmatch(r"[a-z]+\d+", body):
        return text
    parts = []
    for token in body.split("·"):
        kv = re.fullmatch(r"(tp|pp|dp|ep|dcp)(\d+)", token)
        parts.append(f"{kv.group(1)}={kv.group(2)}" if kv else f"kv={token}")
    return ",".join(parts + ([f"replicas={replicas}"] if replicas else []))


def query_heads_per_rank(spec: ModelSpec, layout: Layout) -> int:
    """The query heads one rank's attention kernel computes: H / tp, times dcp (DCP all-gathers its group's heads)."""
    return spec.num_attention_heads // layout.tp * layout.dcp


def layout_problems(layout: Layout, spec: ModelSpec, gpus_per_node: int, total_gpus: int) -> list[str]:
    """Why `layout` cannot exist for this model on this cluster (empty when it can)."""
    out = []
    H = spec.num_attention_heads
    if H % layout.tp:
        out.append(f"{H} attention heads are not divisible by tp={layout.tp}")
    if layout.stage_gpus % layout.ep:
        out.append(f"ep={layout.ep} does not divide the stage's tp*dp={layout.stage_gpus} GPUs")
    if layout.ep > 1 and not spec.is_moe:
        out.append("ep>1 needs a mixture-of-experts model")
    if spec.is_moe and spec.n_routed_experts % layout.ep:
        out.append(f"{spec.n_routed_experts} routed experts are not divisible by ep={layout.ep}")
    if layout.tp % layout.dcp:
        out.append(f"tp={layout.tp} is not divisible by dcp={layout.dcp} (vLLM: tp_size must be divisible by dcp_size)")
    out += attention_of(spec).layout_problems(spec, layout)
    if layout.pp > spec.num_hidden_layers:
        out.append(f"pp={layout.pp} exceeds {spec.num_hidden_layers} layers")
    for what, gpus in (("a stage", layout.stage_gpus), ("an instance", layout.instance_gpus)):
        if (gpus > gpus_per_node and gpus % gpus_per_node) or (gpus < gpus_per_node and gpus_per_node % gpus):
            out.append(f"{what} of {gpus} GPUs does not pack into nodes of {gpus_per_node}")
            break
    if layout.total_gpus > total_gpus:
        out.append(f"needs {layout.total_gpus} GPUs, the cluster has {total_gpus}")
    return out + fp8_block_problems(spec, layout)


def _quantized_splits(spec: ModelSpec, layout: Layout, dtype: str) -> list[tuple[str, int, int]]:
    """(what, width, GPUs it is split over) for the tensor-parallel splits of `dtype` weights both engines make:
    the routed experts' intermediate size over the MoE-TP group, and at dp = 1 the dense MLP's and shared
    experts' over tp (SGLang under DP attention splits those its own way: engines/layouts.py)."""
    out = []
    if spec.is_moe and spec.expert_dtype == dtype:
        out.append(("routed experts", spec.moe_intermediate_size, layout.moe_tp))
    if spec.weight_dtype == dtype and layout.dp == 1:
        if spec.num_dense_layers:
            out.append(("dense MLP", spec.intermediate_size, layout.tp))
        if spec.n_shared_experts:
            out.append(("shared experts", spec.moe_intermediate_size * spec.n_shared_experts, layout.tp))
    return [(what, size, ways) for what, size, ways in out if ways > 1]


def fp8_block_problems(spec: ModelSpec, layout: Layout) -> list[str]:
    """Block-scaled weights split so a 128 x 128 scale block would straddle two GPUs: both engines refuse
    to load FP8 so (vLLM layers/quantization/utils/fp8_utils.py `validate_fp8_block_shape` and `_moe`: each
    GPU's share of a split dimension must be a multiple of the block; SGLang's fp8.py the same), and SGLang
    block INT8 too (blockwise_int8.py raises "not divisible by weight quantization block_n")."""
    block = max(spec.weight_block_size)
    return [f"the intermediate size of the {what} ({size:,}) over {ways} GPUs is {size // ways:,} per GPU, not a "
            f"multiple of the {dtype.upper()} checkpoint's {block}-wide scale blocks: the engines refuse to load it"
            for dtype in ("fp8", "int8") if spec.block_scaled(dtype)
            for what, size, ways in _quantized_splits(spec, layout, dtype) if size % ways or (size // ways) % block]


def int4_group_fallbacks(spec: ModelSpec, layout: Layout) -> list[str]:
    """int4 group-quantized weights split so a GPU's share of an input dimension is not a whole number of
    groups: the engines still load them, but leave their Marlin kernels for slower ones (vLLM auto_awq.py:
    "Falling back to unoptimized AWQ kernels" for linear layers, MoeWNA16 with halved groups for the experts,
    layers/quantization/moe_wna16.py; SGLang awq.py the same), which the step model does not price."""
    group = spec.int4_group_size
    return [f"int4 {what}: {size // ways:,} input columns a GPU ({size:,} over {ways}), not a whole number of "
            f"{group}-value groups: the engines fall back from Marlin to slower kernels the plan does not price"
            for what, size, ways in _quantized_splits(spec, layout, "int4") if (size // ways) % group]
