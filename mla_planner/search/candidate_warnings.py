"""What a tuned candidate should warn its user about: TP over nodes, eager mode, a host-bound step, MTP under PP,
a backend swap, an FP8 checkpoint on a GPU without FP8, no tuned MoE kernel config in the wheel, DeepEP over PCIe or
over shared NICs, idle GPUs, idle DP ranks, memory risks, TTFT and TPOT misses."""

from __future__ import annotations

from mla_planner.engines.backends import fp8_checkpoint
from mla_planner.engines.moe_configs import moe_kernel_config
from mla_planner.engines.parallel import uses_ep_all_to_all
from mla_planner.perf.step import DecodeStep
from mla_planner.search.tuning import Tuned
from mla_planner.specs.knobs import Workload
from mla_planner.specs.layout import Layout, int4_group_fallbacks
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


# Measured TTFT less the model's (with its ttft_host_s), InferenceX SGLang v0.5.12 DeepSeek-R1 TP8 runs (`mla-plan
# validate`'s ttft rows): 0-25 ms at 1k prompt tokens and 1-4 in flight, 20-130 ms at 16-64, 40-250 ms at 8k up to 16
# in flight (1.4 s at 64). A met target with less headroom than this is warned about.
TTFT_UNMODELLED_MS = 250


def warnings_for(spec: ModelSpec, topo: Topology, layout: Layout, tuned: Tuned, workload: Workload,
                 model_path: str | None = None) -> list[str]:
    """`model_path`: what the engines serve (the tuning command's --model), else the spec's HF id or name."""
    out = []
    out += [w for w in [cross_node_tp_note(layout, topo)] if w]
    if not tuned.knobs.cuda_graphs:
        alone = tuned.metrics.alone_tpot_s * 1e3
        out.append(f"eager mode (no CUDA graphs): the host dispatches every layer of every step (published figures "
                   f"1-5 ms a layer), so one request alone gets {alone:.1f} ms per token")
    out += [w for w in [host_bound_note(tuned.metrics.decode, tuned.metrics.tpot_s)] if w]
    if tuned.knobs.mtp and layout.pp > 1:
        out.append("MTP under pipeline parallelism is a recent path in both engines (vLLM's V2 model runner, "
                   "vllm-project/vllm#46994; SGLang only with SGLANG_ENABLE_PP_SPEC=1, which the scripts export): "
                   "start it once and check its output against a run without --mtp before serving")
    if "runs instead" in tuned.reasons.get("block_size", ""):
        out.append("block size/backend: " + tuned.reasons["block_size"])
    fp8 = fp8_checkpoint(tuned.knobs.engine, spec, topo.gpu)
    out += [fp8[1]] if fp8 else []
    kernel = moe_kernel_config(spec, topo.gpu, layout, tuned.knobs.engine)
    if kernel and not kernel.shipped:
        out.append(kernel.advice(model_path or spec.hf_id or spec.name, layout))
    if uses_ep_all_to_all(layout) and topo.intra_node.kind == "pcie":
        out.append("DeepEP's low-latency kernels go over the RDMA NICs here (no NVLink; NVSHMEM with IBGDA): run "
                   "DeepEP's test_low_latency.py on the nodes before serving (the emitted README: how to fall back)")
    out += [w for w in [shared_nic_deepep_note(layout, topo)] if w]
    idle = topo.total_gpus - layout.total_gpus
    if idle:
        more = idle // layout.instance_gpus
        out.append(f"uses {layout.total_gpus} of the cluster's {topo.total_gpus} GPUs: {idle} stay idle (tokens/s "
                   "per GPU counts the GPUs in use)" + (f"; {more} more replica(s) of this layout would use them"
                                                        if more else ""))
    if workload.concurrency and layout.dp * layout.replicas > workload.concurrency:
        out.append(f"{layout.dp * layout.replicas} DP ranks for an offered concurrency of {workload.concurrency}: "
                   "some ranks will sit idle (DP attention needs concurrency >= DP size)")
    mem = tuned.metrics.memory
    out += [f"memory: {r}" for r in mem.reasons[mem.blocking:]]
    out += [n for n in tuned.metrics.notes if n.startswith("TTFT") or "misses" in n]
    out += int4_group_fallbacks(spec, layout)
    out += [w for w in [ttft_headroom_note(tuned.metrics.ttft_longest_s, tuned.metrics.meets_targets, workload)] if w]
    return out


def host_bound_note(d: DecodeStep, tpot_s: float) -> str:
    """A decode round the scheduler's host work sets rather than the GPUs (perf/host.py), other requests' prefill
    chunks included (`tpot_s`, the mean time per token, no longer than the round: they hide in the GPUs' idle time):
    more requests per DP rank add latency there, not tokens/s."""
    gpu_s = d.round_s - d.idle_s
    if d.idle_s <= 0.01 * gpu_s or tpot_s * d.tokens_per_step > d.round_s * 1.01:
        return ""
    return (f"host-bound: at {d.batch_per_dp_rank:,} running requests per DP rank the scheduler's host work takes "
            f"{d.round_s * 1e3:.1f} ms a round where the GPUs' decode work takes {gpu_s * 1e3:.1f} (other requests' "
            "prefill chunks fill some of the rest; perf/host.py): more requests per rank add latency, not tokens/s; a "
            "faster host CPU, or more schedulers (DP ranks or replicas on fewer GPUs each) where the layout allows, "
            "serve more")


def cross_node_tp_note(layout: Layout, topo: Topology) -> str:
    """TP over nodes: what the model assumes of its all-reduces, and the evidence against it ('' otherwise)."""
    if layout.tp <= topo.domain_gpus:      # inside an NVLink domain (a node, or an NVL72 rack of hosts)
        return ""
    return (f"tensor parallelism spans {layout.tp // topo.gpus_per_node} nodes: every layer's all-reduce crosses "
            "the inter-node fabric, priced at nccl-tests' speed; the one published in-engine TP16 run across two "
            "nodes was 2.2x slower per token than that prices (README, Validation): time it on your nodes with "
            "`mla-plan verify` under torchrun (collective.all_reduce.in_step)")


def shared_nic_deepep_note(layout: Layout, topo: Topology) -> str:
    """DeepEP across nodes whose GPUs share RDMA NICs ('' otherwise). The step model prices each GPU's share of
    the NICs; what it cannot see is NVSHMEM's NIC choice: with NVSHMEM_ENABLE_NIC_PE_MAPPING all ranks of a node
    picked the first NIC under DeepEP's high-throughput kernels (deepseek-ai/DeepEP#336, 2 x 8 H800 with 4 CX7
    each), and DeepEP's maintainers said a 4-NIC node "requires some additional configurations" (DeepEP#60)."""
    inter = topo.inter_node
    if not uses_ep_all_to_all(layout) or layout.stage_gpus <= topo.gpus_per_node or inter is None \
            or inter.nics_per_node >= topo.gpus_per_node:
        return ""
    per_gpu = topo.nic_gbit_per_s_per_gpu
    nics = f"{inter.nics_per_node} RDMA NIC" + ("s" if inter.nics_per_node > 1 else "")
    return (f"DeepEP across nodes with {topo.gpus_per_node} GPUs sharing {nics} per node ({per_gpu:g} Gb/s per GPU, "
            "as priced): NVSHMEM may put every rank on one NIC (deepseek-ai/DeepEP#336); run DeepEP's "
            "tests/test_internode.py and test_low_latency.py across the nodes and check their RDMA GB/s before serving")


def ttft_headroom_note(ttft_s: float, meets_targets: bool, workload: Workload) -> str:
    """A met TTFT target with less headroom over the model's TTFT than published runs under load add ('' else)."""
    ttft_ms = ttft_s * 1e3
    if not meets_targets or workload.ttft_ms - ttft_ms >= TTFT_UNMODELLED_MS:
        return ""
    counts = ("the prefill forward, its queue and one constant for the server around it (ttft_host_s)"
              if workload.tpot_applies else
              "the prefill, the wait behind the batch's other prompts and the server around them, and sized the batch "
              f"to the target (a --ttft-ms {max(workload.ttft_ms - TTFT_UNMODELLED_MS, 1):,.0f} plan leaves that room)")
    return (f"TTFT target {workload.ttft_ms:,.0f} ms, planned {ttft_ms:,.0f} ms: the model counts {counts}, and "
            "published SGLang runs under load measure up to 250 ms more (queueing, slower prefill; mla-plan "
            "validate's TTFT rows): measure TTFT with bench.sh (mla-plan calibrate fits ttft_host_s from it)")

