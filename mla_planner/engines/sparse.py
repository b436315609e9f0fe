"""How each engine stores and serves a DeepSeek Sparse Attention cache (DeepSeek-V3.2, GLM-5), and which sparse
backend runs DeepSeek-V4's compressed attention (`compressed_backend`): the KV dtype
it uses when not told, the sparse MLA backend it selects, what "fp8" becomes on that backend (FlashMLA's
656-byte fp8_ds_mla row or the plain 576-byte one), and its block size. The facts are data
(`data/backends.yaml`, section `sparse`, with their sources in the wheels; docs/dsa-engines.md).

The user's `--kv-cache-dtype` is read as the planner reads it for dense MLA: auto (the engine's own default
here), bf16, fp8 (the engine's fp8, whichever row its backend keeps) or fp8_ds_mla (only where the backend
keeps that row).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.core.resources import data_dir, read_data
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.gpu import GPU

FLAG_VALUE = {"vllm": {"bf16": "bfloat16", "fp8": "fp8", "fp8_ds_mla": "fp8"},        # what the engine is told
              "sglang": {"bf16": "bfloat16", "fp8": "fp8_e4m3", "fp8_ds_mla": "fp8_e4m3"}}


@dataclass(frozen=True)
class SparseChoice:
    """What the engine runs: the sparse backend, the KV dtype it stores (bf16, fp8 or fp8_ds_mla), the
    block size, and a sentence that says why (the memory report prints it)."""
    backend: str
    kv_cache_dtype: str
    block_size: int
    why: str


@lru_cache(maxsize=1)
def _backends_yaml() -> dict:
    return read_data(data_dir("backends.yaml"))


def _table() -> dict:
    return _backends_yaml()["sparse"]


def is_sparse(spec: ModelSpec) -> bool:
    """Whether SPEC's attention runs on the engines' sparse MLA backends (DeepSeek Sparse Attention)."""
    return attention_of(spec).backend_family == "mla-sparse"


def kv_class(dtype: str) -> str:
    """'bf16' or 'fp8': the class of a KV dtype as given or stored (fp8, fp8_e4m3 and fp8_ds_mla are the engine's
    fp8; a backend decides which row that is)."""
    return "bf16" if dtype in ("bf16", "bfloat16") else "fp8"


def default_kv_class(engine: str, spec: ModelSpec, gpu: GPU) -> str:
    """'bf16' or 'fp8': what the engine stores when `--kv-cache-dtype` is auto (its default), by GPU
    architecture and, where the engine overrides it for a model, by the spec's config.json model_type."""
    rules = _table()[engine]
    by_type = rules.get("default_kv_by_model_type", {}).get(spec.model_type or "", {})
    return by_type.get(gpu.arch, rules["default_kv"].get(gpu.arch, "bf16"))


def sparse_choice(engine: str, spec: ModelSpec, gpu: GPU, requested: str, heads_per_rank: int,
                  block_size: Optional[int] = None, dcp: int = 1) -> SparseChoice:
    """The backend, stored KV dtype and block size ENGINE runs SPEC's sparse attention with on GPU, for
    `--kv-cache-dtype REQUESTED` (auto, bf16, fp8, fp8_ds_mla), under `dcp`-way decode context parallelism;
    PlanError where the engine would refuse."""
    rules = _table()[engine]
    if requested == "auto":
        wanted = default_kv_class(engine, spec, gpu)
        said = f"{engine}'s default for {spec.name} on {gpu.arch} ({gpu.name})"
    else:
        wanted = kv_class(requested)
        said = f"--kv-cache-dtype {requested}"
    if wanted == "fp8" and not gpu.has_fp8:
        raise PlanError(f"{gpu.name} (sm{gpu.sm}) has no FP8: {engine} cannot store {spec.name}'s cache in fp8")
    order = rules["auto_priority"].get(gpu.arch)
    if not order:
        raise PlanError(f"{engine} has no sparse MLA backend for {gpu.name} ({gpu.arch}): it cannot serve "
                        f"{spec.name}'s DeepSeek Sparse Attention there")
    key = wanted
    if wanted == "bf16" and "bf16_few_heads" in order and heads_per_rank <= rules["few_heads"]:
        key = "bf16_few_heads"
    usable = [n for n in order[key] if gpu.arch in rules["backends"][n]["archs"]
              and dcp_problem(rules["backends"][n], wanted, heads_per_rank, dcp) == ""]
    if not usable:
        first = next(n for n in order[key] if gpu.arch in rules["backends"][n]["archs"])
        raise PlanError(f"{engine} has no sparse MLA backend for a {wanted} cache on {gpu.name} with dcp={dcp} "
                        f"({first}: {dcp_problem(rules['backends'][first], wanted, heads_per_rank, dcp)})")
    name = usable[0]
    stored = rules["backends"][name]["kv"][wanted]
    if requested == "fp8_ds_mla" and stored != "fp8_ds_mla":
        raise PlanError(f"--kv-cache-dtype fp8_ds_mla: {engine} runs {spec.name} on {gpu.name} with {name}, which "
                        f"keeps fp8 as plain 576-byte rows, not FlashMLA's 656-byte fp8_ds_mla; give fp8")
    if block_size is not None and not block_accepted(engine, gpu, block_size):
        raise PlanError(f"--block-size {block_size}: {engine}'s sparse attention takes {block_rule(engine, gpu)}")
    size = block_size or block_multiple(engine, gpu)
    row = {"bf16": "1152-byte bf16", "fp8": "576-byte plain fp8", "fp8_ds_mla": "656-byte fp8_ds_mla"}[stored]
    own = rules["backends"][name].get("engine_default")
    picks = f"the plan runs {engine} on {name} for (its own default there: {own}; " if own else \
        f"{engine} selects {name} for ("
    why = (f"KV cache: {said} is {wanted}, which {picks}{rules['backends'][name]['note']}): "
           f"{row} latent rows and 132-byte index keys, {size}-token blocks (--kv-cache-dtype "
           f"{FLAG_VALUE[engine][stored]})")
    return SparseChoice(name, stored, size, why)


def block_multiple(engine: str, gpu: GPU) -> int:
    """The block (page) size ENGINE's DSA caches take multiples of on `gpu` (its default block): vLLM 64 on CUDA
    (the indexer's DEEPSEEK_V32_INDEXER backend), 16 on ROCm (ROCM_AITER_MLA_SPARSE and its indexer take 1 or
    multiples of 16); SGLang 64 (data/backends.yaml `sparse`)."""
    rules = _table()[engine]
    return rules.get("block_multiple_by_arch", {}).get(gpu.arch, rules["block_multiple"])


def block_accepted(engine: str, gpu: GPU, block_size: int) -> bool:
    """Whether ENGINE's DSA caches on `gpu` take `block_size`-token blocks: a multiple of `block_multiple` (exactly it
    where the engine forces its page), or 1 where the backends list it (vLLM on ROCm: [1, MultipleOf(16)])."""
    rules = _table()[engine]
    if block_size == 1 and gpu.arch in rules.get("block_one_archs", []):
        return True
    multiple = block_multiple(engine, gpu)
    return block_size > 0 and not block_size % multiple and not (rules.get("block_exact") and block_size != multiple)


def block_rule(engine: str, gpu: GPU) -> str:
    """The block sizes `block_accepted` takes, in words: "64-token pages only", "multiples of 16 tokens (or 1)"."""
    rules, size = _table()[engine], block_multiple(engine, gpu)
    takes = f"{size}-token pages only" if rules.get("block_exact") else f"multiples of {size} tokens only"
    return takes + (" (or 1)" if gpu.arch in rules.get("block_one_archs", []) else "")


def block_reason(engine: str, gpu: GPU) -> str:
    """Why ENGINE's DSA blocks on `gpu` are `block_multiple` tokens, in words for the plan's reasons."""
    size = block_multiple(engine, gpu)
    if _table()[engine].get("block_exact"):
        return f"{engine} sets {size}-token pages for DeepSeek Sparse Attention itself (another is replaced)"
    return f"{engine}'s sparse attention and indexer caches take multiples of {size} tokens on {gpu.arch}"


def dsa_prefill_backend(engine: str, backend: Optional[str]) -> Optional[str]:
    """The prefill kernel the plan pins beside a DSA decode BACKEND (`prefill` in data/backends.yaml: SGLang's
    tilelang on ROCm), None where the engine's own pick stands."""
    return _table()[engine]["backends"].get(backend or "", {}).get("prefill")


def sparse_backends(engine: str) -> dict:
    """ENGINE's sparse MLA backends by name: the GPU architectures each runs on, what it stores each KV class
    as (data/backends.yaml `sparse`)."""
    return dict(_table()[engine]["backends"])


def dcp_problem(backend: dict, kv_class: str, heads_per_rank: int, dcp: int) -> str:
    """Why a sparse backend (its data/backends.yaml entry) cannot run under `dcp`-way DCP ('' when it can, or
    without DCP)."""
    rule = backend.get("dcp", False)
    if dcp == 1 or rule is True:
        return ""
    if rule is False:
        return "no DCP"
    if "kv" in rule and backend["kv"].get(kv_class) != rule["kv"]:
        return f"DCP needs a {rule['kv']} cache"
    if "heads_below" in rule and heads_per_rank >= rule["heads_below"]:
        return f"DCP needs fewer than {rule['heads_below']} query heads per rank"
    pads = backend.get("pad_heads") or []
    pad = (lambda h: next((p for p in pads if h <= p), h))
    if rule.get("same_padding") and pad(heads_per_rank) != pad(heads_per_rank * dcp):
        return "the DCP-gathered heads pad differently from the rank's own"
    if "heads_times_dcp" in rule and heads_per_rank * dcp not in rule["heads_times_dcp"]:
        return f"DCP needs heads x dcp in {rule['heads_times_dcp']}"
    return ""


def padded_heads(engine: str, backend: str, heads_per_rank: int, compressed: bool = False) -> int:
    """The query heads the backend's decode kernel computes for `heads_per_rank` real ones: the first of its
    `pad_heads` sizes that holds them (FlashMLA sparse, DSA's and DeepSeek-V4's: 64, or 128 above 64; TileLang's V4
    decode on gfx942: 64; AITER's DSA kernel: a multiple of 16), else the heads themselves. `compressed`: BACKEND is
    one of DeepSeek-V4's (a name such as SGLang's tilelang means a DSA kernel otherwise)."""
    entry = next((e for e in _compressed_entries(engine) if e["backend"] == backend), {}) if compressed else \
        _table()[engine]["backends"].get(backend, {})
    sizes = entry.get("pad_heads") or []
    return next((size for size in sizes if heads_per_rank <= size), heads_per_rank)


def compressed_backend(engine: str, gpu: Optional[GPU] = None) -> dict:
    """The attention backend ENGINE runs DeepSeek-V4's compressed attention on (data/backends.yaml `compressed`), on
    `gpu`'s architecture where it differs there (ROCm's: `by_arch`): its name, GPU architectures, head padding and
    a note."""
    entry = _backends_yaml()["compressed"][engine]
    return {**entry, **entry.get("by_arch", {}).get(gpu.arch if gpu is not None else "", {})}


def _compressed_entries(engine: str) -> list[dict]:
    """ENGINE's V4 backend and its per-architecture variants."""
    entry = _backends_yaml()["compressed"][engine]
    return [entry, *({**entry, **variant} for variant in entry.get("by_arch", {}).values())]


def compressed_gpu_problem(engine: str, gpu: GPU) -> str:
    """Why ENGINE's DeepSeek-V4 backend does not run on `gpu` ('' when it does)."""
    entry = compressed_backend(engine, gpu)
    if gpu.arch in entry["archs"]:
        return ""
    return f"{engine} runs DeepSeek-V4 on {entry['backend']}, which needs {' or '.join(entry['archs'])} GPUs, not {gpu.arch}"


def unmodelled_on(family: str, gpu: GPU) -> str:
    """What the engines run for a sparse ('mla-sparse') or compressed ('mla-compressed') attention family on `gpu`'s
    architecture where the planner has no model of it (data/backends.yaml `unmodelled`), '' where none is named."""
    yaml = _backends_yaml()
    section = yaml["sparse"] if family == "mla-sparse" else yaml["compressed"] if family == "mla-compressed" else {}
    runs = {engine: entry.get("unmodelled", {}).get(gpu.arch) for engine, entry in section.items()}
    return "; ".join(f"{engine}: {text}" for engine, text in runs.items() if text)


def own_rows(spec: ModelSpec) -> bool:
    """Whether the model's KV rows are its sparse backend's own layout (DSA, DeepSeek-V4): the engine is told
    bf16 or fp8 (`kv_flag`) and turns it into that layout, rather than given the planner's dtype name."""
    return attention_of(spec).backend_family in ("mla-sparse", "mla-compressed")


def kv_flag(engine: str, stored: str) -> str:
    """The `--kv-cache-dtype` value that makes ENGINE keep a DSA cache as STORED (bfloat16 stays bf16 for
    GLM on Blackwell, where auto would be fp8; fp8 becomes fp8_ds_mla on FlashMLA-sparse by itself)."""
    return FLAG_VALUE[engine][stored]
