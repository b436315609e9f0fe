"""Collectives over the topology: alpha-beta costs of all-reduce, all-gather, reduce-scatter, all-to-all, p2p.

time = latency (alpha) + bytes on the busiest link / achieved bandwidth (beta), per algorithm; like NCCL's
tuner (NVIDIA/nccl src/graph/tuning.cc, `ncclTopoGetAlgoTime`: time = lat + bytes / bw) the fastest
algorithm is picked. Alpha = nccl_base_latency_s (+ internode_latency_s once when the group spans nodes)
+ hop latencies: the first NVLink hop costs the topology's `intra_node.latency_us`, each further pipelined
ring step `nvlink_step_latency_s`, each step between nodes `inter_node.latency_us`. Beta uses the per-GPU
per-direction NVLink (or PCIe) rate and, between nodes, the GPU's share of its node's NICs (node NIC line
rate / GPUs per node), each times its efficiency. Those hop latencies are the LL protocol's; between nodes
each algorithm is also priced under NCCL's LL128 and Simple protocols (more latency, more bandwidth;
data/nccl_protocols.yaml, from tuning.cc) and the fastest pair is taken - pairing LL's latency with Simple's
bandwidth put 1-16 MB two-node all-reduces 28-48 % below published nccl-tests tables.

Sizes follow nccl-tests (PERFORMANCE.md): all_reduce S = the buffer; all_gather S = the gathered output;
reduce_scatter S = the input; all_to_all S = what one rank sends in total; p2p S = the message. busbw =
algbw x 2(p-1)/p (all-reduce), x (p-1)/p (all-gather, reduce-scatter, all-to-all), x 1 (p2p).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import ceil, log2


from mla_planner.core.errors import PlanError
from mla_planner.core.resources import data_dir, read_data
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.topology import Topology

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")


@dataclass(frozen=True)
class Net:
    """The link figures one collective sees: per-GPU bandwidths (bytes/s) and latencies (s)."""
    nvlink_bytes_per_s: float
    nic_line_bytes_per_s: float   # this GPU's share of its node's NIC line rate
    nic_efficiency: float         # nic_efficiency, or socket_efficiency on TCP
    a2a_nic_efficiency: float     # rdma_all_to_all_efficiency, or socket_efficiency on TCP
    first_hop_s: float
    step_s: float
    net_hop_s: float
    base_s: float
    internode_s: float
    nvls: bool
    ll128: bool             # NCCL enables LL128 by default only where the GPUs of a node share NVLink
    sm: int                 # compute capability x 10 (NCCL's ring plateau factor depends on it)
    xgmi: bool = False      # AMD Infinity Fabric inside the node: RCCL's measured efficiency for every collective


@dataclass(frozen=True)
class CollectiveCost:
    kind: str
    algorithm: str
    message_bytes: float
    group_size: int
    nodes: int
    latency_s: float
    bandwidth_s: float
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float


def net_of(topo: Topology, calib: Calibration) -> Net:
    inter = topo.inter_node
    tcp = inter is not None and inter.fabric == "ethernet"
    return Net(nvlink_bytes_per_s=topo.intra_bytes_per_s,
               nic_line_bytes_per_s=topo.nic_gbit_per_s_per_gpu * 1e9 / 8,
               nic_efficiency=calib.socket_efficiency if tcp else calib.nic_efficiency,
               a2a_nic_efficiency=calib.socket_efficiency if tcp else calib.rdma_all_to_all_efficiency,
               first_hop_s=topo.intra_node.latency_us * 1e-6, step_s=calib.nvlink_step_latency_s,
               net_hop_s=(inter.latency_us if inter else 0.0) * 1e-6, base_s=calib.nccl_base_latency_s,
               internode_s=calib.internode_latency_s, nvls=topo.uses_nvls,
               ll128=topo.intra_node.kind != "pcie" and bool(topo.gpu.nvlink_bytes_per_s), sm=topo.gpu.sm,
               xgmi=topo.intra_node.kind == "xgmi")


def placement(group_size: int, topo: Topology, spans_nodes: bool | None) -> tuple[int, int]:
    """(nodes, GPUs per node) of a group placed compactly, a "node" being an NVLink domain (a host, or an NVL72 rack
    of hosts: topo.domain_gpus); `spans_nodes=True` forces it over >= 2 of them."""
    gpn = topo.domain_gpus
    if spans_nodes is None:
        spans_nodes = group_size > gpn
    if not spans_nodes:
        if group_size > gpn:
            raise PlanError(f"a group of {group_size} GPUs cannot fit in one NVLink domain of {gpn}")
        return 1, group_size
    if topo.domains < 2 or topo.inter_node is None:
        raise PlanError(f"topology {topo.name} has one NVLink domain; a group cannot span more")
    nodes = min(max(2, ceil(group_size / gpn)), group_size, topo.domains)
    if group_size % nodes:
        raise PlanError(f"a group of {group_size} GPUs does not split evenly over {nodes} nodes")
    return nodes, group_size // nodes


def bus_factor(kind: str, p: int) -> float:
    """busbw / algbw (nccl-tests PERFORMANCE.md)."""
    if kind == "all_reduce":
        return 2 * (p - 1) / p
    return 1.0 if kind == "p2p" else (p - 1) / p


# ---- inside one node: (algorithm, latency_s, bandwidth_s) without the base latency ----

def _intra(kind: str, S: float, p: int, net: Net, calib: Calibration) -> list[tuple[str, float, float]]:
    B = net.nvlink_bytes_per_s
    eff = (lambda name: calib.xgmi_ring_efficiency) if net.xgmi else (lambda name: getattr(calib, name))
    if kind == "all_reduce":
        out = [("ring", net.first_hop_s + (2 * (p - 1) - 1) * net.step_s,
                2 * (p - 1) / p * S / (B * eff("nvlink_ring_efficiency")))]
        if net.nvls and p > 2:
            out.append(("nvls", 2 * net.first_hop_s, S / (B * calib.nvls_allreduce_efficiency)))
        return out
    if kind in ("all_gather", "reduce_scatter"):
        return [("ring", net.first_hop_s + (p - 2) * net.step_s,
                 (p - 1) / p * S / (B * eff("nvlink_allgather_efficiency")))]
    if kind == "all_to_all":
        return [("direct", net.first_hop_s, (p - 1) / p * S / (B * eff("nvlink_all_to_all_efficiency")))]
    return [("p2p", net.first_hop_s, S / (B * eff("nvlink_p2p_efficiency")))]


# ---- spanning n nodes with g GPUs each ----

@dataclass(frozen=True)
class _Path:
    """One algorithm between nodes before NCCL picks a protocol: its latency at the LL protocol (the
    topology's figures), the NVLink and network steps that latency counts (each protocol adds its own
    surcharge per step), its bandwidth term, and the bytes its busiest link carries (for LL's cap)."""
    algorithm: str        # "ring" | "tree" | "hierarchical"
    latency_s: float
    nvlink_steps: int
    net_steps: int
    bandwidth_s: float
    bus_bytes: float


@lru_cache(maxsize=1)
def _nccl_table() -> dict:
    return read_data(data_dir("nccl_protocols.yaml"))


@lru_cache(maxsize=1)
def _protocol_terms() -> tuple[dict, dict]:
    """(LL's busbw caps by node count, {protocol: {algorithm: (base_s, nvlink_step_s, net_step_s, keep)}}): each
    protocol's latencies less LL's (what it adds to the topology's LL figures) and the share of the bandwidth it
    keeps, from tuning.cc's figures in data/nccl_protocols.yaml."""
    table = _nccl_table()
    ll, terms = table["protocols"]["LL"], {}
    for proto, by_algorithm in table["protocols"].items():
        terms[proto] = {}
        for algorithm, f in by_algorithm.items():
            keep = f["bandwidth"] * (table["tree_bandwidth_factor"] if algorithm == "tree" else 1.0)
            base = ll[algorithm]
            terms[proto][algorithm] = ((f["base_us"] - base["base_us"]) * 1e-6,
                                       (f["nvlink_us"] - base["nvlink_us"]) * 1e-6,
                                       (f["net_us"] - base["net_us"]) * 1e-6, keep)
    return table["ll_busbw_cap_bytes_per_s"], terms


def tree_correction(proto: str, message_bytes: float) -> float:
    """NCCL's treeCorrectionFactor: the share of its modelled bandwidth a tree all-reduce of this size reaches
    under `proto` (tuning.cc ncclTopoGetAlgoTime, index log2i(bytes >> 6); 1.0 outside the table)."""
    factors = _nccl_table()["tree_all_reduce_correction"][proto]
    index = int(message_bytes) >> 6
    index = index.bit_length() - 1
    return factors[index] if 0 <= index < len(factors) else 1.0


def _with_protocols(paths: list[_Path], n: int, net: Net, all_reduce_bytes: float | None = None
                    ) -> list[tuple[str, float, float]]:
    """Each path under NCCL's LL, LL128 and Simple protocols (data/nccl_protocols.yaml, from NCCL's
    tuning.cc): latency + the protocol's surcharge per call and per step, bandwidth x the share it keeps,
    and LL's bandwidth capped at llMaxBw. `hierarchical` is priced with Simple only (a bulk path, like
    NCCL's NVLSTree); LL128 only where the node's GPUs share NVLink (NCCL's default: tuning.cc enables it
    for NVLink-connected sm70-sm120). The surcharges are NCCL's NVLink figures, used on PCIe too.
    For an all-reduce (`all_reduce_bytes`), ncclTopoGetAlgoTime's two corrections: the tree's bandwidth x
    `tree_correction`, ring Simple's latency x the plateau factor (1.4 on sm80+, 1.9 before; on the latency
    terms here - the base and cross-node constants `collective` adds to every option are left unscaled)."""
    caps, terms = _protocol_terms()
    cap = caps["two_nodes" if n == 2 else "more_nodes"]
    plateau = _nccl_table()["ring_simple_plateau"]["sm80_and_newer" if net.sm >= 80 else "older"]
    out = []
    for path in paths:
        for proto, by_algorithm in terms.items():
            if (path.algorithm == "hierarchical" and proto != "Simple") or (proto == "LL128" and not net.ll128):
                continue
            base_s, nvlink_s, net_s, keep = by_algorithm["tree" if path.algorithm == "tree" else "ring"]
            latency_s = path.latency_s + base_s + path.nvlink_steps * nvlink_s + path.net_steps * net_s
            bandwidth_s = path.bandwidth_s / keep
            if proto == "LL":
                bandwidth_s = max(bandwidth_s, path.bus_bytes / cap)
            if all_reduce_bytes is not None and path.algorithm == "tree":
                bandwidth_s /= tree_correction(proto, all_reduce_bytes)
            if all_reduce_bytes is not None and path.algorithm == "ring" and proto == "Simple":
                latency_s *= plateau
            out.append((f"{path.algorithm}/{proto}", latency_s, bandwidth_s))
    return out


def _inter(kind: str, S: float, n: int, g: int, net: Net, calib: Calibration) -> list[tuple[str, float, float]]:
    nic = net.nic_line_bytes_per_s * net.nic_efficiency
    if kind == "p2p":
        return [("p2p", net.net_hop_s, S / nic)]
    if kind == "all_to_all":
        p = n * g
        intra_s = (g - 1) / p * S / (net.nvlink_bytes_per_s * calib.nvlink_all_to_all_efficiency)
        inter_s = (p - g) / p * S / (net.nic_line_bytes_per_s * net.a2a_nic_efficiency)
        return [("direct", net.first_hop_s + net.net_hop_s, max(intra_s, inter_s))]
    if kind == "all_reduce":
        return _with_protocols(_inter_all_reduce(S, n, g, net, calib, nic), n, net, all_reduce_bytes=S)
    return _with_protocols(_inter_gather(kind, S, n, g, net, calib, nic), n, net)


def _inter_all_reduce(S, n, g, net, calib, nic) -> list[_Path]:
    """Flat ring over all n*g ranks (crossings share the group's NICs), NCCL's tree between nodes (a chain
    inside each node, log2(n) network hops, algbw = busbw / 2 as tuning.cc), and hierarchical:
    reduce-scatter inside the node, ring all-reduce of the 1/g shard over each GPU's own NIC, all-gather."""
    p = n * g
    ring_busbw = min(net.nvlink_bytes_per_s * calib.nvlink_ring_efficiency, g * nic)
    ring_steps = max(2 * (p - n) - 1, 0)
    ring = _Path("ring", net.first_hop_s + ring_steps * net.step_s + 2 * (n - 1) * net.net_hop_s,
                 2 * (p - n), 2 * (n - 1), 2 * (p - 1) / p * S / ring_busbw, 2 * (p - 1) / p * S)
    hops = ceil(log2(n))
    tree = _Path("tree", net.first_hop_s + 2 * ((g - 1) * net.step_s + hops * net.net_hop_s),
                 2 * (g - 1), 2 * hops, 2 * S / ring_busbw, 2 * S)
    out = [ring, tree]
    if g > 1:
        rs = _intra("reduce_scatter", S, g, net, calib)[0]
        shard_lat, shard_bw = 2 * (n - 1) * net.net_hop_s, 2 * (n - 1) / n * (S / g) / nic
        out.append(_Path("hierarchical", 2 * rs[1] + shard_lat, 2 * (g - 1), 2 * (n - 1),
                         2 * rs[2] + shard_bw, S))
    return out


def _inter_gather(kind, S, n, g, net, calib, nic) -> list[_Path]:
    """All-gather / reduce-scatter: flat ring (NIC-limited crossings) and hierarchical (exchange with the
    same-index GPU of the other nodes over its own NIC, then a ring inside the node)."""
    p = n * g
    busbw = min(net.nvlink_bytes_per_s * calib.nvlink_allgather_efficiency, g * nic)
    ring_steps = max(p - n - 1, 0)
    out = [_Path("ring", net.first_hop_s + ring_steps * net.step_s + (n - 1) * net.net_hop_s,
                 p - n, n - 1, (p - 1) / p * S / busbw, (p - 1) / p * S)]
    if g > 1:
        intra = _intra(kind, S, g, net, calib)[0]
        out.append(_Path("hierarchical", (n - 1) * net.net_hop_s + intra[1], g - 1, n - 1,
                         (n - 1) * S / p / nic + intra[2], S))
    return out


@lru_cache(maxsize=65536)
def collective(kind: str, message_bytes: float, group_size: int, topo: Topology, calib: Calibration,
               spans_nodes: bool | None = None, algorithm: str | None = None) -> CollectiveCost:
    """Cost of one collective: the fastest algorithm (or `algorithm`), with its algbw and busbw.
    Memoised: a plan search prices the same few messages over the same groups many times."""
    if kind not in KINDS:
        raise PlanError(f"unknown collective '{kind}'; expected one of {', '.join(KINDS)}")
    if group_size < 1 or message_bytes < 0:
        raise PlanError(f"collective {kind}: group size must be >= 1 and bytes >= 0")
    if group_size == 1 and kind != "p2p":
        return CollectiveCost(kind, "none", message_bytes, 1, 1, 0.0, 0.0, 0.0, 0.0, 0.0)
    n, g = placement(max(group_size, 2) if kind == "p2p" else group_size, topo, spans_nodes)
    net = net_of(topo, calib)
    options = _intra(kind, message_bytes, g, net, calib) if n == 1 else \
        _inter(kind, message_bytes, n, g, net, calib)
    if algorithm is not None:
        options = [o for o in options if algorithm in (o[0], o[0].split("/")[0])]
        if not options:
            raise PlanError(f"algorithm '{algorithm}' is not available for {kind} over {group_size} GPUs")
    name, lat, bw = min(options, key=lambda o: o[1] + o[2])
    lat += net.base_s + (net.internode_s if n > 1 else 0.0)
    time_s = lat + bw
    algbw = message_bytes / time_s if time_s else 0.0
    return CollectiveCost(kind, name, message_bytes, group_size, n, lat, bw, time_s, algbw,
                          algbw * bus_factor(kind, max(group_size, 2)))


def collective_time_s(kind: str, message_bytes: float, group_size: int, topo: Topology, calib: Calibration,
                      spans_nodes: bool | None = None) -> float:
    """Seconds for one collective of `kind` over `group_size` GPUs (see `collective` for the terms)."""
    return collective(kind, message_bytes, group_size, topo, calib, spans_nodes).time_s
