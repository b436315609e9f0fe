"""Which MLA attention backend an engine runs on a GPU, and the KV block sizes it accepts.

The table is data (`mla_planner/data/backends.yaml`, with sources); this module only reads it.
Picking the backend first and the block size second mirrors how the engines fail: vLLM rejects
`--block-size 16 --attention-backend FLASHMLA` ("block_size not supported"), SGLang silently forces
page 64 for FlashMLA (ENGINES.md "Verified rejections"; USER_PROBLEMS.md problem 8).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import yaml

from .errors import PlanError, did_you_mean
from .resources import data_dir
from .topology import GPU

BLOCK_SIZE_CANDIDATES = (1, 16, 32, 64, 128, 256)


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

    def accepts_block(self, block_size: int) -> bool:
        return block_size in self.block_sizes or bool(self.multiple_of and block_size % self.multiple_of == 0)

    def legal_block_sizes(self) -> list[int]:
        return [b for b in BLOCK_SIZE_CANDIDATES if self.accepts_block(b)]


@lru_cache(maxsize=1)
def _table() -> dict:
    return yaml.safe_load(data_dir("backends.yaml").read_text())


def engine_version(engine: str) -> str:
    return _table()[engine]["version"]


def backend(engine: str, name: str) -> Backend:
    entries = _table()[engine]["backends"]
    if name not in entries:
        raise PlanError(f"{engine} has no MLA attention backend '{name}'{did_you_mean(name, entries)}; "
                        f"choices: {', '.join(entries)}")
    e = entries[name]
    return Backend(engine, name, tuple(e["archs"]), tuple(e.get("block_sizes", ())), e.get("multiple_of"),
                   e["fp8_kv"], e["dcp"], e["note"])


def backend_problems(b: Backend, gpu: GPU, kv_dtype: str, dcp: int, block_size: int | None = None) -> list[str]:
    """Why backend `b` cannot run this configuration (empty when it can)."""
    out = []
    if gpu.arch not in b.archs:
        out.append(f"{b.name} does not run on {gpu.arch} (sm{gpu.sm}); it needs {'/'.join(b.archs)}")
    if kv_dtype != "bf16" and not b.fp8_kv:
        out.append(f"{b.name} has no FP8 KV cache support")
    if kv_dtype != "bf16" and not gpu.has_fp8:
        out.append(f"{gpu.name} has no FP8 support (sm{gpu.sm})")
    if dcp > 1 and not b.dcp:
        out.append(f"{b.name} does not support decode context parallelism")
    if block_size is not None and not b.accepts_block(block_size):
        out.append(f"{b.name} does not accept block size {block_size} (legal: {b.legal_block_sizes()})")
    return out


def usable_backends(engine: str, gpu: GPU, kv_dtype: str, dcp: int = 1) -> list[Backend]:
    """Backends the engine would accept here, in the engine's own auto-selection order."""
    order = _table()[engine]["auto_priority"].get(gpu.arch, [])
    return [backend(engine, n) for n in order if not backend_problems(backend(engine, n), gpu, kv_dtype, dcp)]


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
