"""A disaggregated deployment's launch folder: prefill-node-K.sh and decode-node-K.sh per node of each pool (the
engine's commands with their role flags, launch/disagg.py), router.sh, bench.sh against the router, the Kubernetes
manifests (launch/k8s.py), README.md and the plan itself."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from mla_planner import __version__
from mla_planner.core.files import dump_yaml_documents
from mla_planner.core.jsonout import dumps
from mla_planner.core.units import GiB
from mla_planner.engines.disagg import ROUTER_PORT
from mla_planner.launch.disagg import Node, deployment_nodes, pool_inputs, router_argv, servers
from mla_planner.launch.folder import BENCH_TOOLS, VERSION_NOTES, all_to_all, engine_label, node_script
from mla_planner.launch.k8s import engine_image, manifests
from mla_planner.launch.outdir import write_folder
from mla_planner.launch.placement import place
from mla_planner.launch.render import render
from mla_planner.launch import sglang, vllm
from mla_planner.search.candidate import DisaggCandidate
from mla_planner.search.deployment import pick_disaggregated
from mla_planner.search.planfile import Plan, plan_to_dict

NETWORK_VARIABLES = ("NCCL_IB", "NCCL_SOCKET", "NCCL_NET", "GLOO_SOCKET", "MORI_RDMA", "MORI_IB", "MORI_SOCKET")
ROUTERS = {"sglang": "sglang-router", "vllm": "vllm-router"}
TRANSFER = {("sglang", "nvidia"): ("Mooncake, SGLang's default transfer backend, chunk by chunk as the prefill runs",
                                   "the Mooncake transfer engine too (`pip install mooncake-transfer-engine`), which "
                                   "SGLang's disaggregation imports"),
            ("sglang", "amd"): ("MoRI's I/O engine, `--disaggregation-transfer-backend mori` as AMD's recipes run "
                                "SGLang on ROCm, chunk by chunk as the prefill runs",
                                "MoRI too, which ships in SGLang's ROCm images (github.com/ROCm/mori on your own "
                                "build)"),
            ("vllm", "nvidia"): ("NIXL over UCX, pulled by the decode instance once the prefill is done",
                                 "NIXL too (`pip install nixl`), which vLLM's NixlConnector imports"),
            ("vllm", "amd"): ("NIXL over UCX, pulled by the decode instance once the prefill is done",
                              "NIXL too, built with UCX's ROCm support, which vLLM's NixlConnector imports")}


def _scripts(plan: Plan, d: DisaggCandidate, nodes: list[Node], model_path: str) -> dict:
    files = {}
    for pool in (d.prefill, d.decode):
        inp = pool_inputs(plan, pool, model_path)
        heads = {p.replica: p.head for p in place(inp.layout, inp.topology)}
        mine = [n for n in nodes if n.role == pool.role]
        count = len({n.pool_node for n in mine})
        for k in sorted({n.pool_node for n in mine}):
            cmds = [n.command for n in mine if n.pool_node == k]
            files[f"{pool.role}-node-{k}.sh"] = (node_script(inp, d.engine, k, cmds, heads, None, count,
                                                             head_hint=False), True)
    return files


def _router(d: DisaggCandidate, nodes: list[Node]) -> str:
    variables = []
    for role in ("prefill", "decode"):
        for g, n in enumerate(servers(nodes, role)):
            variables.append(dict(name=f"{role.upper()}_{g}", what=f"{role} instance {g} (node {n.node}, "
                                                                    f"{role}-node-{n.pool_node}.sh)"))
    return render("router.sh.j2", title=f"router of {d.label} ({engine_label(d.engine)})", version=__version__,
                  package=ROUTERS[d.engine], variables=variables, argv=router_argv(d.engine, nodes))


def _predicted(d: DisaggCandidate) -> list[str]:
    p = d.performance
    needed = ("requests_per_s", "throughput_tokens_per_s", "throughput_tokens_per_s_per_gpu", "gpus",
              "throughput_tokens_per_s_per_gpu_low", "throughput_tokens_per_s_per_gpu_high", "tpot_s",
              "decode_batch_per_dp_rank", "ttft_s", "queue_s", "prefill_s", "transfer_s", "first_step_s",
              "decode_kv_capacity_tokens", "transfer_bytes_per_request", "prefill_utilization", "decode_utilization")
    if p is None or any(getattr(p, name) is None for name in needed):
        return ["The plan file gives no (or only some) figures for this deployment: a plan built or edited by hand."]
    return [f"{p.requests_per_s:,.2f} requests/s, {p.throughput_tokens_per_s:,.0f} output tokens/s in all "
            f"({p.throughput_tokens_per_s_per_gpu:,.0f} per GPU over {p.gpus} GPUs; the model's errors on published "
            f"runs allow {p.throughput_tokens_per_s_per_gpu_low:,.0f}-{p.throughput_tokens_per_s_per_gpu_high:,.0f})",
            f"TPOT {p.tpot_s * 1e3:.1f} ms on the decode pool ({p.decode_batch_per_dp_rank} requests per DP rank, no "
            "prefill chunk in its steps)",
            f"TTFT {p.ttft_s * 1e3:,.0f} ms: {p.queue_s * 1e3:,.0f} ms waiting for a prefill instance, "
            f"{p.prefill_s * 1e3:,.0f} ms of prefill, {p.transfer_s * 1e3:,.1f} ms of KV transfer it waits for, "
            f"{p.first_step_s * 1e3:,.1f} ms for the first decode step"
            + (f", {p.host_s * 1e3:,.0f} ms outside the engines (the server and the client around them)"
               if p.host_s else ""),
            f"KV pool of each decode DP rank: {p.decode_kv_capacity_tokens:,} tokens; each request ships "
            f"{p.transfer_bytes_per_request / GiB:.2f} GiB of KV",
            f"prefill pool busy {p.prefill_utilization:.0%}, decode pool {p.decode_utilization:.0%}"]


def folder_files(plan: Plan, d: DisaggCandidate, index: int, model_path: str, image: Optional[str],
                 rdma_resource: Optional[str] = None) -> dict:
    nodes = deployment_nodes(plan, d, model_path)
    files = _scripts(plan, d, nodes, model_path)
    files["router.sh"] = (_router(d, nodes), True)
    inp = pool_inputs(plan, d.decode, model_path)
    held = d.decode.knobs.max_num_seqs * d.decode.layout.dp * d.decode.instances   # what the decode pool holds
    concurrency = min(held, plan.workload.concurrency) if plan.workload.concurrency else held
    module = vllm if d.engine == "vllm" else sglang
    argv = module.bench_argv(inp, concurrency, plan.workload.request_rate_per_s, deployment=f"D{index}")
    files["bench.sh"] = (render("bench.sh.j2", argv=argv,
                                bench_where="any host that reaches the router", num_prompts=4 * concurrency,
                                title=f"{d.label} behind its router", version=__version__,
                                engine_label=engine_label(d.engine), port=ROUTER_PORT,
                                input_len=plan.workload.input_len, output_len=plan.workload.output_len,
                                concurrency=concurrency, replicas=1, total_concurrency=concurrency, total_rate="",
                                calibrate=False),
                         True)
    for name, objects in manifests(plan, d, nodes, model_path, image, rdma_resource).items():
        files[name] = (dump_yaml_documents(objects), False)
    inter = plan.topology.inter_node
    rows = [dict(node=n.node, script=f"{n.role}-node-{n.pool_node}.sh", gpus=n.command.gpus, pool=n.role,
                 what=f"instance {n.command.replica}: " + ("engine ranks and the HTTP API on port "
                                                           f"{n.command.port}" if n.command.port else
                                                           "engine ranks only (headless)")) for n in nodes]
    order = ["Start every instance of both pools: each prefill-node-K.sh and decode-node-K.sh on its node "
             "(a multi-node instance's nodes within a few minutes of each other, with HEAD_IP set to its first "
             "node's IP).",
             "When every instance's head answers /health, run router.sh on a host that reaches them all, with "
             "PREFILL_K and DECODE_K set to each instance head's cluster IP.",
             "Run ./bench.sh against the router."]
    vendor = plan.topology.gpu.vendor
    files["README.md"] = (render(
        "disagg-README.md.j2", title=f"{engine_label(d.engine)}: {d.label} on {plan.topology.name}", candidate=index,
        version=__version__, engine_label=engine_label(d.engine), version_note=VERSION_NOTES[d.engine],
        model_path=model_path, transfer=TRANSFER[d.engine, vendor][0], transfer_install=TRANSFER[d.engine, vendor][1],
        amd=vendor == "amd", network_env=any(k.startswith(NETWORK_VARIABLES) for n in nodes for k in n.command.env),
        nodes=rows, router_port=ROUTER_PORT, needs_head_ip=any("HEAD_IP" in n.command.needs for n in nodes),
        needs_host_ip=any("VLLM_HOST_IP" in n.command.needs for n in nodes),
        host_ip_how=(f"The scripts read it from interface {inter.socket_ifname} when it is unset." if inter and
                     inter.socket_ifname else "Export it on every node."),
        predicted=_predicted(d), order=order, gpus_per_node=plan.topology.gpus_per_node,
        image=image or engine_image(d.engine, plan.topology.gpu), router_package=ROUTERS[d.engine], bench_tool=BENCH_TOOLS[d.engine],
        input_len=plan.workload.input_len, output_len=plan.workload.output_len, concurrency=concurrency,
        warnings=d.warnings, a2as=_all_to_alls(plan, d, model_path), engine=d.engine, rdma_resource=rdma_resource,
        multi_node=any(n.command.needs for n in nodes), fp8_kv=d.decode.knobs.kv_cache_dtype != "bf16",
        bf16_flag=(vllm if d.engine == "vllm" else sglang).KV_CACHE_DTYPES["bf16"]), False)
    files["plan.json"] = (dumps(plan_to_dict(replace(plan, model_path=model_path)), indent=1) + "\n", False)
    return files


def _all_to_alls(plan: Plan, d: DisaggCandidate, model_path: str) -> list[dict]:
    """The README's all-to-all sections (DeepEP, or MoRI on AMD), one per pool that runs one, or one for both where
    they run the same: what the node scripts' pointer to 'Expert-parallel all-to-all' names."""
    found = {}
    for pool in (d.prefill, d.decode):
        section = all_to_all(pool_inputs(plan, pool, model_path), d.engine)
        if section is not None:
            key = (section["flag"], section["backend"], section["epv2"], section["gib"], section["combine"])
            found.setdefault(key, []).append((pool.role, section))   # one section only where they say the same
    out = []
    for pools in found.values():
        roles = [role for role, _ in pools]
        scripts = " and ".join(f"{role}-node-K.sh" for role in roles)
        label = "" if len(found) == 1 else f", {roles[0]} pool"
        out.append(dict(pools[0][1], scripts=f"every {scripts}", pool=label))
    return out


def emit_disaggregated(plan: Plan, index: int, out_dir: Path, model_path: Optional[str] = None,
                       image: Optional[str] = None, force: bool = False,
                       rdma_resource: Optional[str] = None) -> list[Path]:
    """Write the launch folder of disaggregated deployment D`index`; return the files written."""
    d = pick_disaggregated(plan, index, "emit")
    return write_folder(folder_files(plan, d, index, model_path if model_path is not None else plan.model_path,
                                     image, rdma_resource), Path(out_dir), force)
