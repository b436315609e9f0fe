"""The memory model's side of DeepSeek-V4's caches: the cache knobs each engine resolves for V4 (`engine_defaults`,
`compressed_choice`) and `CompressedPool`, what a stage's KV bytes become under each engine's own capacity rule
(engines/compressed_kv.py), asked by engines/memory_rules.kv_pool instead of bytes per token slot."""

from __future__ import annotations

from dataclasses import dataclass

from mla_planner.core.errors import PlanError
from mla_planner.engines.compressed_kv import (SGLANG_MAX_RUNNING, is_compressed, SGLANG_PAGE_TOKENS, VLLM_BLOCK_TOKENS, SglangCapacity,
                                               VllmCapacity, blocks_per_request, sglang_capacity, vllm_capacity,
                                               vllm_groups)


def engine_defaults(engine: str) -> dict:
    """What each engine resolves for V4 when a flag is not given: the 584-byte fp8 rows (both turn auto and fp8
    into them: vLLM `deepseek_v4/attention.py`, SGLang `arg_groups/overrides.py`), 256-token blocks (vLLM's V4
    indexer backend takes only 256 and the recipes pass it; SGLang's V4 override), and SGLang's 256 running
    requests (`deepseek_v4_hook.py`)."""
    out = {"kv_cache_dtype": "fp8_ds_mla", "block_size": VLLM_BLOCK_TOKENS}
    if engine == "sglang":
        out.update(block_size=SGLANG_PAGE_TOKENS, max_num_seqs=SGLANG_MAX_RUNNING)
    return out


MXFP4_INDEXER_ARCHS = ("blackwell", "cdna4")     # where vLLM's V4 indexer keeps FP4 keys (`indexer_choice`)


def indexer_reason(gpu) -> str:
    """Why the plan runs vLLM's FP4 index-key cache on `gpu`, in words for the plan's reasons."""
    why = ("vLLM's own default on MI350X / MI355X with AITER on (platforms/rocm.py _maybe_default_dsv4_mxfp4_indexer)"
           if gpu.arch == "cdna4" else "the recipes' Blackwell setting")
    where = {"blackwell": "Blackwell", "cdna4": "CDNA4"}.get(gpu.arch, gpu.arch)
    return (f"mxfp4: the FP4 index-key cache vLLM offers on {where} (--attention-config indexer_kv_dtype, {why}): "
            "68-byte keys instead of 132, about 9% more blocks and half the index scan's reads; the indexer then "
            "scores FP4 keys, so check accuracy on your traffic")


def indexer_choice_flag(spec, engine: str, gpu, value: str) -> str:
    """`memory --indexer-kv-dtype`: auto (the engine's own default: fp8, but mxfp4 for vLLM on CDNA4 with AITER on,
    platforms/rocm.py _maybe_default_dsv4_mxfp4_indexer), fp8, or mxfp4, which only vLLM offers for DeepSeek-V4, on
    Blackwell and CDNA4 (`indexer_choice`)."""
    if value == "auto":
        return "mxfp4" if engine == "vllm" and gpu.arch == "cdna4" and is_compressed(spec) else "fp8"
    if value not in ("fp8", "mxfp4"):
        raise PlanError(f"--indexer-kv-dtype must be auto, fp8 or mxfp4, got '{value}'")
    if value == "mxfp4" and indexer_choice(engine, spec, gpu) != "mxfp4":
        raise PlanError(f"--indexer-kv-dtype mxfp4: an FP4 index-key cache is vLLM's, for DeepSeek-V4 on Blackwell "
                        f"or CDNA4 (MI350X / MI355X); not {engine} with {spec.name} on {gpu.name}")
    return value


def indexer_choice(engine: str, spec, gpu) -> str:
    """The index-key cache the plan runs DeepSeek-V4 with: mxfp4 with vLLM on Blackwell and CDNA4 (its V4 indexer
    takes it there: v1/attention/backends/mla/indexer.py dsa_indexer_uses_fp4; the DeepSeek-V4 recipes turn the FP4
    indexer cache on for Blackwell, and vLLM turns it on itself on gfx950 with AITER, which the scripts export;
    gfx942 refuses it), fp8 elsewhere and for SGLang (whose FP4 keys are opt-in: --enable-deepseek-v4-fp4-indexer)."""
    from_arch = engine == "vllm" and gpu.arch in MXFP4_INDEXER_ARCHS
    return "mxfp4" if is_compressed(spec) and from_arch else "fp8"


def compressed_choice(engine: str, kv_dtype: str, kv_text: str, block_size: int | None) -> tuple[dict, list[str]]:
    """(the cache knobs, the sentence saying how the engine resolves them) for --kv-cache-dtype and --block-size on
    a V4 model: auto, fp8 and fp8_ds_mla are the 584-byte rows; bf16 rows (vLLM's FlashInfer plain-row backend) are
    not modelled and refused; a block other than 256 is refused as the engines refuse it."""
    if kv_dtype == "bf16" and kv_text != "auto":
        raise PlanError("--kv-cache-dtype bf16: DeepSeek-V4's bf16 rows (vLLM's FlashInfer plain-row backend) are not "
                        "modelled; give auto or fp8 (the 584-byte fp8 rows both engines default to)")
    if block_size not in (None, VLLM_BLOCK_TOKENS):
        what = "vLLM's V4 indexer backend accepts only 256" if engine == "vllm" else "SGLang's V4 pools page by 256"
        raise PlanError(f"--block-size {block_size}: {what} for DeepSeek-V4")
    return ({"kv_cache_dtype": "fp8_ds_mla", "block_size": VLLM_BLOCK_TOKENS},
            [f"KV cache: {engine} stores DeepSeek-V4's rows in FlashMLA's 584-byte fp8 layout (what auto and fp8 "
             f"become) on 256-token blocks; capacity is counted the engine's way, in requests of --max-model-len"])


@dataclass(frozen=True)
class CompressedPool:
    """One GPU's V4 caches (a pipeline stage's layers) as ENGINE turns KV bytes into capacity: what the memory model
    asks instead of bytes per token (engines/memory_rules.kv_pool)."""
    engine: str
    spec: object
    stage: range
    max_model_len: int
    max_num_batched_tokens: int
    max_running_requests: int
    in_flight_batches: int = 2      # batches each sliding-window group reserves (compressed_kv.in_flight_batches)
    draft_layers: int = 0           # the drafter's window-only layers (MTP 1, DSpark 3); > 0: speculative decoding
                                    # (SGLang's larger rings)
    index_cache: str = "fp8"        # the index keys' row, as indexer_kv_dtype: fp8, or mxfp4 (vLLM's FP4 cache)
    query_len: int = 1              # tokens a decoding request runs per step (1 + drafted ones)

    def _vllm(self, kv_bytes: float) -> VllmCapacity:
        return vllm_capacity(self.spec, kv_bytes, self.max_model_len, self.max_num_batched_tokens,
                             self.in_flight_batches, self.index_cache, self.draft_layers, self.stage)

    def _sglang(self, kv_bytes: float) -> SglangCapacity:
        return sglang_capacity(self.spec, kv_bytes, self.max_running_requests, bool(self.draft_layers), stage=self.stage)

    def marginal_bytes_per_token(self) -> float:
        """What one more token of context costs: vLLM a block's bytes over its 256 tokens; SGLang a full-pool token."""
        if self.engine == "sglang":
            return self._sglang(0.0).bytes_per_full_token
        return self._vllm(0.0).bytes_per_block / VLLM_BLOCK_TOKENS

    def size(self, kv_bytes: float) -> tuple[float, int]:
        """(bytes the pool takes, tokens as the engine logs them): vLLM's "GPU KV cache size" (blocks over blocks per
        request x max_model_len); SGLang's max_total_num_tokens."""
        if kv_bytes <= 0:
            return 0.0, 0
        if self.engine == "sglang":
            cap = self._sglang(kv_bytes)
            if cap.fixed_bytes >= kv_bytes:     # the state rings alone take the budget: no pool (the memory report
                return 0.0, 0                   # says so: memory/accounting._compressed_capacity)
            return cap.fixed_bytes + cap.full_tokens * cap.bytes_per_full_token, cap.full_tokens
        cap = self._vllm(kv_bytes)
        return float(cap.num_blocks * cap.bytes_per_block), cap.logged_tokens

    def facts(self, kv_bytes: float) -> dict:
        """What decides the capacity, in the engine's own terms, and the concurrent requests at max_model_len."""
        if self.engine == "sglang":
            cap = self._sglang(kv_bytes)
            requests = min(cap.full_tokens / self.max_model_len, self.max_running_requests)
            return {"bytes_per_full_token": cap.bytes_per_full_token, "fixed_state_bytes": cap.fixed_bytes,
                    "swa_tokens_per_request": self.spec.sliding_window + SGLANG_PAGE_TOKENS,
                    "full_tokens": cap.full_tokens, "swa_tokens": cap.swa_tokens,
                    "max_running_requests": self.max_running_requests, "concurrent_requests": requests,
                    "marginal_bytes_per_token": cap.bytes_per_full_token,
                    "knob": "--max-running-requests (each slot reserves its C128 state rings up front) and "
                            "--swa-full-tokens-ratio; --context-length does not change the pool"}
        cap = self._vllm(kv_bytes)
        groups = vllm_groups(self.spec, self.index_cache, self.draft_layers, self.stage)
        decoding = blocks_per_request(groups, self.max_model_len, self.query_len, self.in_flight_batches)
        return {"bytes_per_block": cap.bytes_per_block, "num_blocks": cap.num_blocks,
                "decode_blocks_per_request": decoding - -(-self.max_model_len // VLLM_BLOCK_TOKENS),
                "blocks_per_request": cap.blocks_per_request, "concurrent_requests": cap.concurrency,
                "fits_one_request": cap.fits_one, "marginal_bytes_per_token": cap.bytes_per_block / VLLM_BLOCK_TOKENS,
                "fixed_blocks_per_request": cap.blocks_per_request - -(-self.max_model_len // VLLM_BLOCK_TOKENS),
                "in_flight_batches": self.in_flight_batches,
                "knob": f"--max-num-batched-tokens (every sliding-window group reserves {self.in_flight_batches} x it "
                        "in flight per request) and --max-model-len"}

    def longest_len(self, kv_bytes: float, limit: int) -> int:
        """The longest max-model-len one request can have (vLLM: its blocks fit beside the null block, found by
        bisection as vLLM's own error message does; SGLang: the full-token pool)."""
        if self.engine == "sglang":
            return min(self._sglang(kv_bytes).full_tokens, limit)
        blocks = int(max(kv_bytes, 0) // self._vllm(0.0).bytes_per_block) - 1
        groups = vllm_groups(self.spec, self.index_cache, self.draft_layers, self.stage)
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if blocks_per_request(groups, mid, self.max_num_batched_tokens, self.in_flight_batches) <= blocks:
                lo = mid
            else:
                hi = mid - 1
        return lo


def running_requests(rule: dict, tokens: int) -> int:
    """How many requests of `tokens` tokens each can decode at once under a V4 capacity rule (`facts`), as the
    schedulers hold them rather than as the log's worst case: vLLM frees the blocks a sliding window has left
    (v1/core/single_type_kv_cache_manager.py remove_skipped_blocks), so a decoding request holds cdiv(tokens, 256)
    full blocks plus its windows' and compressor states' few (`decode_blocks_per_request`, with the decode step's
    tokens in flight), beside one request in prefill holding its windows' whole reserve; SGLang's full-token pool
    holds tokens // L requests, its SWA pool (a tenth of it) a window and a page each, and it runs at most
    max_running_requests."""
    if "bytes_per_full_token" in rule:
        return int(min(rule["full_tokens"] // tokens, rule["swa_tokens"] // rule["swa_tokens_per_request"],
                       rule["max_running_requests"]))
    free = rule["num_blocks"] - 1 - rule["fixed_blocks_per_request"]
    return max(int(free // (-(-tokens // VLLM_BLOCK_TOKENS) + rule["decode_blocks_per_request"])), 0)


def vllm_buffer_bytes(spec, max_num_batched_tokens: int, last_stage: bool, drafting: bool) -> float:
    """Buffers vLLM 0.33.0's DeepSeek-V4 model allocates with its weights (models/deepseek_v4/nvidia/model.py): the
    top-k indices all indexer layers share, max-num-batched-tokens x index_topk int32 (32 MiB for Pro at 8,192), and
    on the last stage with speculative decoding the drafter's hidden states, max-num-batched-tokens x hc_mult x
    hidden bf16 (448 MiB for Pro at 8,192)."""
    topk = max_num_batched_tokens * (spec.index_topk or 0) * 4
    hidden = max_num_batched_tokens * (spec.hc_mult or 1) * spec.hidden_size * 2 if last_stage and drafting else 0
    return float(topk + hidden)

