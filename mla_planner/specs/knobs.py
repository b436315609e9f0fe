"""Launch knobs and the workload: the other two words of the shared vocabulary.

`Knobs` are engine-neutral; the launch layer maps them to vLLM / SGLang flags:
  memory_fraction  vLLM --gpu-memory-utilization, SGLang --mem-fraction-static
  max_num_seqs     vLLM --max-num-seqs (per DP rank), SGLang --max-running-requests
  max_num_batched_tokens  vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size
  max_model_len    vLLM --max-model-len, SGLang --context-length
  block_size       vLLM --block-size, SGLang --page-size
  cuda_graph_max_bs  vLLM --max-cudagraph-capture-size, SGLang --cuda-graph-max-bs-decode (the largest
                   decode batch run from a CUDA graph, in the flag's own unit: vLLM counts tokens, 1 + k per
                   request with MTP, SGLang requests; None: the engine's default, cuda_graphs.graph_batch_cap)
  pp_layer_partition  vLLM VLLM_PP_LAYER_PARTITION, SGLang SGLANG_PP_LAYER_PARTITION (decoder layers per
                   pipeline stage; None: the engine's own split by count, memory.stage_layers)
  mtp              speculative decoding with the model's own MTP layer drafting `mtp_draft_tokens` token(s) per
                   step (k): vLLM --speculative-config '{"method":"mtp","num_speculative_tokens":k}', SGLang
                   --speculative-algorithm EAGLE --speculative-num-steps k --speculative-num-draft-tokens k + 1
  indexer_kv_dtype DeepSeek-V4's index-key cache: fp8, or mxfp4 where vLLM offers it (Blackwell:
                   --attention-config '{"indexer_kv_dtype":"mxfp4"}', the recipes' FP4 indexer cache; CDNA4: its
                   own default with AITER)
  dense_per_rank   SGLang under DP attention (tp = 1): the dense MLP layers and the lm_head on each DP rank's own
                   tokens (--moe-dense-tp-size 1 --enable-dp-lm-head) instead of split over every GPU of the
                   stage with all ranks' tokens gathered (engines.parallel.dense_tp); vLLM always does the former
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ENGINES = ("vllm", "sglang")
KV_DTYPES = ("bf16", "fp8", "fp8_ds_mla")
KV_DTYPE_CHOICES = {"auto": "bf16", **{d: d for d in KV_DTYPES},
                    "fp8_e4m3": "fp8"}   # both engines' fp8 is e4m3 (SGLang's flag spells it out; launch/sglang.py)
MTP_DRAFT_TOKENS = 1        # tokens the MTP layer drafts per step by default (DeepSeek-V3 trains one MTP module, depth
                            # 1); the recipes run 3 (V3.2, GLM-5) or more, the one module drafting autoregressively
MTP_ACCEPTANCE = 0.85       # chance the target model accepts a drafted token: "the acceptance rate of the second
                            # token prediction ranges between 85% and 90%" (DeepSeek-V3 Technical Report,
                            # arXiv:2412.19437, section 5.4.3); the low end, as chat traffic varies


@dataclass(frozen=True)
class Knobs:
    engine: str = "vllm"
    block_size: int = 64
    kv_cache_dtype: str = "bf16"
    memory_fraction: float = 0.9
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    attention_backend: Optional[str] = None
    prefix_caching: bool = True
    cuda_graphs: bool = True
    mtp: bool = False
    mtp_draft_tokens: int = MTP_DRAFT_TOKENS
    pp_layer_partition: Optional[tuple[int, ...]] = None
    cuda_graph_max_bs: Optional[int] = None
    dense_per_rank: bool = False
    indexer_kv_dtype: str = "fp8"       # DeepSeek-V4's index-key cache: fp8 (132 B) or mxfp4 (68 B; vLLM, sm10x/CDNA4)
    images: bool = False                # a multimodal checkpoint served with image inputs (else text-only): its
                                        # vision encoder on the GPUs and, for vLLM, the encoder's profiled memory
    redundant_experts: int = 0          # EPLB's extra physical copies of routed experts per MoE layer, spread over
                                        # the EP ranks (SGLang --ep-num-redundant-experts, vLLM --eplb-config)
    host_overlap: bool = True           # the engine runs its host work beside the GPU's (vLLM's async scheduling,
                                        # SGLang's overlap scheduler; engines/scheduling.py): off with their flags


@dataclass(frozen=True)
class Workload:
    """What the deployment must serve. Lengths in tokens; `*_max` are the p99 (or the fixed value)
    and size `max_model_len`; the plain values are typical (p50) lengths and size throughput."""
    input_len: int = 2048
    output_len: int = 512
    input_len_max: Optional[int] = None
    output_len_max: Optional[int] = None
    concurrency: Optional[int] = None
    request_rate_per_s: Optional[float] = None
    ttft_ms: float = 3000.0
    tpot_ms: float = 50.0
    prefix_hit_rate: float = 0.0
    mtp_acceptance: float = MTP_ACCEPTANCE

    @property
    def context_len(self) -> int:
        """Typical context at the end of a request (input + output)."""
        return self.input_len + self.output_len

    @property
    def mean_decode_context(self) -> int:
        """Average context seen over a request's decode steps: input + output/2."""
        return self.input_len + self.output_len // 2

    @property
    def max_context_len(self) -> int:
        """Longest request the deployment must accept: p99 input + p99 output."""
        return (self.input_len_max or self.input_len) + (self.output_len_max or self.output_len)

    @property
    def tpot_applies(self) -> bool:
        """Whether requests have time between tokens to hold to the TPOT target: a one-token output is all
        prefill (its first token is its last), so only TTFT and throughput apply to it."""
        return self.output_len > 1


def decode_query_len(knobs: Knobs) -> int:
    """Tokens each decoding sequence runs through the model per step: 1, or with MTP the last accepted
    token and the drafted ones, verified in one forward (vLLM `uniform_decode_query_len` = 1 + k)."""
    return 1 + knobs.mtp_draft_tokens if knobs.mtp else 1


def tokens_per_step(knobs: Knobs, acceptance: float) -> float:
    """Output tokens a decoding sequence gains per step, on average: 1 + a + a^2 + ... + a^k for k drafted
    tokens each accepted with probability a given the previous one was (Leviathan et al., "Fast Inference
    from Transformers via Speculative Decoding", ICML 2023, eq. 1 with a chain of k drafts). 1 without MTP."""
    if not knobs.mtp:
        return 1.0
    return sum(acceptance ** i for i in range(knobs.mtp_draft_tokens + 1))
