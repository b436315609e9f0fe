"""How vLLM 0.33.0 and SGLang 0.5.23 turn KV-cache memory into capacity for DeepSeek-V4's compressed hybrid
attention (the caches: specs/attention/compressed.py `layer_caches`; the engines' code read at those versions, the
figures reproduced by running vLLM's own planner: docs/dsv4-engines.md).

vLLM: every layer's caches become `KVCacheSpec`s (compressed rows and index keys: full-attention specs on the
256-token block the V4 indexer backend demands; the window and the compressor states: sliding-window specs on blocks
of 64, 4 and 8 tokens), pages padded to 576 B. `_get_packed_kv_cache_groups` (v1/core/kv_cache_planning.py) buckets
them by type, splits the balanced buckets into groups of `_approximate_gcd` repeats, and every block id costs the
widest group's page sum (`bytes_per_block`). A request reserves cdiv(L, 256) full blocks plus, per sliding group,
cdiv(min(W - 1 + in-flight tokens, L), block) + 1 (`SlidingWindowSpec.max_admission_blocks_per_request`), the
in-flight tokens being 2 x max_num_batched_tokens with async scheduling at PP 1 (config/vllm.py
`max_in_flight_tokens`; vLLM 0.25.0 reserved one batch). The logged "GPU KV cache size" is num_blocks / blocks per request x max_model_len
(v1/core/kv_cache_utils.py `get_kv_cache_capacity`): capacity is set by requests, not by bytes per token.

SGLang (`model_executor/pool_configurator.py` DSV4PoolConfigurator): 256-token pages; a full-token pool whose bytes
per token hold the compressed rows and index keys, plus 0.1 (its default swa_full_tokens_ratio) of an SWA token's
bytes (every layer's window row and the C4 state ring priced per SWA page); the C128 state rings reserved up front for
max_running_requests + 1 slots (default 256 requests for V4).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

from mla_planner.specs.attention.compressed import RATIOS, layer_caches, layer_ratios
from mla_planner.specs.attention.kinds import attention_of

PAGE_ALIGN_BYTES = 576          # vLLM pads every V4 page to a multiple of 576 B (kv_cache_interface.py)
VLLM_BLOCK_TOKENS = 256         # --block-size: the V4 indexer backend takes only 256 (attention/backends/mla/indexer.py)
VLLM_SLIDING_BLOCK = {"swa_kv": 64, "csa_state": 4, "csa_index_state": 4, "hca_state": 8}   # V4 passes these
VLLM_BUCKET = {"swa_kv": "window", "csa_state": "csa_state", "csa_index_state": "csa_state", "hca_state": "hca_state"}
SGLANG_PAGE_TOKENS = 256        # arg_groups/model_overrides/deepseek_v4.py
SGLANG_SWA_RATIO = 0.1          # swa_full_tokens_ratio for V4 when not given
SGLANG_MAX_RUNNING = 256        # max_running_requests for V4 when not given (deepseek_v4_hook.py)


def pad(page_bytes: int) -> int:
    return -(-page_bytes // PAGE_ALIGN_BYTES) * PAGE_ALIGN_BYTES


@dataclass(frozen=True)
class BlockGroup:
    """One vLLM KV-cache group: its page bytes per block id (the layers' pages summed), the tokens a block of it
    holds, and for a sliding group its window in tokens (None: a full group that grows with the request)."""
    name: str
    page_bytes: int
    block_tokens: int
    window: int | None = None


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """vLLM's `_approximate_gcd`: the chunk d >= lower_bound (up to max(values)) that pads the values least when
    each is rounded up to a multiple of d; ties go to the larger d."""
    best, best_pad = lower_bound, None
    for d in range(max(1, lower_bound), max(values) + 1):
        padding = sum((d - x % d) % d for x in values)
        if best_pad is None or padding < best_pad or (padding == best_pad and d > best):
            best, best_pad = d, padding
    return best


@lru_cache(maxsize=1024)
def vllm_groups(spec, index_cache: str = "fp8", window_layers: int = 0,
                stage: range | None = None) -> tuple[BlockGroup, ...]:
    """The KV-cache groups vLLM 0.33.0 builds for a V4 model (`window_layers`: MTP or DSpark layers it runs, each a
    window-only layer). Buckets: the full caches (compressed rows and index keys, block 256), the window rows, the
    C4 states and the C128 states; a bucket is balanced when each of its page sizes has as many layers."""
    buckets: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    shape: dict[str, tuple[int, int | None]] = {}
    for c in layer_caches(spec, index_cache, window_layers, stage):
        if c.window is None:
            name, block = "full", VLLM_BLOCK_TOKENS
            page = pad(block // c.tokens_per_row * c.row_bytes)
        else:
            name, block = VLLM_BUCKET[c.name], VLLM_SLIDING_BLOCK[c.name]
            page = pad(block * c.row_bytes)
        buckets[name][page] += len(c.layers)
        shape[name] = (block, c.window)
    balanced = {b: len(set(pages.values())) == 1 for b, pages in buckets.items()}
    floor = max((max(p.values()) for b, p in buckets.items() if balanced[b] and len(p) > 1), default=0)
    repeats = approximate_gcd([max(p.values()) for b, p in buckets.items() if balanced[b]], floor) if floor else None
    out = []
    for b, pages in buckets.items():
        n = -(-max(pages.values()) // repeats) if balanced[b] and repeats else 1
        block, window = shape[b]
        for i in range(n):   # group i takes repeats i, i + n, ...: one layer of each page size per repeat
            share = {page: len(range(i, count, n)) for page, count in pages.items()}
            out.append(BlockGroup(f"{b}{i if n > 1 else ''}", sum(p * k for p, k in share.items()), block, window))
    return tuple(out)


def in_flight_batches(pp: int = 1, reserves_in_flight: bool = True) -> int:
    """Batches of max_num_batched_tokens a sliding-window group reserves per request. vLLM >= 0.26: its
    `max_in_flight_tokens` (config/vllm.py), pp + 1 batches with async scheduling on the V2 model runner, both its
    defaults for V4 (`use_v2_model_runner`; 2 batches at pp 1). vLLM 0.25.0 (`reserves_in_flight` False):
    `SlidingWindowSpec.max_admission_blocks_per_request` reserved one batch (v1/kv_cache_interface.py)."""
    return pp + 1 if reserves_in_flight else 1


def in_flight_tokens(max_num_batched_tokens: int, batches: int = 2) -> int:
    """Tokens scheduled but not yet settled that every sliding-window group keeps blocks for (`in_flight_batches`)."""
    return batches * max_num_batched_tokens


def blocks_per_request(groups: tuple[BlockGroup, ...], max_model_len: int, max_num_batched_tokens: int,
                       batches: int = 2) -> int:
    """Block ids one request of max_model_len tokens reserves, summed over the groups."""
    flight = in_flight_tokens(max_num_batched_tokens, batches)
    total = 0
    for g in groups:
        if g.window is None:
            total += -(-max_model_len // g.block_tokens)
        else:
            total += -(-min(g.window - 1 + flight, max_model_len) // g.block_tokens) + 1
    return total


@dataclass(frozen=True)
class VllmCapacity:
    bytes_per_block: int
    num_blocks: int
    blocks_per_request: int
    logged_tokens: int          # "GPU KV cache size: N tokens"
    concurrency: float          # "Maximum concurrency for max_model_len tokens per request"
    fits_one: bool              # one request of max_model_len fits beside the null block


def vllm_capacity(spec, kv_bytes: float, max_model_len: int, max_num_batched_tokens: int, batches: int = 2,
                  index_cache: str = "fp8", window_layers: int = 0, stage: range | None = None) -> VllmCapacity:
    groups = vllm_groups(spec, index_cache, window_layers, stage)
    per_block = max(g.page_bytes for g in groups)
    blocks = max(int(kv_bytes // per_block), 0)
    per_req = blocks_per_request(groups, max_model_len, max_num_batched_tokens, batches)
    concurrency = blocks / per_req
    return VllmCapacity(per_block, blocks, per_req, int(concurrency * max_model_len), concurrency,
                        blocks - 1 >= per_req)


@dataclass(frozen=True)
class SglangCapacity:
    bytes_per_full_token: float
    fixed_bytes: int            # the C128 state rings, reserved for every request slot
    full_tokens: int            # max_total_num_tokens
    swa_tokens: int


def _sglang_row_bytes(row_bytes: int, rows_per_page: int) -> float:
    """SGLang's page-padded bytes per stored row: a page of rows padded to 576 B, per row."""
    return pad(rows_per_page * row_bytes) / rows_per_page


def sglang_capacity(spec, kv_bytes: float, max_running_requests: int = SGLANG_MAX_RUNNING,
                    speculative: bool = False, index_cache: str = "fp8", stage: range | None = None) -> SglangCapacity:
    """SGLang 0.5.23's V4 pools (pool_configurator.py `_get_bytes_per_swa_token`, `_get_bytes_per_full_token`,
    `_get_c128_state_fixed_bytes`, `calculate_pool_sizes`): rings of 8 C4 states per SWA page (16 with speculative
    decoding), 128 C128 state rows per request slot (256), the per-token bytes x (N + 1) / N with a draft layer."""
    caches = {c.name: c for c in layer_caches(spec, index_cache, stage=stage)}
    page, n = SGLANG_PAGE_TOKENS, len(caches["swa_kv"].layers)
    swa = caches["swa_kv"]
    per_swa = _sglang_row_bytes(swa.row_bytes, page) * n
    if "csa_kv" in caches:
        ring = 16 if speculative else 8
        state = caches["csa_state"].row_bytes + caches["csa_index_state"].row_bytes
        per_swa += ring / page * state * len(caches["csa_kv"].layers)
    per_full = SGLANG_SWA_RATIO * per_swa
    for name in ("csa_kv", "csa_index_keys", "hca_kv"):
        if name in caches:
            c = caches[name]
            row = c.row_bytes if name == "csa_index_keys" else _sglang_row_bytes(c.row_bytes, page // c.tokens_per_row)
            per_full += row / c.tokens_per_row * len(c.layers)
    if speculative:
        per_full *= (n + 1) / n
    fixed = 0
    if "hca_state" in caches:
        c = caches["hca_state"]
        ring = 2 * c.window if speculative else c.window
        rows = -(-((max_running_requests + 1) * ring + ring + 1) // 128) * 128
        fixed = rows * c.row_bytes * len(c.layers)
    full = int(max(kv_bytes - fixed, 0) / per_full) // page * page
    return SglangCapacity(per_full, fixed, full, int(full * SGLANG_SWA_RATIO) // page * page)


def is_compressed(spec) -> bool:
    """Whether the spec's attention is DeepSeek-V4's compressed hybrid (capacity by these rules, not per token)."""
    return attention_of(spec).backend_family == "mla-compressed"


def cache_facts(spec, lengths: tuple[int, ...] = (131072, 1048576), budgets: tuple[int, ...] = (8192, 16384)) -> dict:
    """What `show` reports of a V4 model's caches: each layer kind's caches, vLLM's groups, bytes per block and
    blocks per request at LENGTHS x max-num-batched-tokens BUDGETS, SGLang's bytes per full token and fixed rings."""
    groups = vllm_groups(spec)
    per_block = max(g.page_bytes for g in groups)
    kinds = {name: sum(1 for r in layer_ratios(spec) if r == ratio) for ratio, name in RATIOS.items()}
    sglang = sglang_capacity(spec, 0.0)
    return {
        "layer_kinds": kinds,
        "caches": [{"name": c.name, "kind": c.kind, "layers": len(c.layers), "row_bytes": c.row_bytes,
                    "tokens_per_row": c.tokens_per_row, "window_tokens": c.window} for c in layer_caches(spec)],
        "vllm": {"block_tokens": VLLM_BLOCK_TOKENS, "bytes_per_block": per_block,
                 "bytes_per_block_fp4_indexer": max(g.page_bytes for g in vllm_groups(spec, "mxfp4")),
                 "marginal_bytes_per_token": per_block / VLLM_BLOCK_TOKENS,
                 "groups": [{"name": g.name, "page_bytes": g.page_bytes, "block_tokens": g.block_tokens,
                             "window_tokens": g.window} for g in groups],
                 "blocks_per_request": [{"max_model_len": n, "max_num_batched_tokens": b,
                                         "blocks": blocks_per_request(groups, n, b)}
                                        for n in lengths for b in budgets]},
        "sglang": {"page_tokens": SGLANG_PAGE_TOKENS, "swa_full_tokens_ratio": SGLANG_SWA_RATIO,
                   "bytes_per_full_token": sglang.bytes_per_full_token,
                   "max_running_requests": SGLANG_MAX_RUNNING, "fixed_state_bytes": sglang.fixed_bytes}}
