"""SGLang 0.5.23 commands: `python3 -m sglang.launch_server --model-path MODEL ...` for every node.

Flags and recipes of SGLang 0.5.23 (sglang/srt/server_args.py and its arg_groups), checked against its
wheel:
  layout   --tp-size is the *total* TP of a pipeline stage's group and spans every GPU of a
           DP-attention group: tp*dp; dp > 1 -> --attn-dp-size dp (not the deprecated
           --enable-dp-attention); --ep-size ep (and --moe-a2a-backend deepep with DP attention and
           ep == tp*dp, inside a node too: a2a.py, the all-to-all the step model prices); --pp-size; --dcp-size
  knobs    --page-size, --kv-cache-dtype (bf16 pinned, fp8 -> fp8_e4m3: `auto` may turn into FP8 for
           some DeepSeek variants), --mem-fraction-static, --max-running-requests and
           --chunked-prefill-size (both totals over the attention-DP ranks: SGLang divides them by
           attn_dp_size, so knobs per DP rank are multiplied by dp), --context-length,
           --disable-radix-cache, --attention-backend, --cuda-graph-backend-{decode,prefill} disabled
           (not the deprecated --disable-cuda-graph), --cuda-graph-max-bs-decode (when the plan raises the
           capture range; per DP rank), MTP as EAGLE with one draft step, --moe-dense-tp-size 1
           --enable-dp-lm-head with dense_per_rank (the large-scale EP recipe, sglang#6017 / #6669)
  nodes    the same command on every node, only --node-rank differs: --nnodes --node-rank
           --dist-init-addr HEAD:PORT (+ --dist-timeout for slow loads); --host/--port on rank 0.
SGLang has no Ray form here (`--use-ray` is an HTTP mode, not a multi-node launcher).
"""

from __future__ import annotations

from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.engines.layouts import PP_SPEC_ENV
from mla_planner.engines.sparse import dsa_prefill_backend, is_sparse, kv_flag, own_rows
from mla_planner.launch import a2a
from mla_planner.launch.command import (
    DEPLOYMENT_TAG,
    GPU_TAG,
    REPLICAS_TAG,
    LaunchInputs,
    NodeCommand,
    ShellRef,
    check_inputs,
    flag_words,
)
from mla_planner.launch.env import instance_env
from mla_planner.launch.recipes import recipe_flags
from mla_planner.launch.placement import InstancePlacement, place
from mla_planner.specs.knobs import Knobs, decode_query_len
from mla_planner.specs.layout import Layout

PROGRAM = ["python3", "-m", "sglang.launch_server"]
KV_CACHE_DTYPES = {"bf16": "bf16", "fp8": "fp8_e4m3"}
DIST_TIMEOUT_S = 3600   # SGLang DeepSeek FAQ: slow multi-node loads
A2A_NOTE = {"deepep": "MoE all-to-all: --moe-a2a-backend deepep needs DeepEP and NVSHMEM on this node (README.md, "
                      "'Expert-parallel all-to-all'). Without them, delete that flag: SGLang falls back to its default "
                      "(none: all-gather around the MoE), which is slower than the plan predicts.",
            "mori": "MoE all-to-all: --moe-a2a-backend mori needs MoRI (ROCm/mori, in SGLang's ROCm images) and, "
                    "across "
                    "nodes, RDMA NICs MoRI drives (Pensando, Thor2, ConnectX-7). Without it, delete that flag and the "
                    "MORI_* / SGLANG_MORI_* variables: SGLang falls back to all-gather around the MoE, slower than "
                    "planned."}


def check_expressible(inp: LaunchInputs) -> None:
    check_inputs(inp)
    if inp.mode != "native":
        raise PlanError("SGLang is launched natively on every node (--nnodes/--node-rank/--dist-init-addr); "
                        "--mode ray is vLLM's form")
    if inp.knobs.kv_cache_dtype not in KV_CACHE_DTYPES and not own_rows(inp.spec):   # DSA, V4: the backend's row
        raise PlanError(f"SGLang 0.5.23 has no '{inp.knobs.kv_cache_dtype}' KV cache dtype; "
                        f"choices here: {', '.join(KV_CACHE_DTYPES)}")


def server_totals(L: Layout, k: Knobs) -> tuple[int, int]:
    """--max-running-requests and --chunked-prefill-size: totals over the DP ranks (SGLang divides them by
    --attn-dp-size), from the knobs' per-rank values."""
    return k.max_num_seqs * L.dp, k.max_num_batched_tokens * L.dp


def int8_flag(spec) -> Optional[str]:
    """w8a8_int8 for per-channel INT8 weights: meituan's DeepSeek-R1-Channel-INT8 ships no quantization_config,
    so SGLang reads it as BF16 unless told (its DeepSeek guide's 32 x L40S command passes it; the block-INT8
    release carries `quant_method: blockwise_int8` and needs no flag). Redundant, not wrong, for a channel
    checkpoint whose config names w8a8_int8."""
    return "w8a8_int8" if spec.weight_dtype == "int8" and not spec.int8_block else None


# a params.json checkpoint (Mistral Large 3): SGLang 0.5.23 picks its Mistral parser by the path's name only
# (utils/hf_transformers/mistral_utils.py is_mistral_model), so it is named
MISTRAL_FORMAT = {"mistral": (("--model-config-parser", "mistral"), ("--load-format", "mistral"))}


def speculative_flags(k: Knobs, drafter: Optional[str]) -> list[tuple]:
    """SGLang's speculative decoding: the MTP layer as EAGLE, one draft token per step, chained (top-k 1); a DSpark
    draft as DSPARK with its block (the verify window, block + 1, follows: arg_groups/fields/spec.py)."""
    if not k.mtp:
        return []
    if drafter == "dspark":
        return [("--speculative-algorithm", "DSPARK"), ("--speculative-dspark-block-size", k.mtp_draft_tokens)]
    return [("--speculative-algorithm", "EAGLE"), ("--speculative-num-steps", k.mtp_draft_tokens),
            ("--speculative-eagle-topk", 1), ("--speculative-num-draft-tokens", decode_query_len(k))]


def sizing_flags(inp: LaunchInputs) -> list[str]:
    L, k = inp.layout, inp.knobs
    running, chunk = server_totals(L, k)
    return flag_words([
        ("--model-path", inp.model_path),
        ("--quantization", int8_flag(inp.spec)),
        ("--tp-size", L.tp * L.dp),
        ("--pp-size", L.pp if L.pp > 1 else None),
        ("--attn-dp-size", L.dp if L.dp > 1 else None),
        ("--ep-size", L.ep if L.ep > 1 else None),
        ("--moe-a2a-backend", a2a.sglang_backend(L, inp.topology.gpu)),
        ("--moe-dense-tp-size", 1 if k.dense_per_rank else None),
        ("--enable-eplb", k.redundant_experts > 0),
        ("--ep-num-redundant-experts", k.redundant_experts or None),
        ("--enable-dp-lm-head", k.dense_per_rank),
        ("--dcp-size", L.dcp if L.dcp > 1 else None),
        ("--page-size", k.block_size),
        ("--kv-cache-dtype", kv_flag("sglang", k.kv_cache_dtype) if own_rows(inp.spec)
         else KV_CACHE_DTYPES[k.kv_cache_dtype]),
        ("--mem-fraction-static", k.memory_fraction),
        ("--max-running-requests", running),
        ("--chunked-prefill-size", chunk),
        ("--context-length", k.max_model_len),
        ("--disable-radix-cache", not k.prefix_caching),
        ("--attention-backend", None if own_rows(inp.spec) else k.attention_backend),   # V4: --dsv4-attn-backend auto
        ("--dsa-decode-backend", k.attention_backend if is_sparse(inp.spec) else None),   # DSA: the decode kernel
        ("--dsa-prefill-backend", dsa_prefill_backend("sglang", k.attention_backend)   # ROCm: tilelang too
         if is_sparse(inp.spec) else None),
        ("--cuda-graph-backend-decode", None if k.cuda_graphs else "disabled"),
        ("--cuda-graph-backend-prefill", None if k.cuda_graphs else "disabled"),
        ("--cuda-graph-max-bs-decode", k.cuda_graph_max_bs if k.cuda_graphs else None),
        *speculative_flags(k, inp.spec.drafter),
        *MISTRAL_FORMAT.get(inp.spec.config_format, ()),
        *recipe_flags(inp.spec, "sglang"),
        ("--trust-remote-code", True),
    ])


def node_commands(inp: LaunchInputs) -> list[NodeCommand]:
    check_expressible(inp)
    return [_command(inp, inst, i) for inst in place(inp.layout, inp.topology) for i in range(len(inst.nodes))]


def _command(inp: LaunchInputs, inst: InstancePlacement, i: int) -> NodeCommand:
    L, ports = inp.layout, inp.ports
    library = a2a.sglang_backend(L, inp.topology.gpu)
    e = instance_env("sglang", inp.topology, inst.multi_node, inst.visible_devices, inp.spec.num_hidden_layers,
                     L.pp, inp.pp_partition, library)
    e.env.update(a2a.sglang_dispatch_env(L, inp.knobs, inp.topology.gpu))
    e.env.update(a2a.mori_heap_env("sglang", inp.spec, L, inp.knobs, inp.topology.gpu))
    if inp.knobs.mtp and L.pp > 1:   # SGLang refuses PP + speculative decoding outside PD prefill without it
        e.env[PP_SPEC_ENV] = "1"
    if library:
        e.notes.append(A2A_NOTE[library])
    if L.dp > 1:
        k, (running, chunk) = inp.knobs, server_totals(L, inp.knobs)
        e.notes.append(f"--max-running-requests {running} and --chunked-prefill-size {chunk} are totals over the "
                       f"{L.dp} DP ranks: SGLang divides them by --attn-dp-size, so each rank gets the plan's "
                       f"{k.max_num_seqs} and {k.max_num_batched_tokens}")
    nodes = flag_words([("--nnodes", len(inst.nodes)), ("--node-rank", i),
                        ("--dist-init-addr", ShellRef("HEAD_IP", f":{ports.of(ports.sglang_dist_init, inst.replica)}")),
                        ("--dist-timeout", DIST_TIMEOUT_S)]) if inst.multi_node else []
    port = ports.of(ports.sglang_api, inst.replica) if i == 0 else None
    serve = flag_words([("--host", "0.0.0.0"), ("--port", port)]) if port else []
    return NodeCommand(inst.nodes[i], PROGRAM + sizing_flags(inp) + nodes + serve, e.env,
                       inst.gpus_per_node, inst.replica, "server" if i == 0 else "headless", port, len(PROGRAM),
                       needs=("HEAD_IP",) if inst.multi_node else (), notes=e.notes)


def bench_argv(inp: LaunchInputs, concurrency: int, rate: Optional[float] = None,
               deployment: Optional[str] = None) -> list[str]:
    """`python3 -m sglang.benchmark.serving` (0.5.23 deprecates the old `sglang.bench_serving` path) with
    the workload's fixed lengths: --random-range-ratio 1 (SGLang's default 0 samples lengths in [1, len]), at
    bench.sh's ${CONCURRENCY}, its result appended to ${RESULT}.jsonl with the GPU and the ${REPLICAS} behind its
    endpoint in its tag, `mla_plan_gpu=NAME,mla_plan_replicas=N` (sglang/benchmark/serving.py --output-file, --tag)
    for `mla-plan calibrate`."""
    w = inp.workload
    return ["python3", "-m", "sglang.benchmark.serving"] + flag_words([
        ("--backend", "sglang"), ("--host", ShellRef("BENCH_HOST")), ("--port", ShellRef("BENCH_PORT")),
        ("--model", inp.model_path), ("--dataset-name", "random"), ("--random-input-len", w.input_len),
        ("--random-output-len", w.output_len), ("--random-range-ratio", 1.0),
        ("--max-concurrency", ShellRef("CONCURRENCY")), ("--request-rate", rate),
        ("--num-prompts", ShellRef("PROMPTS")),
        ("--output-file", ShellRef("RESULT", ".jsonl")),
        ("--tag", ShellRef("REPLICAS", prefix=f"{GPU_TAG}={inp.topology.gpu.name},"
                           + (f"{DEPLOYMENT_TAG}={deployment}," if deployment else "") + f"{REPLICAS_TAG}="))])
