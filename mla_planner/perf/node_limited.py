"""DeepEP's normal (high-throughput) all-to-all across nodes, as the engines run it for a prefill batch: a token
crosses RDMA once per other node that holds one of its experts, then NVLink inside that node (the per-expert
all-to-all of comm.py is what the low-latency kernels send)."""

from __future__ import annotations

from math import comb

from mla_planner.perf.comm import net_of, placement
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.topology import Topology


def nodes_touched(experts: int, k: int, nodes: int) -> float:
    """Expected number of the `nodes` a token's k routed experts (of `experts`, spread evenly over the nodes) land on,
    other than its own: (nodes - 1) x (1 - C(E - E/n, k) / C(E, k)), the chance that a given other node holds none of
    the k being C(E - E/n, k) / C(E, k) under uniform routing (DeepSeek-V3's group-limited gating, at most 4 node
    groups per token, touches fewer: this is the upper end)."""
    per_node = experts / nodes
    if nodes <= 1 or k <= 0 or experts - per_node < k:
        return float(max(nodes - 1, 0))
    none = comb(int(round(experts - per_node)), k) / comb(experts, k)
    return (nodes - 1) * (1.0 - none)


def node_limited_all_to_all_s(tokens: float, token_bytes: float, k: int, experts: int, group_size: int,
                              topo: Topology, calib: Calibration) -> float:
    """One dispatch (or combine) of DeepEP's normal kernels across nodes for `tokens` on one GPU, each going to k
    experts: a token crosses RDMA once per other node holding one of its experts, to the GPU of the same index there,
    which forwards it over NVLink to the experts' GPUs (deepseek-ai/DeepEP README: "asymmetric-domain bandwidth
    forwarding, such as forwarding data from NVLink domain to RDMA domain", the normal kernels the DeepSeek-V3 paper's
    section 3.2.2 describes). The RDMA part runs at rdma_all_to_all_efficiency of the GPU's NIC share, the NVLink
    part (every copy to another GPU of the node it lands on) at nvlink_all_to_all_efficiency; they overlap, so the
    slower sets the time, plus one NVLink and one network hop."""
    n, g = placement(group_size, topo, True)
    net = net_of(topo, calib)
    rdma_s = tokens * nodes_touched(experts, k, n) * token_bytes / (net.nic_line_bytes_per_s * net.a2a_nic_efficiency)
    eff = calib.xgmi_ring_efficiency if net.xgmi else calib.nvlink_all_to_all_efficiency    # RCCL's on Infinity Fabric
    nvlink_s = tokens * k * (g - 1) / g * token_bytes / (net.nvlink_bytes_per_s * eff)
    return net.base_s + net.internode_s + net.first_hop_s + net.net_hop_s + max(rdma_s, nvlink_s)
