"""Launch knobs and the workload: the other two words of the shared vocabulary.

`Knobs` are engine-neutral; the launch layer maps them to vLLM / SGLang flags:
  memory_fraction  vLLM --gpu-memory-utilization, SGLang --mem-fraction-static
  max_num_seqs     vLLM --max-num-seqs (per DP rank), SGLang --max-running-requests
  max_num_batched_tokens  vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size
  max_model_len    vLLM --max-model-len, SGLang --context-length
  block_size       vLLM --block-size, SGLang --page-size
  cuda_graph_max_bs  vLLM --max-cudagraph-capture-size, SGLang --cuda-graph-max-bs-decode (the largest
                   decode batch run from a CUDA graph; None: the engine's default, engine_memory.graph_batch_cap)
  pp_layer_partition  vLLM VLLM_PP_LAYER_PARTITION, SGLang SGLANG_PP_LAYER_PARTITION (decoder layers per
                   pipeline stage; None: the engine's own split by count, memory.stage_layers)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ENGINES = ("vllm", "sglang")
KV_DTYPES = ("bf16", "fp8", "fp8_ds_mla")


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
    pp_layer_partition: Optional[tuple[int, ...]] = None
    cuda_graph_max_bs: Optional[int] = None


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
