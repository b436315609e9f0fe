"""The attention backend, stored KV dtype and block size a candidate runs with, as its engine resolves them for
the model's attention kind: the MLA backend table (engines/backends.py) for dense MLA, the sparse backends
(engines/sparse.py) for DeepSeek Sparse Attention, the engine's own attention for GQA. A combination the
engine would refuse raises Rejected with the reason."""

from __future__ import annotations

from mla_planner.core.errors import PlanError
from mla_planner.engines.backends import (choose_block_size, mtp_verify_problem, no_backend_reason,
                                          usable_backends)
from mla_planner.engines.layouts import mtp_layout_problem
from mla_planner.engines.profile import profile
from mla_planner.engines.compressed_kv import VLLM_BLOCK_TOKENS
from mla_planner.engines.sparse import block_reason, compressed_backend, compressed_gpu_problem, sparse_choice
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.layout import Layout, query_heads_per_rank
from mla_planner.specs.model import ModelSpec

GQA_DEFAULT_BLOCK = {"vllm": 16, "sglang": 1}   # vLLM CacheConfig.DEFAULT_BLOCK_SIZE; SGLang page size 1
TRTLLM_MHA_PAGES = (16, 32, 64, 128)   # the page sizes SGLang's trtllm_mha takes, its GQA default on sm10x Blackwell


class Rejected(PlanError):
    """This layout cannot serve the workload with this engine and KV dtype; the message says why."""


def attention_choice(spec: ModelSpec, gpu, layout: Layout, engine: str, kv_dtype: str, pinned_block: int | None,
                     mtp: bool) -> tuple:
    """(backend name or None, stored KV dtype, block size, why the backend, why the block)."""
    family = attention_of(spec).backend_family
    if family == "mla":
        heads = query_heads_per_rank(spec, layout)
        backend, block, why_block = backend_and_block(engine, gpu, kv_dtype, layout.dcp, pinned_block, heads)
        if mtp and mtp_layout_problem(engine, layout, spec.drafter):
            raise Rejected(mtp_layout_problem(engine, layout, spec.drafter) + "; MTP is not planned there")
        verify_problem = mtp_verify_problem(backend, layout.dcp) if mtp else ""
        if verify_problem:
            raise Rejected(verify_problem + "; MTP is not planned there")
        return (backend.name, kv_dtype, block, f"{backend.name}: {backend.note} (first usable in {engine}'s own "
                f"order for {gpu.arch} with {kv_dtype} KV)", why_block)
    if family == "mla-sparse":
        return _sparse(spec, gpu, layout, engine, kv_dtype, pinned_block, mtp)
    if family == "mla-compressed":
        return _compressed(spec, engine, gpu, layout, pinned_block, mtp)
    # the MLA backend table does not apply (vLLM refuses an MLA backend for a non-MLA model)
    if engine == "sglang" and gpu.arch == "blackwell" and pinned_block not in TRTLLM_MHA_PAGES:
        return (None, kv_dtype, TRTLLM_MHA_PAGES[-2],
                f"the engine's own choice for a {spec.attention.upper()} model: trtllm_mha on sm10x Blackwell "
                "(SGLang 0.5.23 arg_groups/model_override_base.py)",
                "64: trtllm_mha moves a page size other than 16, 32, 64 or 128 to 64 (arg_groups/overrides.py)"
                + (f", not the pinned {pinned_block}" if pinned_block else ""))
    block = pinned_block or GQA_DEFAULT_BLOCK[engine]
    if block % profile(engine).gqa_block_multiple:
        raise Rejected(f"block size {block}: vLLM's FlashAttention and Triton backends take multiples of 16 "
                       "(flash_attn.py / triton_attn.py), so no backend would start")
    return (None, kv_dtype, block,
            f"the engine's own choice for a {spec.attention.upper()} model (the MLA backends do not apply)",
            f"{block} as pinned by --block-size" if pinned_block else
            f"{block}: {engine}'s default for a non-MLA attention backend")


def backend_and_block(engine: str, gpu, kv_dtype: str, dcp: int, pinned: int | None, heads: int | None = None) -> tuple:
    """(backend, block size, why): the engine's first usable MLA backend for `heads` query heads per rank, or with a
    pinned block size the first that takes it ("... runs instead" when that is not the first choice); Rejected
    when none can."""
    found = usable_backends(engine, gpu, kv_dtype, dcp, heads)
    if not found:
        raise Rejected(no_backend_reason(engine, gpu, kv_dtype, dcp, heads))
    if pinned is None:
        return (found[0], *choose_block_size(found[0], prefix_caching=True))
    fitting = [b for b in found if b.accepts_block(pinned)]
    if not fitting:
        legal = "; ".join(f"{b.name} accepts {b.legal_block_sizes()}" for b in found)
        raise Rejected(f"block size {pinned} is accepted by no {engine} backend usable here ({legal})")
    why = f"{pinned} as pinned by --block-size"
    if fitting[0] is not found[0]:
        why += f"; {found[0].name} (the engine's first choice) rejects it, so {fitting[0].name} runs instead"
    return fitting[0], pinned, why


def _sparse(spec: ModelSpec, gpu, layout: Layout, engine: str, kv_class: str, pinned_block: int | None,
            mtp: bool) -> tuple:
    """A sparse-attention (DSA) model: the engine's sparse backend for this KV class on this GPU and what it
    stores (engines/sparse.py)."""
    if mtp and mtp_layout_problem(engine, layout, spec.drafter):
        raise Rejected(mtp_layout_problem(engine, layout, spec.drafter) + "; MTP is not planned there")
    try:
        choice = sparse_choice(engine, spec, gpu, kv_class, spec.num_attention_heads // layout.tp, pinned_block,
                               layout.dcp)
    except PlanError as exc:
        raise Rejected(str(exc)) from None
    block = (f"{choice.block_size} as pinned by --block-size" if pinned_block else
             f"{choice.block_size}: {block_reason(engine, gpu)}")
    return choice.backend, choice.kv_cache_dtype, choice.block_size, choice.why.removeprefix("KV cache: "), block


def _compressed(spec: ModelSpec, engine: str, gpu, layout: Layout, pinned_block: int | None, mtp: bool) -> tuple:
    """DeepSeek-V4: the engine's V4 FlashMLA backend, the 584-byte fp8 rows, 256-token blocks (engines/sparse.py
    `compressed_backend`, engines/compressed_pool.py)."""
    entry = compressed_backend(engine, gpu)
    if compressed_gpu_problem(engine, gpu):
        raise Rejected(compressed_gpu_problem(engine, gpu))
    if pinned_block not in (None, VLLM_BLOCK_TOKENS):
        raise Rejected(f"block size {pinned_block}: DeepSeek-V4 runs on 256-token blocks only")
    if mtp and mtp_layout_problem(engine, layout, spec.drafter):
        raise Rejected(mtp_layout_problem(engine, layout, spec.drafter) + "; MTP is not planned there")
    return (entry["backend"], "fp8_ds_mla", VLLM_BLOCK_TOKENS, f"{entry['backend']}: {entry['note']}",
            "256: the V4 indexer backend (vLLM) and SGLang's V4 pools take 256-token blocks only")

