"""Which MLA attention backend an engine runs on a GPU, and the KV block sizes it accepts.

The table is data (`mla_planner/data/backends.yaml`, with sources); this module only reads it.
Picking the backend first and the block size second mirrors how the engines fail: vLLM rejects
`--block-size 16 --attention-backend FLASHMLA` ("block_size not supported"), SGLang silently forces
page 64 for FlashMLA (vLLM 0.33.0 vllm/v1/attention/backends/mla/flashmla.py, SGLang 0.5.23
sglang/srt/arg_groups/overrides.py; vllm-project/vllm#48286).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Optional


from mla_planner.core.errors import PlanError, did_you_mean
from mla_planner.core.resources import data_dir, read_data
from mla_planner.engines.sparse import compressed_gpu_problem, unmodelled_on
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.gpu import GPU

BLOCK_SIZE_CANDIDATES = (1, 16, 32, 64, 128, 256)


ARCH_LABELS = {"blackwell": "blackwell (sm10x: B200, B300, GB200, GB300)"}   # the family names' readings in messages


@dataclass(frozen=True)
class Backend:
    engine: str
    name: str
    archs: tuple[str, ...]
    block_sizes: tuple[int, ...]
    multiple_of: int | None
    fp8_kv: bool
    dcp: bool
    note: str
    multi_token_decode: bool = True     # verifies MTP's 1 + k tokens on the decode path (data/backends.yaml)
    dcp_varlen: bool = False            # ... and still under DCP
    pad_heads_multiple: int = 1         # the decode kernel computes the per-rank query heads rounded up to this
    max_padded_heads: int | None = None     # a head count that is not such a multiple must be at most this
    head_counts: tuple[int, ...] = ()   # the only per-rank head counts the kernel takes (empty: any)
    arch_notes: tuple[tuple[str, str], ...] = ()   # (architecture, why it is not planned there though it starts)
    graph_tables: tuple[tuple[int, str, str], ...] = ()   # SGLang's decode graphs' index tables (cuda_graphs.py)

    def padded_heads(self, heads: int) -> int:
        """The query heads the decode kernel computes for `heads` real ones per rank (AITER MLA: the next multiple
        of 16, vllm rocm_aiter_mla.py / sglang aiter_backend.py)."""
        m = self.pad_heads_multiple
        return -(-heads // m) * m

    def heads_problem(self, heads: int) -> str:
        """Why the kernel refuses `heads` query heads per rank ('' when it takes them)."""
        if self.head_counts and heads not in self.head_counts:
            return (f"{self.name} takes {_runs(self.head_counts)} query heads per rank, not {heads}; "
                    "change the tensor-parallel size")
        if self.max_padded_heads and heads % self.pad_heads_multiple and heads > self.max_padded_heads:
            return (f"{self.name} takes a multiple of {self.pad_heads_multiple} query heads per rank, or at most "
                    f"{self.max_padded_heads}, not {heads}; change the tensor-parallel size")
        return ""

    def accepts_block(self, block_size: int) -> bool:
        return block_size in self.block_sizes or bool(self.multiple_of and block_size % self.multiple_of == 0)

    def legal_block_sizes(self) -> list[int]:
        return [b for b in BLOCK_SIZE_CANDIDATES if self.accepts_block(b)]


def _runs(values: tuple[int, ...]) -> str:
    """1, 2, 3, 4, 16, 32 -> '1-4, 16, 32'."""
    out, start = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[i - 1] + 1:
            run = values[start:i]
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
            start = i
    return ", ".join(out)


@lru_cache(maxsize=1)
def _table() -> dict:
    return read_data(data_dir("backends.yaml"))


def engine_version(engine: str) -> str:
    return _table()[engine]["version"]


@lru_cache(maxsize=None)
def backend(engine: str, name: str) -> Backend:
    entries = _table()[engine]["backends"]
    if name not in entries:
        raise PlanError(f"{engine} has no MLA attention backend '{name}'{did_you_mean(name, entries)}; "
                        f"choices: {', '.join(entries)}")
    e = entries[name]
    return Backend(engine, name, tuple(e["archs"]), tuple(e.get("block_sizes", ())), e.get("multiple_of"),
                   e["fp8_kv"], e["dcp"], e["note"], e.get("multi_token_decode", True), e.get("dcp_varlen", False),
                   e.get("pad_heads_multiple", 1), e.get("max_padded_heads"), tuple(e.get("head_counts", ())),
                   tuple(e.get("arch_notes", {}).items()), tuple(tuple(t) for t in e.get("graph_tables", ())))


def mtp_verify_problem(b: Backend, dcp: int) -> str:
    """Why this vLLM backend would run MTP's verify (1 + k query tokens per request) through the MLA prefill
    path, which up-projects every cached token instead of reading the latent once: the step model prices it
    as decode, so MTP is not planned there ('' where the decode path takes it)."""
    if b.engine != "vllm":
        return ""
    if not b.multi_token_decode:
        return (f"vLLM's {b.name} decodes one query token per request, so MTP's verify would go through the MLA "
                "prefill path (every cached token up-projected)")
    if dcp > 1 and not b.dcp_varlen:
        return (f"under DCP vLLM decodes one query token per request on {b.name} (it lacks varlen DCP), so MTP's "
                "verify would go through the MLA prefill path (every cached token up-projected)")
    return ""


def backend_problems(b: Backend, gpu: GPU, kv_dtype: str, dcp: int, block_size: int | None = None,
                     heads: int | None = None) -> list[str]:
    """Why backend `b` cannot run this configuration (empty when it can); `heads`: the query heads of one rank
    (num_attention_heads / tp x dcp: DCP gathers the group's), checked where given."""
    out = []
    if gpu.arch not in b.archs:
        why = dict(b.arch_notes).get(gpu.arch)
        out.append(f"{b.name} on {gpu.arch} ({gpu.arch_id}): {why}" if why else
                   f"{b.name} does not run on {gpu.arch} ({gpu.arch_id}); it needs "
                   + "/".join(ARCH_LABELS.get(a, a) for a in b.archs))
    if kv_dtype == "fp8_ds_mla":   # FlashMLA's sparse-attention format (DeepSeek-V3.2): no dense MLA backend
        out.append(f"{b.name} has no fp8_ds_mla cache (vLLM 0.33's dense MLA backends list auto, bfloat16, fp8 "
                   "and fp8_e4m3 in supported_kv_cache_dtypes; SGLang 0.5.23's --kv-cache-dtype has no such choice)")
    elif kv_dtype != "bf16" and not b.fp8_kv:
        out.append(f"{b.name} has no FP8 KV cache support")
    if kv_dtype != "bf16" and not gpu.has_fp8:
        out.append(f"{gpu.name} has no FP8 support ({gpu.arch_id})")
    if dcp > 1 and not b.dcp:
        out.append(f"{b.name} does not support decode context parallelism")
    if block_size is not None and not b.accepts_block(block_size):
        out.append(f"{b.name} does not accept block size {block_size} (legal: {b.legal_block_sizes()})")
    if heads is not None and b.heads_problem(heads):
        out.append(b.heads_problem(heads))
    return out


def no_backend_reason(engine: str, gpu: GPU, kv_dtype: str, dcp: int = 1, heads: int | None = None) -> str:
    """Why the engine cannot start this KV cache here ("" when some MLA backend can)."""
    if usable_backends(engine, gpu, kv_dtype, dcp, heads):
        return ""
    by_heads = heads is not None and usable_backends(engine, gpu, kv_dtype, dcp)   # heads are what rules them out
    return (f"no {engine} MLA backend runs a {kv_dtype} KV cache on {gpu.name} ({gpu.arch_id})"
            + (f" with dcp={dcp}" if dcp > 1 else "") + (f" at {heads} query heads per rank" if by_heads else ""))


def usable_backends(engine: str, gpu: GPU, kv_dtype: str, dcp: int = 1, heads: int | None = None) -> list[Backend]:
    """Backends the engine would accept here, in the engine's own auto-selection order (on AMD: with the AITER
    switch the planner's commands export, data/rocm.yaml); `heads` per rank checked where given."""
    order = _table()[engine]["auto_priority"].get(gpu.arch, [])
    return [backend(engine, n) for n in order
            if not backend_problems(backend(engine, n), gpu, kv_dtype, dcp, heads=heads)]


def choose_block_size(b: Backend, prefix_caching: bool) -> tuple[int, str]:
    """Among the sizes the backend accepts, the one that trades fragmentation against per-block work.

    A sequence wastes on average half a block (bs/2 tokens) of cache, and prefix caching reuses only
    whole blocks, losing on average bs/2 tokens of each hit; smaller blocks mean more block-table
    entries and scheduler work per token and shorter contiguous reads. 64 tokens of the 576-wide latent
    are 72 KiB per layer in bf16, long enough for full-bandwidth reads (FlashMLA's page size), while
    wasting ~32 tokens (<1 % of a 4K context). So: 64 if legal, else the smallest legal size above it,
    else the largest legal size below it; a backend with one legal size gets that size; page size 1
    (SGLang's token-granular radix cache) is kept where it is the backend's native page size.
    """
    legal = b.legal_block_sizes()
    if legal == [1] or (b.engine == "sglang" and 1 in legal):
        return 1, f"{b.name} pages are token-granular by default (page size 1); the radix prefix cache " \
                  "matches at token granularity"
    if len(legal) == 1 or (not b.multiple_of and len(b.block_sizes) == 1):
        return legal[0], f"{b.name} requires block size {legal[0]}"
    above = [x for x in legal if x >= 64]
    size = above[0] if above else legal[-1]
    why = f"{b.name} accepts {', '.join(map(str, legal))}"
    why += f"; {size} keeps fragmentation under half a block per sequence and reads long contiguous pages"
    if prefix_caching:
        why += f"; prefix-cache hits reuse whole {size}-token blocks"
    return size, why


def fp8_checkpoint(engine: str, spec: ModelSpec, gpu: GPU) -> Optional[tuple[bool, str]]:
    """(runs, how) for an FP8 block-scaled checkpoint on a GPU without FP8 tensor cores (sm < 89); None
    when the checkpoint is not FP8 or the GPU has FP8 (nothing to say).

    vLLM 0.33.0 runs it weight-only through FP8 Marlin (W8A16) from sm75, linear layers and the fused MoE
    alike (layers/quantization/fp8.py `use_marlin`, utils/marlin_utils_fp8.py `prepare_fp8_layer_for_marlin`,
    fused_moe/experts/marlin_moe.py accepts 128x128 block-FP8): the weights stay FP8 in memory (block
    scales become per-128 group scales, ~1.6 % more: memory.weights.marlin_scale_bytes) and the GEMMs run
    at the BF16 rate.
    SGLang 0.5.23 switches dense FP8 linears to Marlin on sm80-88 (fp8_utils.can_auto_enable_marlin_fp8) but
    its Fp8MoEMethod has no Marlin path (sglang#12887: "fp8e4nv not supported in this architecture"), so
    FP8 experts need a BF16 / INT8 / AWQ checkpoint there. deepseek-ai/DeepSeek-V3#11 predates vLLM's path."""
    if "fp8" not in (spec.weight_dtype, spec.expert_dtype) or gpu.has_fp8:
        return None
    moe_fp8 = spec.is_moe and spec.expert_dtype == "fp8"
    where = f"{gpu.name} (sm{gpu.sm}) has no FP8 tensor cores"
    if engine == "vllm":
        if gpu.sm < 75:
            return False, f"{where}, and vLLM's FP8 Marlin fallback needs sm75"
        return True, (f"{where}: vLLM runs the FP8 checkpoint weight-only through FP8 Marlin (W8A16): weights "
                      "stay FP8 in memory (plus ~1.6 % group scales), GEMMs run at the BF16 rate")
    if moe_fp8 or gpu.sm < 80:
        return False, (f"{where}, and SGLang 0.5.23 has no FP8 kernel for it ("
                       + ("no FP8 Marlin MoE, sglang#12887" if moe_fp8 else "FP8 Marlin needs sm80")
                       + "): serve a BF16, INT8 or AWQ checkpoint, or use vLLM")
    return True, (f"{where}: SGLang runs the dense FP8 layers weight-only through FP8 Marlin (W8A16): weights "
                  "stay FP8 in memory, GEMMs run at the BF16 rate")


def int8_checkpoint_problem(engine: str, spec: ModelSpec, gpu: GPU) -> str:
    """Why `engine` cannot load an INT8 W8A8 checkpoint here ('' when it can, or the weights are not INT8).
    meituan's DeepSeek-R1 INT8 releases are SGLang's: its quantization methods w8a8_int8 (per-channel scales,
    min capability 75) and blockwise_int8 (min capability 80; layers/quantization/w8a8_int8.py,
    blockwise_int8.py). vLLM 0.33.0 has neither (layers/quantization/__init__.py `QuantizationMethods`; its
    block-INT8 PR vllm-project/vllm#13942 was closed unmerged, and the channel release fails to load,
    vllm-project/vllm#16827)."""
    if "int8" not in (spec.weight_dtype, spec.expert_dtype):
        return ""
    if engine == "vllm":
        return ("vLLM 0.33 has no loader for these INT8 W8A8 checkpoints (no w8a8_int8 / blockwise_int8 method; "
                "vllm-project/vllm#16827): serve them with SGLang")
    if gpu.vendor == "amd":
        return f"SGLang's INT8 W8A8 kernels on ROCm ({gpu.arch_id}) are not modelled yet"
    need = 80 if spec.int8_block else 75
    return (f"SGLang's {'blockwise_int8' if spec.int8_block else 'w8a8_int8'} needs compute capability "
            f"{need // 10}.{need % 10}, and {gpu.name} is {gpu.arch_id}") if gpu.sm < need else ""


def default_engine(spec: ModelSpec, gpu: GPU) -> str:
    """The engine a command plans for when none is given: vLLM, unless the checkpoint is one only SGLang loads
    (INT8 W8A8: int8_checkpoint_problem)."""
    return "sglang" if int8_checkpoint_problem("vllm", spec, gpu) else "vllm"


def gpu_problem(gpu: GPU, spec: Optional[ModelSpec] = None, command: str = "plan") -> str:
    """Why COMMAND cannot price or run SPEC on `gpu` yet ('' when it can). On an NVIDIA GPU: a sparse or compressed
    attention whose backends on that architecture the planner does not model (data/backends.yaml `unmodelled`:
    sm12x's). On AMD Instinct the engines' ROCm paths for dense MLA (the AITER and Triton MLA backends), DeepSeek
    Sparse Attention (vLLM's ROCM_AITER_MLA_SPARSE, SGLang's HIP DSA kernels) and DeepSeek-V4 (vLLM's
    ROCM_FLASHMLA_SPARSE_DSV4, SGLang's HIP dsv4 backend) are modelled (data/backends.yaml; the ROCm environment,
    data/rocm.yaml) on cdna3 and cdna4; `verify` has never been run on ROCm, so it refuses rather than guess."""
    if gpu.vendor != "amd":
        family = attention_of(spec).backend_family if spec is not None else "mla"
        runs = unmodelled_on(family, gpu)
        return (f"{spec.name}'s {spec.attention} attention on {gpu.name} ({gpu.arch_id}, {gpu.arch}) runs on backends "
                f"the planner does not model yet ({runs}), so it refuses rather than price it with another "
                "architecture's" if runs else "")
    where = f"{gpu.name} is an AMD Instinct GPU ({gpu.arch_id}, {gpu.arch})"
    if gpu.arch not in _table()["vllm"]["auto_priority"]:
        return f"{where}: the engines' MLA backends on {gpu.arch} are not modelled (only cdna3 and cdna4 are)"
    if command == "verify":
        return f"{where}: verify's kernels and checks have not been run on ROCm yet, so it refuses rather than guess"
    return ""


def startup_problems(engine: str, spec: ModelSpec, gpu: GPU, knobs, dcp: int = 1) -> tuple[list[str], list[str]]:
    """(why the engine would refuse to start this model and KV cache on this GPU, notes on how it runs it):
    no MLA backend for the KV dtype (`no_backend_reason`; an attention backend the user pinned is checked
    by the block-size rule instead), fp8_ds_mla on a non-MLA model, an FP8 checkpoint it has no kernel
    for (`fp8_checkpoint`), an INT8 one it cannot load (`int8_checkpoint_problem`)."""
    refusals, notes = [], []
    kind = attention_of(spec)
    if kind.backend_family == "mla" and not knobs.attention_backend:
        missing = no_backend_reason(engine, gpu, knobs.kv_cache_dtype, dcp)
        refusals += [f"{missing}: the engine refuses to start"] if missing else []
    if kind.backend_family == "mla-compressed" and compressed_gpu_problem(engine, gpu):
        refusals.append(compressed_gpu_problem(engine, gpu) + ": the engine refuses to start")
    if knobs.kv_cache_dtype not in kind.kv_formats(spec):
        refusals.append(f"{knobs.kv_cache_dtype} is not a cache format of {spec.attention} attention "
                        f"({', '.join(kind.kv_formats(spec))}): the engine refuses to start")
    fp8 = fp8_checkpoint(engine, spec, gpu)
    if fp8:
        (notes if fp8[0] else refusals).append(fp8[1])
    refusals += [p for p in [int8_checkpoint_problem(engine, spec, gpu)] if p]
    return refusals, notes
