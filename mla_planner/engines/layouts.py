"""Why an engine cannot start a layout that exists (layout.layout_problems holds what cannot exist at all).

One answer for every command: `plan` rejects the layout for that engine, `compare` notes that it will not
start as priced, `memory` and `verify` refuse it (exit 2). The rules, each with its source:
  vLLM's own layout limits                    `vllm_layout_problem` below     (EP group = tp*dp; a DP rank
                                              whole on one node across nodes)
  DeepEP on this hardware                     engines.parallel.a2a_problem
  DeepEP with this checkpoint's experts       engines.parallel.deepep_experts_problem (SGLang, int4 experts)
  FP8 scale blocks split across GPUs          layout.fp8_block_problems covers the splits both engines
                                              share; here SGLang's own under DP attention: its dense MLP and
                                              shared experts over tp*dp (engines.parallel.dense_tp), which its
                                              fp8.py block-shape check refuses to load when a GPU's
                                              share is not a multiple of the block
"""

from __future__ import annotations

from mla_planner.engines.sparse import is_sparse
from mla_planner.engines.parallel import deepep_experts_problem, a2a_problem, dense_tp
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


def engine_layout_problem(spec: ModelSpec, topo: Topology, layout: Layout, engine: str,
                          dense_per_rank: bool = False, deepep: bool | None = None) -> str:
    """The first reason `engine` cannot start `layout` ('' when it can). `deepep`: whether the MoE runs over
    DeepEP, when a command says so (lint; False skips the DeepEP hardware rule); None: as the plan launches it
    (engines.parallel.uses_ep_all_to_all)."""
    return (launch_problem(engine, layout, topo.gpus_per_node)
            or (a2a_problem(engine, layout, topo) if deepep is not False else "")
            or deepep_experts_problem(engine, spec, layout)
            or sglang_fp8_dense_problem(spec, layout, engine, dense_per_rank, deepep)
            or sglang_dsa_dcp_problem(spec, layout, engine))


def sglang_dsa_dcp_problem(spec: ModelSpec, layout: Layout, engine: str) -> str:
    """SGLang 0.5.23 runs DeepSeek Sparse Attention under DCP with the index keys replicated on every DCP rank
    (model_executor/pool_configurator.py: "The index-K buffer is replicated under DCP while the latent KV
    shards") and its DSA kernels moved to trtllm (arg_groups/model_overrides/deepseek_v2.py): not modelled."""
    if engine != "sglang" or layout.dcp == 1 or not is_sparse(spec):
        return ""
    return ("SGLang's sparse attention under DCP (index keys replicated per DCP rank, kernels moved to trtllm) is "
            "not modelled; vLLM's is")


def sglang_fp8_dense_problem(spec: ModelSpec, layout: Layout, engine: str, dense_per_rank: bool = False,
                             deepep: bool | None = None) -> str:
    """SGLang under DP attention splits the dense MLP and shared experts over tp*dp (unless per rank or, for
    shared experts, replicated under DeepEP): with block-scaled FP8 weights each GPU's share must be a whole
    number of scale blocks (layers/quantization/fp8.py `validate_block_quant_shapes`)."""
    if engine != "sglang" or layout.dp == 1 or not spec.block_scaled(spec.weight_dtype):
        return ""
    block = max(spec.weight_block_size)
    for group, size in (("dense_ffn", spec.intermediate_size if spec.num_dense_layers else 0),
                        ("shared_experts", (spec.moe_intermediate_size or 0) * spec.n_shared_experts)):
        ways = dense_tp(layout, engine, group, dense_per_rank)
        if group == "shared_experts" and deepep is not None:
            ways = 1 if deepep else layout.stage_gpus
        if size and ways > 1 and (size % ways or (size // ways) % block):
            what = "dense MLP" if group == "dense_ffn" else "shared experts"
            return (f"SGLang splits the {what} ({size:,} wide) over the stage's {ways} GPUs under DP attention: "
                    f"{size // ways:,} per GPU, not a multiple of the {spec.weight_dtype.upper()} checkpoint's "
                    f"{block}-wide scale blocks, so it refuses to load it"
                    + ("; --moe-dense-tp-size 1 (dense per rank) avoids that" if group == "dense_ffn" else ""))
    return ""


def vllm_layout_problem(L: Layout, per_node: int) -> str:
    """Why vLLM 0.33 cannot launch this layout ('' when it can); the search skips such layouts for vLLM."""
    if L.ep > 1 and L.ep != L.tp * L.dp:
        return (f"{L.label}: vLLM's expert-parallel group is always tp*dp = {L.tp * L.dp} GPUs "
                f"(--enable-expert-parallel has no size); ep={L.ep} cannot be expressed in vLLM")
    if L.dp > 1 and L.instance_gpus > per_node and (L.tp * L.pp > per_node or per_node % (L.tp * L.pp)):
        return (f"{L.label}: a vLLM data-parallel rank (tp*pp = {L.tp * L.pp} GPUs) must fit whole on a node of "
                f"{per_node} GPUs for multi-node data parallelism")
    return ""


PP_SPEC_ENV = "SGLANG_ENABLE_PP_SPEC"   # arg_groups/validation_hook.py check_pipeline_parallel_compat (0.5.23)


def sglang_pp_spec_problem(L: Layout) -> str:
    """Why SGLang 0.5.23 refuses speculative decoding on this layout ('' when it takes it): under PP only with
    SGLANG_ENABLE_PP_SPEC=1, which asserts there is no attention DP."""
    if L.pp > 1 and L.dp > 1:
        return (f"SGLang runs speculative decoding under PP only with {PP_SPEC_ENV}=1, which refuses attention DP "
                "(arg_groups/validation_hook.py)")
    return ""


def launch_problem(engine: str, layout: Layout, gpus_per_node: int) -> str:
    """The engine's own layout limits (what its launcher refuses), '' when it takes the layout."""
    return vllm_layout_problem(layout, gpus_per_node) if engine == "vllm" else ""


def mtp_layout_problem(engine: str, layout: Layout, drafter: str | None = "mtp") -> str:
    """Why the engine refuses speculative decoding on this layout with the checkpoint's drafter ('' when it takes
    it): SGLang runs a DSpark draft only at pp 1 outside PD prefill (arg_groups/speculative_hook.py `_handle_dspark`:
    "DSpark pipeline parallelism requires PD prefill"), and MTP under PP only without attention DP."""
    if engine != "sglang":
        return ""
    if drafter == "dspark" and layout.pp > 1:
        return "SGLang runs a DSpark draft only without pipeline parallelism (pp_size == 1) outside PD prefill"
    return sglang_pp_spec_problem(layout)
