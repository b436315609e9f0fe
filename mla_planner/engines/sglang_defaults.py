"""SGLang's own memory defaults: the chunked prefill, the decode CUDA-graph batch and the --mem-fraction-static it
computes when the flag is not given, each from the GPU's memory as nvidia-smi reports it.

Modelled on SGLang 0.5.23 (`sglang/srt/arg_groups/memory_hook.py`: handle_gpu_memory_settings,
reserve_for_graph_mb, reserve_for_deepep_a2a_mb). In MiB:

    reserved = 512 + max(chunked, 2048) x 1.5 + tp x pp / 8 x 1024 + graphs, at least 10 GiB on a > 60 GiB GPU,
               then + 2 GiB for DeepEP's buffers in the decode graphs (`sglang_reserve_mib` has the terms)
    f        = round((nvidia_smi_MiB - reserved) / nvidia_smi_MiB, 3)

`chunked` is the server's --chunked-prefill-size: the handler runs before the DP-attention one divides it by the
attention-DP size (parallel_hook.py), so it is the per-rank chunk x dp."""

from __future__ import annotations

from typing import Optional

from mla_planner.core.units import GiB, MiB
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.parallel import uses_deepep
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.gpu import GPU
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec

DRIVER_RESERVE_BYTES = 560 * MiB   # nvidia-smi total - torch's (H100: 81,559 MiB vs 79.10 GiB), no nvidia_smi_mib
SGLANG_RESERVE_FLOOR_MIB = 10 * 1024   # memory_hook.py: reserved_mem = max(reserved_mem, 10 * 1024) ...
SGLANG_FLOOR_ABOVE_MIB = 60 * 1024     # ... on a GPU with more than 60 GiB
SGLANG_DEEPEP_RESERVE_MIB = 2 * 1024   # reserve_for_deepep_a2a_mb: "DeepEP all-to-all buffers captured in the
                                       # decode graph are real extra allocations, reserved on top of the floor"


def nvidia_smi_mib(gpu: GPU) -> float:
    """Total memory in MiB as nvidia-smi prints it (what SGLang's get_nvgpu_memory_capacity reads): the GPU
    table's figure, else what torch sees plus the usual driver reserve."""
    if gpu.nvidia_smi_mib:
        return float(gpu.nvidia_smi_mib)
    return (gpu.memory_bytes + DRIVER_RESERVE_BYTES) / MiB


def sglang_fraction_ceiling(gpu: GPU) -> float:
    """The highest --mem-fraction-static SGLang 0.5.23 itself ever computes: on a GPU over 60 GiB it never
    reserves under 10 GiB outside the static pool (memory_hook.handle_gpu_memory_settings:
    reserved_mem = max(reserved_mem, 10 * 1024) MiB). The planner keeps to it: DeepSeek's decode CUDA
    graphs alone have taken 5-6 GB with FA3 (sglang#16143; SGLang docs/advanced_features/hyperparameter_tuning.md:
    keep 5-8 GB free), which the graph model here does not explain. 1.0 (no ceiling) on smaller GPUs."""
    mib = nvidia_smi_mib(gpu)
    return round((mib - SGLANG_RESERVE_FLOOR_MIB) / mib, 3) if mib > SGLANG_FLOOR_ABOVE_MIB else 1.0


def sglang_chunked_prefill(gpu: GPU) -> int:
    """SGLang default --chunked-prefill-size by GPU memory (arg_groups/memory_hook.handle_gpu_memory_settings)."""
    mib = nvidia_smi_mib(gpu)
    return 2048 if mib < 20 * 1024 else 4096 if mib < 60 * 1024 else 8192 if mib < 160 * 1024 else 16384


def sglang_cuda_graph_max_bs(gpu: GPU, tp_size: int) -> int:
    """SGLang default decode cuda-graph max batch by GPU memory and --tp-size (memory_hook buckets)."""
    mib = nvidia_smi_mib(gpu)
    if mib < 20 * 1024:
        return 8
    if mib < 60 * 1024:
        return (48 if mib < 35 * 1024 else 32) if tp_size < 4 else 160
    return 512 if mib >= 160 * 1024 or tp_size >= 4 else 256


def sglang_decode_max_bs(gpu: GPU, layout: Layout, knobs: Optional[Knobs] = None) -> int:
    """The largest decode batch SGLang captures a graph for, in requests: --cuda-graph-max-bs-decode (the knob), else
    its bucket by GPU memory and --tp-size (`sglang_cuda_graph_max_bs`)."""
    return (knobs.cuda_graph_max_bs if knobs is not None and knobs.cuda_graph_max_bs
            else sglang_cuda_graph_max_bs(gpu, layout.stage_gpus))


def sglang_prefill_graphs(gpu: GPU, layout: Layout, knobs: Knobs, spec: ModelSpec) -> bool:
    """Whether SGLang 0.5.23 captures prefill CUDA graphs by the time it sizes its fraction: its default backend is
    breakable on CUDA and disabled elsewhere (model_executor/cuda_graph_config.default_prefill_backend), and
    apply_cuda_graph_compatibility (cuda_graph_hook.py, run before the memory handler) turns it off under pipeline
    parallelism, decode context parallelism and for DeepSeek-V4; the planner's eager commands disable it too."""
    return knobs.cuda_graphs and gpu.vendor != "amd" and layout.pp == 1 and layout.dcp == 1 and not is_compressed(spec)


def sglang_reserve_mib(gpu: GPU, layout: Layout, knobs: Knobs, spec: ModelSpec) -> dict[str, float]:
    """The MiB SGLang 0.5.23 keeps outside its static pool when it computes --mem-fraction-static, by term
    (memory_hook.handle_gpu_memory_settings, reserve_for_graph_mb, reserve_for_deepep_a2a_mb): a 512 MiB constant;
    1.5 MiB a token of the server's chunked prefill (at least 2,048); 1 GiB per 8 ranks of tp x pp; 2 MiB a decode-graph
    request with decode graphs; under DP attention, graphs or not, 3 MiB (4.5 above max_bs 300) a request per
    attention-DP rank; with prefill graphs (`sglang_prefill_graphs`) 1.5 GiB for an MLA model or 8 MiB a captured
    prefill size otherwise, and 1 GiB more where they run DeepEP; `floor` what lifts the sum to 10 GiB on a GPU over
    60 GiB; 2 GiB when the decode graphs run DeepEP, on top of the floor."""
    max_bs = sglang_decode_max_bs(gpu, layout, knobs)
    chunked = knobs.max_num_batched_tokens * layout.dp     # the server flag: per-DP-rank knob x dp
    deepep = uses_deepep(layout, gpu)
    terms = {"constant": 512.0, "activations": max(chunked, 2048) * 1.5,
             "parallel": layout.stage_gpus * layout.pp / 8 * 1024}
    if knobs.cuda_graphs:
        terms["decode_graphs"] = max_bs * 2.0
    if layout.dp > 1:
        terms["dp_attention_graphs"] = max_bs * layout.dp * (4.5 if max_bs > 300 else 3.0)
    if sglang_prefill_graphs(gpu, layout, knobs, spec):
        mla = (attention_of(spec).backend_family or "").startswith("mla")   # DSA too: SGLang's AttentionArch.MLA
        terms["prefill_graph"] = 1.5 * 1024 if mla else len(prefill_capture_sizes(chunked)) * 8.0
        if deepep:
            terms["prefill_graph_deepep"] = 1024.0
    if nvidia_smi_mib(gpu) > SGLANG_FLOOR_ABOVE_MIB:
        terms["floor"] = max(SGLANG_RESERVE_FLOOR_MIB - sum(terms.values()), 0.0)
    if knobs.cuda_graphs and deepep:
        terms["deepep"] = float(SGLANG_DEEPEP_RESERVE_MIB)
    return terms


def prefill_capture_sizes(max_tokens: int) -> list[int]:
    """SGLang 0.5.23's prefill CUDA-graph sizes, in tokens, up to `max_tokens` (cuda_graph_hook.
    generate_prefill_cuda_graph_batch_sizes)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32)) + list(range(576, 1025, 64))
             + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return [s for s in sizes if s <= max_tokens]


def sglang_default_fraction(gpu: GPU, layout: Layout, knobs: Knobs, spec: ModelSpec) -> float:
    """SGLang 0.5.23's computed --mem-fraction-static: round((GPU MiB - reserved) / GPU MiB, 3), reserved as
    `sglang_reserve_mib` sums it. Reproduces SGLang 0.5.23's own resolved 0.886 (TP8 H200), 0.843-0.844 (TP8 B200)
    and, by its terms, 0.758 with DP attention 8 (0.736 over DeepEP). Not modelled: speculative decoding's reserves."""
    mib = nvidia_smi_mib(gpu)
    return round((mib - sum(sglang_reserve_mib(gpu, layout, knobs, spec).values())) / mib, 3)


RESERVE_WORDS = {"activations": "for activations (1.5 MiB a token of the server's --chunked-prefill-size {chunk:,})",
                 "dp_attention_graphs": "for the decode graphs under DP attention ({dp_mib:g} MiB a request of "
                                        "max_bs {max_bs} on each of {dp} attention-DP ranks)",
                 "decode_graphs": "for the decode graphs (2 MiB a request of max_bs {max_bs})",
                 "prefill_graph": "for the prefill graphs", "prefill_graph_deepep": "for DeepEP in the prefill graphs",
                 "parallel": "for {gpus} ranks (1 GiB per 8)",
                 "deepep": "for DeepEP's buffers in the decode graphs", "floor": "to reach its 10 GiB floor",
                 "constant": "of constant metadata"}


def sglang_reserve_words(gpu: GPU, layout: Layout, knobs: Knobs, spec: ModelSpec, terms: int = 2) -> str:
    """What SGLang's computed fraction keeps out of its pool, its largest `terms` terms named with their GiB,
    e.g. 'its arg_groups/memory_hook.py reserves 216.0 GiB outside the pool, 192.0 GiB for activations (...), 18.0 GiB
    for the decode graphs ...', for the lines that explain a low or negative default."""
    reserve = sglang_reserve_mib(gpu, layout, knobs, spec)
    largest = sorted(((v, k) for k, v in reserve.items() if v > 0), reverse=True)[:terms]
    max_bs = sglang_decode_max_bs(gpu, layout, knobs)
    fill = dict(chunk=knobs.max_num_batched_tokens * layout.dp, dp=layout.dp, gpus=layout.stage_gpus * layout.pp,
                max_bs=max_bs, dp_mib=4.5 if max_bs > 300 else 3)
    named = ", ".join(f"{v * MiB / GiB:.1f} GiB {RESERVE_WORDS[k].format(**fill)}" for v, k in largest)
    total_gib = sum(reserve.values()) * MiB / GiB
    return f"its arg_groups/memory_hook.py reserves {total_gib:.1f} GiB outside the pool, {named}"
