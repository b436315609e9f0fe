"""The words of the tuning's reasons that need the final metrics: the memory fraction, the prefill chunk,
what limits the batch, the stalls coupled DP ranks take, where SGLang runs its dense parts (tuning.py chooses;
this says why)."""

from __future__ import annotations

from math import ceil

from mla_planner.engines.memory_rules import VLLM_PUBLISHED_CEILING
from mla_planner.engines.sglang_defaults import sglang_fraction_ceiling
from mla_planner.engines.parallel import DEEPEP_SGLANG_DISPATCH_MAX
from mla_planner.engines.profile import profile
from mla_planner.memory.accounting import stage_ranges
from mla_planner.memory.pp_split import stage_layers
from mla_planner.memory.weights import stage_weight_terms
from mla_planner.perf.metrics import Metrics
from mla_planner.perf.stalls import coupled_ranks
from mla_planner.specs.knobs import Workload, decode_query_len
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec

MAX_NUM_SEQS_CAP = 1024                         # vLLM 0.33's own default on H100/H200 (vllm/engine/arg_utils.py)


def fraction_reason(engine: str, gpu, fraction: float, scale: float = 1.0) -> str:
    """Why the knobs' memory fraction is what it is; `scale`: SGLang's own factor on it (engines.profile.
    static_fraction_scale: its aiter reserve on ROCm), said where it applies."""
    reserve = (f"; SGLang's aiter backend sizes its pool at {scale:g} x it ({fraction * scale:.3f}) above 8,192 tokens "
               "of context, keeping AITER's workspace outside the pool (priced)" if scale != 1.0 else "")
    if engine == "sglang" and fraction == sglang_fraction_ceiling(gpu):
        return (f"{fraction}: the planner's ceiling for SGLang, below what the memory model alone allows: the 10 GiB "
                "SGLang itself always keeps outside the static pool on this GPU when it sizes the pool (its decode "
                "CUDA graphs alone have taken 5-6 GB, sglang#16143); SGLang accepts a higher --mem-fraction-static, "
                "at that risk (mla-plan memory prices any fraction)" + reserve)
    if engine == "vllm" and fraction > VLLM_PUBLISHED_CEILING:
        return (f"{fraction}: above the {VLLM_PUBLISHED_CEILING} published vLLM deployments use, because under it the "
                "workload's longest request does not fit; it keeps the margin the memory model prices, not the "
                "published headroom (check it with a first run)")
    if engine == "vllm" and fraction == VLLM_PUBLISHED_CEILING:
        return (f"{fraction}: the highest --gpu-memory-utilization published DeepSeek-class vLLM deployments use "
                "(vLLM's own recipes on H200 and MI300X), below what the memory model alone allows: the headroom they "
                "keep covers what it does not price (allocator fragmentation, transient workspaces)")
    return (f"{fraction}: the highest fraction that leaves the activations, CUDA graphs, NCCL buffers and runtime "
            "the memory model predicts, plus a 2 GiB margin" + reserve)


def chunk_reason(chunk: int, m: Metrics, workload: Workload, why: str) -> str:
    """The max_num_batched_tokens reason at the batch the knobs end with."""
    longest = f" (the p99 prompt's {m.ttft_longest_s * 1e3:,.0f} ms)" if m.ttft_longest_s > m.ttft_s else ""
    rule = m.memory.capacity_rule
    cost = (f"; vLLM reserves {rule['fixed_blocks_per_request']:,} blocks per request at admission for the windows "
            f"and compressor states of {rule['in_flight_batches']} x this many tokens in flight, so its logged capacity "
            "falls as it grows"
            if rule.get("fixed_blocks_per_request") else "")   # DeepSeek-V4 (engines/compressed_kv.py)
    return (f"{chunk:,}: TTFT {m.ttft_s * 1e3:,.0f} ms{longest} with mean TPOT {m.tpot_s * 1e3:.1f} ms at "
            f"{m.concurrency_per_dp_rank} running requests per DP rank (target {workload.tpot_ms:g} ms)"
            + (f"; {why}" if why else "") + cost)


def stall_words(m: Metrics, spec: ModelSpec, layout: Layout) -> str:
    """Say so when prefill chunks stretch the tokens of coupled DP ranks: the cost PD disaggregation removes."""
    share = 1.0 - m.decode.tpot_s / m.tpot_s if m.tpot_s else 0.0
    if coupled_ranks(spec, layout) <= 1 or share < 0.25:
        return ""
    return (f"; prefill chunks on any of the {layout.dp} DP ranks stall all of them ({share:.0%} of each "
            "token's time), which prefill/decode disaggregation would remove")


def limit_words(m: Metrics, workload: Workload) -> str:
    ranks = m.layout.dp * m.layout.replicas
    offered = workload.concurrency and ceil(workload.concurrency / ranks) <= MAX_NUM_SEQS_CAP
    seqs = (f"the requests in flight at {workload.request_rate_per_s:g}/s by Little's law at the targets "
            f"({workload.concurrency:,} over the DP ranks and replicas)" if offered and workload.request_rate_per_s
            else f"the offered concurrency ({workload.concurrency:,} over the DP ranks and replicas)" if offered
            else f"the planner's cap of {MAX_NUM_SEQS_CAP:,} per DP rank (vLLM's own default --max-num-seqs); the "
                 "KV pool and the TPOT target would allow more")
    k = m.memory.knobs
    q = decode_query_len(k) if profile(k.engine).graph_range_in_tokens else 1
    graphs = (f"the CUDA-graph capture range, which the plan raised to {k.cuda_graph_max_bs // q} requests per "
              "micro-batch" + (f" ({k.cuda_graph_max_bs} tokens)" if q > 1 else "") + " (capturing more would "
              "not serve more: the graphs take the KV room a larger batch needs)" if k.cuda_graph_max_bs else
              "the engine's CUDA-graph capture range (a larger decode batch runs eagerly, several times slower)")
    return {"kv": "the KV pool at the workload's lengths (no preemption)",
            "tpot": f"the {workload.tpot_ms:g} ms TPOT target",
            "ttft": f"the {workload.ttft_ms:g} ms TTFT target: a larger batch queues the prompts behind each other "
                    "past it (Little's law: request_times.first_token_s)",
            "max_num_seqs": seqs,
            "max_num_batched_tokens": "vLLM's token budget per step (each running request decodes one token of it)",
            "cuda_graphs": graphs,
            "deepep_dispatch": f"SGLang's DeepEP low-latency dispatch, at most {DEEPEP_SGLANG_DISPATCH_MAX:,} tokens "
                               "per DP rank per step" + (f" ({decode_query_len(m.memory.knobs)} per request with MTP)"
                                                          if m.memory.knobs.mtp else ""),
            "none": "nothing (it cannot serve)"}.get(m.concurrency_limit, m.concurrency_limit)


def dense_reason(spec: ModelSpec, layout: Layout, per_rank: bool) -> str:
    """SGLang under DP attention: where the dense MLP layers and the lm_head run, and what the other way costs."""
    ranges = stage_ranges(stage_layers(spec.num_hidden_layers, layout.pp, "sglang"))
    extra = max(_dense_extra_bytes(spec, layout, ranges, i) for i in range(layout.pp)) / 2**30
    more = f"{'up to ' if layout.pp > 1 else ''}{extra:.1f} GiB more per GPU"
    if per_rank:
        return (f"on (--moe-dense-tp-size 1 --enable-dp-lm-head, the large-scale EP recipe): each DP rank runs the "
                f"dense MLP layers and the lm_head on its own tokens, holding them whole ({more}), with no "
                f"all-gather of every rank's tokens around them")
    return (f"off (SGLang's default): the dense MLP layers and the lm_head are split over all {layout.stage_gpus} "
            f"GPUs of the stage and run on every DP rank's tokens, gathered first; per rank they would take {more}")


def _dense_extra_bytes(spec: ModelSpec, layout: Layout, ranges: list[range], stage: int) -> float:
    """What holding the dense MLP layers and lm_head whole adds to one GPU of pipeline stage `stage`."""
    layers, first, last = ranges[stage], stage == 0, stage == layout.pp - 1
    per_rank = stage_weight_terms(spec, layout, layers, first, last, "sglang", dense_per_rank=True)
    split_way = stage_weight_terms(spec, layout, layers, first, last, "sglang")
    return sum(per_rank.get(g, 0.0) - split_way.get(g, 0.0) for g in ("weights/dense_ffn", "weights/lm_head"))
