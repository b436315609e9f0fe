"""How vLLM V1 and SGLang turn a GPU's memory into a KV pool, and their defaults that decide it.

Modelled on the engines' own code (vLLM 0.33.0, SGLang 0.5.23 on PyPI; `EngineRules` carries older vLLM releases):

vLLM (`vllm/v1/worker/gpu_worker.py` determine_available_memory, `vllm/v1/core/kv_cache_utils.py`):
    available = total x gpu_memory_utilization - (weights + peak activation + non-torch [+ CUDA graphs])
    num_blocks = available // page_size // num_layers,  page_size = block_size x bytes/token/layer
    "GPU KV cache size" = num_blocks x block_size (x dcp), the minimum over workers and PP stages
  Context, communicators (memory.terms; gpu_worker.py): 0.8.5 charges all non-torch memory; 0.9.2-0.10.2 snapshot
  before NCCL init (NCCL charged), 0.11.0-0.33.0 after it (vllm-project/vllm#25359); >= 0.21 charges CUDA graphs.
SGLang (`kv_cache_configurator._profile_available_bytes`, `pool_configurator.calculate_pool_sizes`):
    rest = available_after_weights - pre_load_free x (1 - mem_fraction_static)
    max_total_num_tokens = rest // cell_size // page_size x page_size, cell = (d_c + d_r) x layers x bytes
  then a req_to_token table (max_running_requests + 1) x (context_len + 4) int32 out of the slack."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.core.resources import data_dir, read_data
from mla_planner.core.units import GiB
from mla_planner.engines.backends import backend, engine_version, usable_backends
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.compressed_pool import CompressedPool, engine_defaults
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.engines.multimodal import sglang_vlm_factor
from mla_planner.engines.sglang_defaults import (sglang_chunked_prefill, sglang_default_fraction,
                                                 sglang_fraction_ceiling)
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.gpu import GPU
from mla_planner.specs.topology import Topology

VLLM_DEFAULT_UTILIZATION = 0.92    # vLLM's --gpu-memory-utilization default from 0.20.0 (vllm_default_utilization)
REQ_TO_TOKEN_EXTRA_LEN = 4         # SGLang req_to_token row headroom (get_req_to_token_extra_context_len)


@dataclass(frozen=True)
class EngineRules:
    engine: str
    version: str
    graphs_in_budget: bool          # the CUDA-graph estimate is taken out of the KV budget
    context_outside_budget: bool    # the GPU context is measured before the budget starts (in the margin)
    comms_outside_budget: bool      # ... and the communicators' buffers too
    expert_group: bool = False      # an MoE model gets an expert-parallel communicator of its own (vLLM >= 0.11:
                                    # distributed/parallel_state.py builds _EP for every MoE model; 0.10.2 did not)
    sampler_sorts: bool = False     # the profile run's top-k/top-p sorts the full logits (memory.terms): vLLM 0.11.1
                                    # (vllm#26859: FlashInfer's sampler opt-in) to 0.16 (vllm#33538's Triton kernel)
    reserves_in_flight: bool = True  # V4 window groups reserve each in-flight batch (>= 0.26: compressed_kv)
    torch_gather: bool = False      # the profile run gathers logits on torch's group on CUDA (< 0.26: memory.terms)
    nvls_at_init_mib: float = 0.0   # MiB per channel and head of the NVLink SHARP buffers NCCL allocates as each
                                    # communicator is created (vLLM < 0.9: data/platform_memory.yaml `nvls`; 0: none)


OLDEST_RELEASE = {"vllm": "0.8.0", "sglang": "0.4.0"}   # the first whose accounting the rules below model: vLLM
# 0.8.0 made the V1 engine the default (its V0 engine profiled and allocated the KV cache otherwise); SGLang's earliest
# release with DeepSeek-V3 MLA serving is 0.4 (the validation's oldest logs are 0.4.3)
SGLANG_FRACTION_RULE = "0.5.3"   # the first SGLang whose default --mem-fraction-static is the reserve rule
# (server_args.py `_handle_gpu_memory_settings`) that `sglang_default_fraction` prices at 0.5.23: 0.4.3-0.4.7 picked
# 0.79-0.88 by TP size (0.4.6-0.4.7 otherwise on GPUs above 80 GiB), 0.4.8-0.5.2 reserved by GPU size (each
# release's server_args.py, read in its wheel)


def engine_rules(engine: str, version: Optional[str] = None) -> EngineRules:
    """Accounting rules of `engine` at `version` (default: vLLM 0.33.0, SGLang 0.5.23); a release older than
    OLDEST_RELEASE is refused (its accounting is not modelled)."""
    version = version or engine_version(engine)
    release = parse_version(version)
    if release < parse_version(OLDEST_RELEASE[engine]):
        raise PlanError(f"--engine-version {version}: {engine} releases before {OLDEST_RELEASE[engine]} are not "
                        "modelled" + (" (vLLM 0.8.0 made the V1 engine, whose memory accounting the planner follows, "
                                      "the default)" if engine == "vllm" else ""))
    if engine == "sglang":
        return EngineRules("sglang", version, graphs_in_budget=False, context_outside_budget=True,
                           comms_outside_budget=True)
    return EngineRules("vllm", version, graphs_in_budget=release >= (0, 21), context_outside_budget=release >= (0, 9),
                       comms_outside_budget=release >= (0, 11), expert_group=release >= (0, 11),
                       sampler_sorts=(0, 11, 1) <= release < (0, 17, 0), reserves_in_flight=release >= (0, 26),
                       torch_gather=release < (0, 26), nvls_at_init_mib=nvls_at_init_mib(release))


@lru_cache(maxsize=None)
def nvls_at_init_mib(release: tuple[int, int, int]) -> float:
    """MiB per channel and head of the NVLink SHARP buffers the NCCL that vLLM `release` ran allocates as each
    communicator is created (data/platform_memory.yaml `nvls.at_init`: by the NCCL of each torch vLLM pinned); 0.0 from
    the release whose NCCL allocates them at first use."""
    for row in read_data(data_dir("platform_memory.yaml"))["nvls"]["at_init"]:
        if release < parse_version(row["before_vllm"]):
            return float(row["mib_per_channel_head"])
    return 0.0


def profile_run_creates_comm(rules: EngineRules, gpu: GPU) -> bool:
    """Whether the engine's profile run creates a communicator it charges (memory.terms.profiled_communicator_bytes):
    vLLM's logits all-gather on torch's group (`torch_gather`), kept on ROCm by 0.33.0's CudaCommunicator.all_gather."""
    return rules.engine == "vllm" and (rules.torch_gather or gpu.vendor == "amd")


@lru_cache(maxsize=256)
def parse_version(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a release string like `0.8.4`, `0.10.1.post1` or `v0.21.0rc2` (no patch: 0);
    anything else is a user error (it would silently select the oldest accounting)."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(\.\d+)?([.+-]?[0-9A-Za-z]+)*", version.strip())
    if not match:
        raise PlanError(f"--engine-version '{version}': expected a release number like 0.8.4 or 0.33.0")
    return int(match.group(1)), int(match.group(2)), int(match.group(3)[1:]) if match.group(3) else 0


@dataclass(frozen=True)
class StageCosts:
    """What one GPU of a stage spends besides its KV pool, and what one token slot costs it."""
    weights_bytes: float
    activation_bytes: float
    cuda_graph_bytes: float
    nccl_bytes: float
    runtime_bytes: float
    slot_bytes: float           # bytes one physical token slot costs this GPU (all its layers)
    a2a_bytes: float = 0.0      # DeepEP's buffer or SGLang's MoRI EPv2 arena (`a2a_name`), charged like the weights;
    heap_bytes: float = 0.0     # MoRI's EPv1 heap (AMD), outside both engines' budgets (memory.terms)
    a2a_name: str = "deepep_buffer"
    profiled_comm_bytes: float = 0.0    # a communicator the profile run creates: charged (memory.terms)
    pool: Optional[CompressedPool] = None   # DeepSeek-V4: the engine's capacity rule instead of bytes per slot
    fraction_scale: float = 1.0     # SGLang's pool at this x its fraction (ROCm's aiter reserve: engines.profile)


def kv_pool(rules: EngineRules, knobs: Knobs, total_bytes: float, c: StageCosts, dcp: int,
            rest_bytes: Optional[float] = None) -> tuple[float, int]:
    """(pool bytes, tokens as the engine reports them) for one GPU; tokens count x dcp (each DCP rank
    keeps 1/dcp of every sequence: vLLM PR #23734 'kv token budget increased by dcp times').
    `rest_bytes`: SGLang's budget when it is not this GPU's own (`sglang_rest_bytes`, the minimum over ranks)."""
    if c.slot_bytes <= 0:
        return 0.0, 0
    budget = kv_budget_bytes(rules, knobs, total_bytes, c, rest_bytes)
    if c.pool is not None:
        return c.pool.size(budget)
    tokens = int(budget // c.slot_bytes) if budget > 0 else 0   # vLLM: whole blocks; SGLang: whole pages
    slots = tokens // knobs.block_size * knobs.block_size
    return slots * c.slot_bytes, slots * dcp


def kv_budget_bytes(rules: EngineRules, knobs: Knobs, total_bytes: float, c: StageCosts,
                    rest_bytes: Optional[float] = None) -> float:
    """The bytes the engine gives this GPU's KV pool before rounding (negative when nothing is left).
    vLLM: available = total x utilization - what it charges to the budget; num_blocks = available //
    (block_size x bytes/token/layer) // layers; each worker profiles its own memory, the minimum over
    workers is taken afterwards (memory.evaluate). SGLang: `sglang_rest_bytes`, or `rest_bytes`."""
    if rules.engine == "sglang":
        return sglang_rest_bytes(knobs, total_bytes, c) if rest_bytes is None else rest_bytes
    charged = c.weights_bytes + c.a2a_bytes + c.activation_bytes + c.profiled_comm_bytes
    charged += c.cuda_graph_bytes if rules.graphs_in_budget and knobs.cuda_graphs else 0.0
    charged += (0.0 if rules.context_outside_budget else c.runtime_bytes) + \
        (0.0 if rules.comms_outside_budget else c.nccl_bytes)
    return total_bytes * knobs.memory_fraction - charged


def sglang_rest_bytes(knobs: Knobs, total_bytes: float, c: StageCosts) -> float:
    """SGLang's KV budget on one GPU: rest = (pre_load - weights) - pre_load x (1 - f). Across GPUs SGLang
    takes the minimum (`_profile_available_bytes` reads free memory with get_available_gpu_memory(
    distributed=True), "the minimum available memory of all GPUs"), so the rank with the heaviest stage sets every
    rank's budget: memory.evaluate passes that minimum back in as `rest_bytes`. f as SGLang scales it on ROCm
    (`fraction_scale`: engines.profile.static_fraction_scale)."""
    pre_load = total_bytes - c.runtime_bytes - c.nccl_bytes
    return pre_load * knobs.memory_fraction * c.fraction_scale - c.weights_bytes - c.a2a_bytes


def sglang_req_to_token_bytes(knobs: Knobs, tokens: int) -> float:
    """SGLang ReqToTokenPool: (max_running_requests + 1) x (context_len + 4) int32, the requests capped at
    tokens // 2 (kv_cache_configurator.resolve_max_num_reqs; memory_pool.ReqToTokenPool)."""
    reqs = min(knobs.max_num_seqs, max(tokens // 2, 1))
    return float((reqs + 1) * (knobs.max_model_len + REQ_TO_TOKEN_EXTRA_LEN) * 4)


VLLM_PUBLISHED_CEILING = 0.95   # the highest --gpu-memory-utilization published DeepSeek-class vLLM deployments use:
                                # vLLM's DeepSeek recipe on 8 x H200 ("0.95 to maximize KVCache") and on MI300X,
                                # InferenceX's Kimi-K2.5 on H200; none above it (docs/memory.md, Safe fraction)


def fraction_ceiling(engine: str, gpu: GPU) -> float:
    """The highest memory fraction the planner proposes: SGLang's own (its reserve floor), vLLM's published one
    (VLLM_PUBLISHED_CEILING: the headroom published deployments keep, beyond what the memory model prices)."""
    return sglang_fraction_ceiling(gpu) if engine == "sglang" else VLLM_PUBLISHED_CEILING


def vllm_default_utilization(version: Optional[str] = None) -> float:
    """0.92 from vLLM 0.20.0, 0.9 up to 0.19.1 (vllm/config/cache.py in the 0.8.5-0.33.0 wheels); VERSION: 0.33.0."""
    return VLLM_DEFAULT_UTILIZATION if parse_version(version or engine_version("vllm")) >= (0, 20) else 0.9


def default_memory_fraction(engine: str, spec: ModelSpec, topo: Topology, layout: Layout,
                            knobs: Optional[Knobs] = None, version: Optional[str] = None) -> float:
    """The engine's own default: vLLM's --gpu-memory-utilization at VERSION; SGLang's computed
    --mem-fraction-static (`sglang_default_fraction`) for its default chunked prefill and graphs."""
    if engine == "vllm":
        return vllm_default_utilization(version)
    if version and parse_version(version) < parse_version(SGLANG_FRACTION_RULE):
        raise PlanError(f"SGLang {version.strip()} computed its default --mem-fraction-static by an older rule than "
                        f"the one the planner prices (from {SGLANG_FRACTION_RULE}); pass --mem-fraction-static (the "
                        "server log's 'mem_fraction_static=')")
    knobs = knobs or engine_default_knobs("sglang", spec, topo, layout.dp)
    return sglang_default_fraction(topo.gpu, layout, knobs, spec) * sglang_vlm_factor(spec)


SGLANG_SPECULATIVE_MAX_RUNNING = 48


def engine_default_knobs(engine: str, spec: ModelSpec, topo: Topology, dp: int = 1, deepep: bool = False,
                         **given) -> Knobs:
    """Knobs as the engine resolves them when a flag is not given (None in `given` means default):
    vLLM 0.33: block 16 (CacheConfig.DEFAULT_BLOCK_SIZE; FLASH_ATTN_MLA on Hopper takes multiples
    of 16) or 64 on sm10x Blackwell (FLASHINFER_MLA rejects 16), max-num-batched-tokens 8192 below 160 GiB
    else 16384, but 256 with the DeepEP low-latency all-to-all under DP + EP (`deepep`, not MoRI's on AMD;
    SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP), max-num-seqs 1024 capped at that budget when
    not given (engine/arg_utils.py), and a budget below max-num-seqs refused (config/scheduler.py);
    SGLang: page 1 (fa3) or 64 (trtllm_mla on sm10x Blackwell), chunked-prefill by GPU memory (per DP rank:
    divided by `dp` under DP attention), max-running-requests 2048 (its auto floor), but 48 with speculative
    decoding (MTP; arg_groups/speculative_hook.py `_handle_eagle_family`: "Max running requests is reset to 48
    for speculative decoding"; for the whole server, each DP rank taking 48 // dp: kv_cache_configurator.py).
    Both: max-model-len = the model's max_position_embeddings, bf16 KV; for DeepSeek-V4 the engines' own V4
    defaults (engines/compressed_kv.engine_defaults: fp8 rows, 256-token blocks, SGLang 256 running requests).
    memory_fraction is vLLM's 0.92 for both engines here: SGLang's default depends on the layout, so the
    callers that know it replace it with `default_memory_fraction` (or the user's flag)."""
    gpu, blackwell = topo.gpu, topo.gpu.arch == "blackwell"
    if engine == "sglang":
        base = dict(block_size=64 if blackwell else 1, max_num_seqs=2048,
                    max_num_batched_tokens=max(sglang_chunked_prefill(gpu) // dp, 1))
    else:
        base = dict(block_size=64 if blackwell else 16, max_num_seqs=1024,
                    max_num_batched_tokens=256 if deepep and gpu.vendor != "amd"   # MoRI (AMD): not batched DP
                    else 8192 if gpu.memory_bytes < 160 * GiB else 16384)
    base.update(engine=engine, kv_cache_dtype="bf16", max_model_len=spec.max_position_embeddings,
                memory_fraction=VLLM_DEFAULT_UTILIZATION)
    if is_compressed(spec):
        base.update(engine_defaults(engine))
    base.update({k: v for k, v in given.items() if v is not None})
    if base.get("mtp") and given.get("mtp_draft_tokens") is None:   # the drafter's own depth (a DSpark block)
        base["mtp_draft_tokens"] = spec.default_draft_tokens
    if engine == "sglang" and base.get("mtp") and given.get("max_num_seqs") is None and not is_compressed(spec):
        # (DeepSeek-V4's model hook sets its 256 first, so the speculative hook's 48 never applies: deepseek_v4_hook.py)
        base["max_num_seqs"] = max(SGLANG_SPECULATIVE_MAX_RUNNING // dp, 1)   # the server's, split over DP ranks
    if engine == "vllm":
        if given.get("max_num_seqs") is None:
            base["max_num_seqs"] = min(base["max_num_seqs"], base["max_num_batched_tokens"])
        budget, seqs = base["max_num_batched_tokens"], base["max_num_seqs"]
        if budget < seqs:
            whose = (f"--max-num-batched-tokens {budget}" if given.get("max_num_batched_tokens") is not None else
                     f"vLLM's default max-num-batched-tokens {budget}"
                     + (" (DP + EP with the DeepEP low-latency all-to-all)" if deepep else ""))
            raise PlanError(f"{whose} is below --max-num-seqs {seqs}: vLLM 0.33 refuses to start (each running "
                            f"request decodes one token of the step's budget); give --max-num-seqs {budget} or less")
    return Knobs(**base)


def activation_tokens(rules: EngineRules, knobs: Knobs, layout: Layout) -> int:
    """Tokens of the profiled forward on one DP rank: `knobs.max_num_batched_tokens` is per DP rank for
    both engines (vLLM's flag is; SGLang's --chunked-prefill-size is this x dp, the engine dividing it by
    the DP-attention size: 8192 -> 1024 at dp 8 in SGLang 0.5.23; launch/sglang.py multiplies)."""
    return knobs.max_num_batched_tokens


def block_size_warning(spec: ModelSpec, gpu: GPU, knobs: Knobs, dcp: int) -> str:
    """Why no MLA attention backend the engine would pick here takes `knobs.block_size` (empty when one
    does). vLLM validates the block size against the backend at start-up and refuses it ("block_size not
    supported"); SGLang forces some backends' page size (sglang/srt/arg_groups/overrides.py; data/backends.yaml)."""
    if attention_of(spec).backend_family != "mla":
        return ""
    if knobs.attention_backend:
        usable = [backend(knobs.engine, knobs.attention_backend)]
    else:
        usable = usable_backends(knobs.engine, gpu, knobs.kv_cache_dtype, dcp)
    if not usable or any(b.accepts_block(knobs.block_size) for b in usable):
        return ""
    legal = "; ".join(f"{b.name} " + (f"multiples of {b.multiple_of}" if b.multiple_of else
                                      ", ".join(map(str, b.block_sizes))) for b in usable)
    return (f"block size {knobs.block_size} is accepted by no {knobs.engine} MLA attention backend for "
            f"{gpu.name} with {knobs.kv_cache_dtype} KV (legal: {legal}); the engine will refuse it or change it")
