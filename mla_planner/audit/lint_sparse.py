"""Findings on a hand-written command for a sparse-attention model: DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5)
here, DeepSeek-V4's compressed attention in audit/lint_compressed.py. For DSA, by the
engines' own rules for it (docs/dsa-engines.md sections 2-3 and 6, data/backends.yaml `sparse`): the KV dtypes
each accepts, the sparse backends and the GPUs and caches they take, the block sizes (64 tokens on CUDA, vLLM's
multiples of 16 on ROCm), SGLang's DSA kernels that run on ROCm (tilelang, triton, aiter: arg_groups/overrides.py
`_dsa_split_backend_resolution`, SGLang 0.5.23). (level, flag, text) tuples, as audit/lint.py makes findings of
them."""

from __future__ import annotations

from mla_planner.audit.lint_compressed import compressed_findings
from mla_planner.core.errors import PlanError
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.sparse import (block_accepted, block_multiple, block_rule, dcp_problem, default_kv_class,
                                        kv_class, sparse_backends, sparse_choice)
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.gpu import GPU

# vLLM's --kv-cache-dtype spellings -> the KV class its sparse backends store ("auto": the engine's default)
VLLM_KV = {"auto": "auto", "bfloat16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_ds_mla": "fp8_ds_mla"}
SGLANG_KV = ("auto", "bf16", "bfloat16", "fp8_e4m3")    # overrides.py: "DeepSeek DSA only supports bf16 ... fp8_e4m3"
SGLANG_DSA_BACKENDS = ("dsa", "nsa")                    # --attention-backend values of its DSA path
SGLANG_HIP_DSA_KERNELS = ("tilelang", "triton", "aiter")  # --dsa-{decode,prefill}-backend values that run on ROCm


def sparse_findings(engine: str, values: dict, spec: ModelSpec, gpu: GPU, dcp: int,
                    heads_per_rank: int) -> list[tuple]:
    if is_compressed(spec):
        return compressed_findings(engine, values, spec, gpu)
    raw, block = values.get("kv", "auto"), values.get("block")
    size = block_multiple(engine, gpu)
    out = []
    if engine == "sglang":
        if raw not in SGLANG_KV:
            out.append(("error", "--kv-cache-dtype", f"{raw}: SGLang's DSA path asserts bf16 or fp8_e4m3 "
                        "(arg_groups/overrides.py)"))
        if values.get("backend") and values["backend"] not in SGLANG_DSA_BACKENDS:
            out.append(("warn", "--attention-backend", f"{values['backend']}: SGLang's sparse attention runs under "
                        "--attention-backend dsa, which it sets when none is given; pick its kernels with "
                        "--dsa-decode-backend / --dsa-prefill-backend"))
        if block and block.isdigit() and int(block) != size:
            out.append(("warn", "block size", f"--page-size {block}: SGLang sets {size}-token pages for DSA itself"))
        return out + _sglang_hip_kernels(values, gpu) + _sglang_decode_arch(values, gpu)
    if block and block.isdigit() and not block_accepted(engine, gpu, int(block)):
        out.append(("error", "block size", f"--block-size {block}: vLLM's DSA caches on {gpu.arch} take "
                    f"{block_rule(engine, gpu)} (v1/attention/backends/mla/indexer.py); it refuses to start"))
    if raw not in VLLM_KV:      # fp8_e5m2 has no sparse backend; other values are the parser's to judge
        return out + ([("error", "--kv-cache-dtype", f"{raw}: vLLM's sparse MLA backends take auto, bfloat16, fp8 "
                        "(fp8_e4m3) or fp8_ds_mla")] if raw == "fp8_e5m2" else [])
    name = (values.get("backend") or "").upper()
    if not name:       # the engine's own pick for this cache and layout, as plan makes it
        try:
            sparse_choice(engine, spec, gpu, "auto" if raw == "auto" else VLLM_KV[raw], heads_per_rank,
                          int(block) if block and block.isdigit() and block_accepted(engine, gpu, int(block))
                          else None, dcp)
        except PlanError as exc:
            out.append(("error", "--kv-cache-dtype" if dcp == 1 else "--decode-context-parallel-size", str(exc)))
        return out
    backends = sparse_backends(engine)
    if name not in backends:
        return out + [("error", "--attention-backend", f"{name} is not one of vLLM's sparse MLA backends "
                       f"({', '.join(backends)}): it finds no valid backend for sparse attention and refuses to "
                       "start")]
    entry = backends[name]
    kv = default_kv_class(engine, spec, gpu) if raw == "auto" else VLLM_KV[raw]
    if gpu.arch not in entry["archs"]:
        out.append(("error", "--attention-backend", f"{name} runs on {'/'.join(entry['archs'])}, not {gpu.arch}"))
    stores = entry["kv"]
    if kv == "fp8_ds_mla" and stores.get("fp8") != "fp8_ds_mla" or kv in ("bf16", "fp8") and kv not in stores:
        out.append(("error", "--kv-cache-dtype", f"{name} has no {kv} cache (it keeps "
                    f"{', '.join(sorted(set(stores.values())))})"))
    if dcp > 1 and (problem := dcp_problem(entry, kv_class(kv), heads_per_rank, dcp)):
        out.append(("error", "--decode-context-parallel-size", f"{name} under dcp={dcp}: {problem}; vLLM refuses "
                    "to start (docs/dsa-engines.md section 6)"))
    return out


def _sglang_decode_arch(values: dict, gpu: GPU) -> list[tuple]:
    """An NVIDIA --dsa-decode-backend on an architecture its kernel does not run on (data/backends.yaml `archs`:
    trtllm is Blackwell's, fa3 Hopper's; QA found them passed on the other)."""
    name, table = values.get("dsa_decode"), sparse_backends("sglang")
    if gpu.vendor == "amd" or name not in table or gpu.arch in table[name]["archs"]:
        return []
    return [("error", "--dsa-decode-backend", f"{name} runs on {'/'.join(table[name]['archs'])}, not {gpu.arch}")]


def _sglang_hip_kernels(values: dict, gpu: GPU) -> list[tuple]:
    """On ROCm SGLang's DSA kernels are tilelang, triton (its default) or aiter; the others are CUDA's."""
    if gpu.vendor != "amd":
        return []
    flags = (("--dsa-decode-backend", values.get("dsa_decode")), ("--dsa-prefill-backend", values.get("dsa_prefill")))
    return [("error", flag, f"{value}: a CUDA kernel; SGLang runs DSA on ROCm with {', '.join(SGLANG_HIP_DSA_KERNELS)} "
             "(triton when not given)") for flag, value in flags if value and value not in SGLANG_HIP_DSA_KERNELS]
