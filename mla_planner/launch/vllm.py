"""vLLM 0.33.0 commands: `vllm serve MODEL ...` for every node of a layout.

Flags and recipes of vLLM 0.33.0 (vllm/engine/arg_utils.py, vllm/entrypoints/cli/serve.py), checked
against its wheel:
  layout   tp -> --tensor-parallel-size, pp -> --pipeline-parallel-size, dp -> --data-parallel-size
           (attention DP; each DP rank is its own engine with tp*pp GPUs), ep > 1 ->
           --enable-expert-parallel (vLLM's EP group is always tp*dp) and, with DP, --all2all-backend
           deepep_low_latency (a2a.py: the all-to-all the step model prices), dcp -> --decode-context-parallel-size
  knobs    --block-size, --kv-cache-dtype (bf16 -> auto), --gpu-memory-utilization, --max-num-seqs and
           --max-num-batched-tokens (both per DP rank: each DP engine has its own scheduler),
           --max-model-len, prefix caching on/off, --attention-backend, --enforce-eager (graphs off),
           --max-cudagraph-capture-size (when the plan raises the capture range),
           --speculative-config {"method":"mtp"} (MTP)
  nodes    one node: plain; tp*pp across nodes: --nnodes/--node-rank/--master-addr/--master-port and
           --headless off the head (mp executor, no Ray); DP across nodes: --data-parallel-size-local,
           --data-parallel-start-rank, --data-parallel-address, --data-parallel-rpc-port, --headless;
           Ray: `ray start` everywhere, one `vllm serve --distributed-executor-backend ray` (or
           `--data-parallel-backend ray`) on the head.
"""

from __future__ import annotations

from typing import Optional

from mla_planner.core.errors import PlanError
from mla_planner.engines.layouts import vllm_layout_problem
from mla_planner.engines.parallel import a2a_library
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.sparse import kv_flag, own_rows
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

PROGRAM = ["vllm", "serve"]
KV_CACHE_DTYPES = {"bf16": "auto", "fp8": "fp8", "fp8_ds_mla": "fp8_ds_mla"}
# a params.json checkpoint (Mistral Large 3): its config, weights and tokenizer in Mistral's own format
# (vllm-project/recipes Mistral-Large-3; vLLM 0.33.0 transformers_utils/configs/mistral.py)
MISTRAL_FORMAT = {"mistral": (("--tokenizer-mode", "mistral"), ("--config-format", "mistral"),
                              ("--load-format", "mistral"))}
# "deepseek_mtp" is deprecated and rewritten to "mtp" with a warning (vllm/config/speculative.py)
INDEXER_CONFIG = '{"indexer_kv_dtype":"%s"}'   # DeepSeek-V4's index-key cache (vllm/config/attention.py)
EPLB_CONFIG = '{"num_redundant_experts":%d}'   # vllm/config/parallel.py EPLBConfig
MTP_CONFIG = '{"method":"%s","num_speculative_tokens":%d}'   # the drafter (mtp, dspark), its tokens per step
ENGINE_READY_TIMEOUT_S = 3600   # loads of a 671B checkpoint (+ DeepGEMM warm-up, graph capture) outlast the 600 s
                                # default, on one node too (vllm-project/recipes#381)
A2A_NOTE = {"deepep_low_latency": "MoE all-to-all: --all2all-backend deepep_low_latency needs DeepEP and NVSHMEM on "
                                  "this node (README.md, 'Expert-parallel all-to-all'). Without them, delete that "
                                  "flag: vLLM falls back to allgather_reducescatter, which is slower than the plan "
                                  "predicts.",
            "mori_low_latency": "MoE all-to-all: --all2all-backend mori_low_latency needs MoRI (ROCm/mori, in the ROCm "
                                "vLLM images), AITER's fused MoE (VLLM_ROCM_USE_AITER=1, exported here) and, across "
                                "nodes, RDMA NICs MoRI drives (Pensando, Thor2, ConnectX-7). Without MoRI, delete that "
                                "flag and MORI_SHMEM_HEAP_SIZE: vLLM falls back to allgather_reducescatter, slower "
                                "than planned."}


def check_expressible(inp: LaunchInputs) -> None:
    check_inputs(inp)
    k = inp.knobs
    if k.max_num_batched_tokens < k.max_num_seqs:
        raise PlanError(f"--max-num-batched-tokens {k.max_num_batched_tokens} is below --max-num-seqs "
                        f"{k.max_num_seqs}: vLLM 0.33 refuses to start (config/scheduler.py)")
    problem = vllm_layout_problem(inp.layout, inp.topology.gpus_per_node)
    if problem:
        raise PlanError(problem)


def sizing_flags(inp: LaunchInputs) -> list[str]:
    """The flags every node of the instance shares, grouped parallel, cache, scheduler, compilation."""
    L, k = inp.layout, inp.knobs
    return flag_words([
        ("--tensor-parallel-size", L.tp),
        ("--pipeline-parallel-size", L.pp if L.pp > 1 else None),
        ("--data-parallel-size", L.dp if L.dp > 1 else None),
        ("--enable-expert-parallel", L.ep > 1),
        ("--all2all-backend", a2a.vllm_backend(L, inp.topology.gpu)),
        ("--enable-eplb", k.redundant_experts > 0),
        ("--eplb-config", EPLB_CONFIG % k.redundant_experts if k.redundant_experts else None),
        ("--decode-context-parallel-size", L.dcp if L.dcp > 1 else None),
        ("--block-size", k.block_size),
        ("--kv-cache-dtype", kv_flag("vllm", k.kv_cache_dtype) if own_rows(inp.spec)
         else KV_CACHE_DTYPES[k.kv_cache_dtype]),
        ("--gpu-memory-utilization", k.memory_fraction),
        ("--max-num-seqs", k.max_num_seqs),
        ("--max-num-batched-tokens", k.max_num_batched_tokens),
        ("--max-model-len", k.max_model_len),
        ("--enable-prefix-caching" if k.prefix_caching else "--no-enable-prefix-caching", True),
        ("--attention-backend", None if is_compressed(inp.spec) else k.attention_backend),   # V4: its own
        ("--attention-config", INDEXER_CONFIG % k.indexer_kv_dtype if k.indexer_kv_dtype != "fp8" else None),
        ("--enforce-eager", not k.cuda_graphs),
        ("--max-cudagraph-capture-size", k.cuda_graph_max_bs if k.cuda_graphs else None),
        ("--speculative-config", MTP_CONFIG % (inp.spec.drafter, k.mtp_draft_tokens) if k.mtp else None),
        ("--language-model-only", bool(inp.spec.vision_params) and not k.images),   # text-only: no vision tower
        ("--mm-encoder-tp-mode", "data" if k.images else None),     # the encoder whole per GPU (the K2.5 recipe's)
        *MISTRAL_FORMAT.get(inp.spec.config_format, ()),
        *recipe_flags(inp.spec, "vllm"),
        ("--trust-remote-code", True),
    ])


def node_commands(inp: LaunchInputs) -> list[NodeCommand]:
    check_expressible(inp)
    out: list[NodeCommand] = []
    for inst in place(inp.layout, inp.topology):
        if not inst.multi_node:
            if inp.mode == "ray":
                raise PlanError(f"{inp.layout.label}: each instance fits one node, so there is no Ray cluster to "
                                "form; use --mode native")
            out.append(_command(inp, inst, inst.head, [], "server"))
        elif inp.mode == "ray":
            out += _ray(inp, inst)
        else:
            out += [_command(inp, inst, node, _multi_node_flags(inp, inst, i), "headless" if i else "server")
                    for i, node in enumerate(inst.nodes)]
    return out


def _multi_node_flags(inp: LaunchInputs, inst: InstancePlacement, i: int) -> list[str]:
    """Per-node flags of the native (mp executor) forms, rank arithmetic done here."""
    ports, L, r = inp.ports, inp.layout, inst.replica
    if L.dp == 1:
        return flag_words([("--nnodes", len(inst.nodes)), ("--node-rank", i), ("--master-addr", ShellRef("HEAD_IP")),
                           ("--master-port", ports.of(ports.vllm_master, r)), ("--headless", i > 0)])
    local = inst.gpus_per_node // (L.tp * L.pp)   # DP ranks on this node; the start rank sums the nodes before
    return flag_words([("--data-parallel-size-local", local), ("--data-parallel-start-rank", i * local if i else None),
                       ("--data-parallel-address", ShellRef("HEAD_IP")),
                       ("--data-parallel-rpc-port", ports.of(ports.vllm_dp_rpc, r)), ("--headless", i > 0)])


def _command(inp: LaunchInputs, inst: InstancePlacement, node: int, extra: list[str], role: str) -> NodeCommand:
    e = _env(inp, inst)
    port = inp.ports.of(inp.ports.vllm_api, inst.replica) if role == "server" else None
    argv = PROGRAM + [inp.model_path] + sizing_flags(inp) + extra + flag_words([("--port", port)])
    needs = ("HEAD_IP", "VLLM_HOST_IP") if inst.multi_node else ()
    return NodeCommand(node, argv, e.env, inst.gpus_per_node, inst.replica, role, port, len(PROGRAM),
                       needs=needs, notes=e.notes)


def _env(inp: LaunchInputs, inst: InstancePlacement):
    backend = a2a.vllm_backend(inp.layout, inp.topology.gpu)
    e = instance_env("vllm", inp.topology, inst.multi_node, inst.visible_devices, inp.spec.num_hidden_layers,
                     inp.layout.pp, inp.pp_partition, a2a_library(inp.topology.gpu) if backend else None)
    e.env["VLLM_ENGINE_READY_TIMEOUT_S"] = str(ENGINE_READY_TIMEOUT_S)
    e.env.update(a2a.mori_heap_env("vllm", inp.spec, inp.layout, inp.knobs, inp.topology.gpu))
    if backend:
        e.notes.append(A2A_NOTE[backend])
    return e


def _ray(inp: LaunchInputs, inst: InstancePlacement) -> list[NodeCommand]:
    """vLLM's Ray recipe (--distributed-executor-backend ray): a Ray cluster per instance; the head serves
    once every GPU has joined."""
    L, ray_port = inp.layout, inp.ports.ray
    e = _env(inp, inst)
    if L.dp > 1:
        extra = flag_words([("--data-parallel-backend", "ray"),
                            ("--data-parallel-size-local", inst.gpus_per_node // (L.tp * L.pp)),
                            ("--data-parallel-address", ShellRef("VLLM_HOST_IP"))])
    else:
        extra = flag_words([("--distributed-executor-backend", "ray")])
    port = inp.ports.of(inp.ports.vllm_api, inst.replica)
    head_start = ["ray", "start", "--head", "--port", str(ray_port), "--node-ip-address", ShellRef("VLLM_HOST_IP")]
    head = NodeCommand(inst.head, PROGRAM + [inp.model_path] + sizing_flags(inp) + extra + ["--port", str(port)],
                       e.env, inst.gpus_per_node, inst.replica, "ray-head", port, len(PROGRAM), [head_start],
                       ("VLLM_HOST_IP",), inst.total_gpus, e.notes)
    join = ["ray", "start", "--address", ShellRef("HEAD_IP", f":{ray_port}"), "--node-ip-address",
            ShellRef("VLLM_HOST_IP"), "--block"]
    workers = [NodeCommand(node, join, e.env, inst.gpus_per_node, inst.replica, "ray-worker", None, 2,
                           needs=("HEAD_IP", "VLLM_HOST_IP"), notes=e.notes) for node in inst.nodes[1:]]
    return [head] + workers


def bench_argv(inp: LaunchInputs, concurrency: int, rate: Optional[float] = None,
               deployment: Optional[str] = None) -> list[str]:
    """`vllm bench serve` with the workload's fixed lengths (random dataset, range ratio 0 by default;
    --ignore-eos so every request decodes its full output), at bench.sh's ${CONCURRENCY} (the plan's unless set),
    its result saved as ${RESULT}.json with the GPU it ran on and the ${REPLICAS} behind its endpoint
    (vllm/benchmarks/serve.py --save-result, --result-filename, --metadata KEY=VALUE ...) for `mla-plan calibrate`."""
    w = inp.workload
    return ["vllm", "bench", "serve"] + flag_words([
        ("--model", inp.model_path), ("--host", ShellRef("BENCH_HOST")), ("--port", ShellRef("BENCH_PORT")),
        ("--dataset-name", "random"), ("--random-input-len", w.input_len), ("--random-output-len", w.output_len),
        ("--max-concurrency", ShellRef("CONCURRENCY")), ("--request-rate", rate),
        ("--num-prompts", ShellRef("PROMPTS")), ("--ignore-eos", True),
        ("--save-result", True), ("--result-filename", ShellRef("RESULT", ".json")),
        ("--metadata", (f"{GPU_TAG}={inp.topology.gpu.name}", ShellRef("REPLICAS", prefix=f"{REPLICAS_TAG}="),
                        *([f"{DEPLOYMENT_TAG}={deployment}"] if deployment else []))),
        ("--trust-remote-code", True)])
