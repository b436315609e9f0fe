"""The launch folder's files: which template renders each node, and the words around the commands
(titles, start order, health checks) for README.md and bench.sh."""

from __future__ import annotations

from math import ceil
from typing import Optional

from mla_planner import __version__
from mla_planner.engines.backends import engine_version
from mla_planner.engines.dispatch import combine_format, dispatch_format
from mla_planner.engines.layouts import PP_SPEC_ENV
from mla_planner.engines.moe_configs import UNTUNED_LOG
from mla_planner.engines.parallel import SGLANG_MORI_TOKENS_ENV, a2a_library, mori_tokens_per_rank
from mla_planner.launch import a2a, sglang, vllm
from mla_planner.launch.command import LaunchInputs, NodeCommand
from mla_planner.launch.env import network_gid
from mla_planner.launch.netcheck import cross_node_all_reduce
from mla_planner.launch.placement import place
from mla_planner.launch.render import render
from mla_planner.memory.terms import a2a_memory_bytes
from mla_planner.search.planfile import Candidate
from mla_planner.specs.knobs import decode_query_len, tokens_per_step
from mla_planner.specs.layout import Layout

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
VERSION_NOTES = {
    "vllm": "Flags are those of vLLM 0.33.0: the attention backend is `--attention-backend` (the "
            "VLLM_ATTENTION_BACKEND variable is gone) and multi-node runs without Ray via `--nnodes`/`--headless`; "
            "older releases need other flags.",
    "sglang": "Flags are those of SGLang 0.5.23: DP attention is `--attn-dp-size` (not `--enable-dp-attention`), "
              "CUDA graphs are switched off per phase with `--cuda-graph-backend-*`, and `cutlass_mla` is no longer "
              "a backend; older releases need other flags.",
}
BENCH_TOOLS = {"vllm": "`vllm bench serve`", "sglang": "`python3 -m sglang.benchmark.serving`"}


def describe(layout: Layout) -> str:
    parts = " ".join(f"{name}={getattr(layout, name)}" for name in ("tp", "pp", "dp", "ep", "dcp")
                     if name == "tp" or getattr(layout, name) > 1)
    return f"{layout.replicas} x ({parts})" if layout.replicas > 1 else parts


def engine_label(engine: str) -> str:
    return f"{ENGINE_NAMES[engine]} {engine_version(engine)}"


def _role_text(c: NodeCommand) -> str:
    return {"server": f"engine ranks and the HTTP API on port {c.port}",
            "headless": "engine ranks only (headless)",
            "ray-head": f"Ray head, then the HTTP API on port {c.port}",
            "ray-worker": "Ray worker (joins the head's cluster)"}[c.role]


def _start_order(inp: LaunchInputs, engine: str, commands: list[NodeCommand]) -> list[str]:
    multi = [c for c in commands if c.needs]
    nodes = len({c.node_rank for c in commands})
    if not multi and nodes == 1:
        steps = ["Run node-0.sh" + (f": it starts the {len(commands)} independent instances." if len(commands) > 1
                                    else ".")]
    elif not multi:
        steps = ["Run each node-K.sh on node K; the instances are independent."]
    elif inp.mode == "ray":
        steps = ["Run node-0.sh on the head node: it starts the Ray head and waits until every GPU has joined.",
                 "Run the other node-K.sh on their nodes: each starts a Ray worker that joins the head.",
                 "The head then starts vLLM on the whole cluster."]
    elif engine == "vllm":
        steps = ["Start node-0.sh on the head node first (it runs the rendezvous and the HTTP API).",
                 "Start the other node-K.sh on their nodes within a few minutes; they run headless and wait "
                 "for the head."]
    else:
        steps = ["Start every node-K.sh on its node, in any order, within a few minutes of each other; they "
                 "meet at HEAD_IP (--dist-init-addr). Node rank 0 serves HTTP."]
    if inp.layout.replicas > 1 and multi:
        steps.append("Each replica's node group is a separate instance with its own head; start each group the "
                     "same way.")
    steps.append("When /health answers, run ./bench.sh on node 0.")
    return steps


def node_script(inp: LaunchInputs, engine: str, node: int, cmds: list[NodeCommand], heads: dict[int, int],
                 head_address: Optional[str], n_nodes: int, head_hint: bool = True) -> str:
    shared = {k: v for k, v in cmds[0].env.items() if all(c.env.get(k) == v for c in cmds)}
    notes = list(dict.fromkeys(n for c in cmds for n in c.notes))
    roles = "; ".join(f"replica {c.replica}: {_role_text(c)}" for c in cmds)
    inter = inp.topology.inter_node
    ctx = dict(title=f"node {node} of {n_nodes} - {engine_label(engine)} serving {inp.model_path} "
                     f"({describe(inp.layout)}): {roles}",
               version=__version__, engine_label=engine_label(engine), notes=notes, package=engine,
               series=".".join(engine_version(engine).split(".")[:2]),
               needs=sorted({n for c in cmds for n in c.needs}), head_ip=head_address,
               head_node=heads[cmds[0].replica], ifname=inter.socket_ifname if inter else None,
               env=list(shared.items()), head_hint=head_hint)
    head = next((c for c in cmds if c.role == "ray-head"), None)
    if head is not None:
        return render("ray-head.sh.j2", ray_start=head.before[0], serve=head.argv, cluster_gpus=head.cluster_gpus,
                      **ctx)
    commands = [dict(argv=c.argv, env=[(k, v) for k, v in c.env.items() if k not in shared],
                     background=len(cmds) > 1) for c in cmds]
    return render("node.sh.j2", commands=commands, **ctx)


def total_concurrency(inp: LaunchInputs) -> int:
    """Requests in flight over the deployment: the workload's, else every DP rank of every replica full."""
    return deployment_concurrency(inp.workload.concurrency, inp.knobs.max_num_seqs, inp.layout)


def deployment_concurrency(workload_concurrency: Optional[int], max_num_seqs: int, layout: Layout) -> int:
    """`total_concurrency` from its parts (check-log holds a benchmark's load against it)."""
    return workload_concurrency or max_num_seqs * layout.dp * layout.replicas


def bench_concurrency(inp: LaunchInputs) -> int:
    """Requests in flight for bench.sh, which talks to one endpoint (node 0's server by default): one
    replica's share of the total (the README says how to load a balancer in front of all of them)."""
    return ceil(total_concurrency(inp) / inp.layout.replicas)


def bench_rate(inp: LaunchInputs) -> Optional[float]:
    """Arrivals per second for bench.sh: one replica's share of the workload's rate, like its concurrency."""
    rate = inp.workload.request_rate_per_s
    return round(rate / inp.layout.replicas, 6) if rate else None


def bench_argv(inp: LaunchInputs, engine: str) -> list[str]:
    return (vllm if engine == "vllm" else sglang).bench_argv(inp, bench_concurrency(inp), bench_rate(inp))


def folder_files(inp: LaunchInputs, engine: str, commands: list[NodeCommand], candidate: int, cand: Candidate,
                 head_address: Optional[str]) -> dict[str, tuple[str, bool]]:
    """{file name: (text, executable)} for the whole launch folder; the candidate's memory and performance
    figures from the plan make the README's "what the plan predicts" (none for a hand-built plan)."""
    predicted = _predicted(inp, engine, cand)
    heads = {p.replica: p.head for p in place(inp.layout, inp.topology)}
    nodes = sorted({c.node_rank for c in commands})
    files = {f"node-{n}.sh": (node_script(inp, engine, n, [c for c in commands if c.node_rank == n], heads,
                                           head_address, len(nodes)), True) for n in nodes}
    L, w = inp.layout, inp.workload
    common = dict(title=f"{engine_label(engine)} serving {inp.model_path} as {describe(L)} on {inp.topology.name}",
                  version=__version__, engine_label=engine_label(engine), head_node=heads[0],
                  port=next(c.port for c in commands if c.port is not None), input_len=w.input_len,
                  output_len=w.output_len, concurrency=bench_concurrency(inp), replicas=L.replicas,
                  total_concurrency=total_concurrency(inp),
                  total_rate=f"{inp.workload.request_rate_per_s:g}" if inp.workload.request_rate_per_s else "")
    files["bench.sh"] = (render("bench.sh.j2", argv=bench_argv(inp, engine), bench_where=f"node {heads[0]}",
                                num_prompts=4 * common["concurrency"], **common), True)
    net = cross_node_all_reduce(inp, cand.performance)
    files["README.md"] = (_readme(inp, engine, commands, candidate, cand.warnings, head_address,
                                  dict(common, predicted=predicted, net=net)), False)
    return files


KV_LOG = {"vllm": "vLLM logs it as `GPU KV cache size: N tokens` (v1/core/kv_cache_utils.py; the minimum over "
                  "workers and stages).",
          "sglang": "SGLang logs it as `max_total_num_tokens=N` at start-up (managers/scheduler.py), per DP rank."}


def _predicted(inp: LaunchInputs, engine: str, cand: Candidate) -> Optional[dict]:
    """The plan's figures one replica should show: KV tokens as the engine logs them, tokens/s, TPOT and TTFT
    at the planned concurrency; None without them (a hand-built plan, or one that gives only some of them) or when
    the candidate serves nothing."""
    perf, mem = cand.performance, cand.memory
    if not (perf and perf.concurrency and mem and mem.kv_capacity_tokens):
        return None
    if None in (perf.throughput_tokens_per_s, perf.tpot_s, perf.ttft_s):
        return None
    k = inp.knobs
    return dict(kv_tokens=f"{mem.kv_capacity_tokens:,}", dp=inp.layout.dp, kv_log=KV_LOG[engine],
                tok_s=f"{perf.throughput_tokens_per_s / inp.layout.replicas:,.0f}",
                tpot_ms=f"{perf.tpot_s * 1e3:.1f}", ttft_ms=f"{perf.ttft_s * 1e3:,.0f}",
                fp8_kv=k.kv_cache_dtype != "bf16", int4="int4" in (inp.spec.weight_dtype, inp.spec.expert_dtype),
                int8="int8" in (inp.spec.weight_dtype, inp.spec.expert_dtype),
                bf16_flag=(vllm if engine == "vllm" else sglang).KV_CACHE_DTYPES["bf16"],
                untuned_log=UNTUNED_LOG[engine])


def all_to_all(inp: LaunchInputs, engine: str) -> Optional[dict]:
    """The README's all-to-all section (DeepEP, or MoRI on AMD): the flag, its buffer or heap and the fallback; None
    without one."""
    gpu, library = inp.topology.gpu, a2a_library(inp.topology.gpu)
    if engine == "vllm":
        backend, flag, tokens = a2a.vllm_backend(inp.layout, gpu), "--all2all-backend", inp.knobs.max_num_batched_tokens
        tokens_from = "--max-num-batched-tokens"
        fallback = f"vLLM then runs its default {a2a.DEFAULT_DISPATCH['vllm'][1]}"
    else:
        backend, flag = a2a.sglang_backend(inp.layout, gpu), "--moe-a2a-backend"
        tokens = max(a2a.SGLANG_DISPATCH_DEFAULT, a2a.sglang_dispatch_tokens(inp.knobs))
        tokens_from = (f"{a2a.SGLANG_DISPATCH_ENV}: one DP rank's largest decode batch, at least SGLang's "
                       f"{a2a.SGLANG_DISPATCH_DEFAULT}; the normal-mode buffers for prefill come on top")
        fallback = (f"SGLang then runs its default ({a2a.DEFAULT_DISPATCH['sglang'][1]}: tokens all-gathered around "
                    "the MoE)")
    if backend is None:
        return None
    if library == "mori":
        tokens = mori_tokens_per_rank(engine, inp.knobs.max_num_seqs, inp.knobs.max_num_batched_tokens,
                                      decode_query_len(inp.knobs))
        tokens_from = ("--max-num-batched-tokens" if engine == "vllm" else f"{SGLANG_MORI_TOKENS_ENV}: the per-rank "
                       "chunked prefill, which SGLang asserts it holds, at least its 4096")
        fmt, back = dispatch_format(engine, inp.spec, gpu), combine_format(engine, inp.spec, inp.layout, gpu)
        term, charged, heap = a2a_memory_bytes(engine, inp.spec, inp.layout, gpu, 0, tokens)   # as memory prices it
        epv2, gib = term == "mori_epv2_arena", (charged + heap) / 2**30
    else:
        fmt, back, epv2 = dispatch_format(engine, inp.spec, gpu), "bf16", False
        gib = a2a.low_latency_buffer_bytes(inp.spec, tokens) / 2**30
    return dict(flag=flag, backend=backend, gib=f"{gib:.1f}", tokens=tokens, tokens_from=tokens_from,
                fallback=fallback, dispatch=fmt.upper(), combine=back.upper(), library=library, epv2=epv2,
                scripts="every node-K.sh", pool="")


def _readme(inp: LaunchInputs, engine: str, commands: list[NodeCommand], candidate: int, warnings: list[str],
            head_address: Optional[str], common: dict) -> str:
    inter = inp.topology.inter_node
    needs = {n for c in commands for n in c.needs}
    host_ip_how = (f"The scripts read it from interface {inter.socket_ifname} when it is unset; on multi-NIC hosts "
                   "export it explicitly." if inter and inter.socket_ifname else "Export it on every node.")
    rows = [dict(node=c.node_rank, script=f"node-{c.node_rank}.sh", gpus=c.gpus,
                 what=f"replica {c.replica}: {_role_text(c)}") for c in commands]
    health = [dict(node=c.node_rank, port=c.port, url=f"http://127.0.0.1:{c.port}") for c in commands if c.port]
    return render("README.md.j2", candidate=candidate, version_note=VERSION_NOTES[engine], model_path=inp.model_path,
                  nodes=rows, multi_node=bool(needs), fabric=inter.fabric if inter else "none",
                  needs_head_ip="HEAD_IP" in needs, head_ip=head_address, needs_host_ip="VLLM_HOST_IP" in needs,
                  host_ip_how=host_ip_how, ray=inp.mode == "ray", a2a=all_to_all(inp, engine), engine=engine,
                  amd=inp.topology.gpu.vendor == "amd", gid=network_gid(inter),
                  order=_start_order(inp, engine, commands), health=health,
                  bench_tool=BENCH_TOOLS[engine], warnings=warnings, mtp=_mtp(inp, engine), **common)


def _mtp(inp: LaunchInputs, engine: str) -> Optional[dict]:
    """The README's speculative-decoding section: the flags, the acceptance the plan assumed, where to read
    the real one; None without MTP."""
    if not inp.knobs.mtp:
        return None
    a = inp.workload.mtp_acceptance
    flags = (f"`--speculative-config` with method {inp.spec.drafter}" if engine == "vllm" else
             "`" + " ".join(f"{f} {v}" for f, v in sglang.speculative_flags(inp.knobs, inp.spec.drafter)) + "`")
    where = ("vLLM logs 'SpecDecoding metrics: ... Avg Draft acceptance rate' (v1/spec_decode/metrics.py), and "
             "on /metrics the rate is vllm:spec_decode_num_accepted_tokens_total / "
             "vllm:spec_decode_num_draft_tokens_total"
             if engine == "vllm" else "SGLang's decode log lines carry 'accept len: L, accept rate: R' "
             "(scheduler_components/metrics_reporter.py); with one drafted token the acceptance is L - 1")
    pp_env = PP_SPEC_ENV if engine == "sglang" and inp.layout.pp > 1 else ""
    return dict(flags=flags, acceptance=f"{a:.0%}", per_step=f"{tokens_per_step(inp.knobs, a):.2f}", where=where,
                pp_env=pp_env)
