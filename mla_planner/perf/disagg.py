"""Prefill/decode disaggregation: a prefill pool, a decode pool and the KV cache sent from one to the other.

A disaggregated deployment runs every prompt on a prefill instance, ships the prompt's KV cache over RDMA to a
decode instance, and decodes there (SGLang `--disaggregation-mode prefill|decode`, vLLM's NixlConnector; the
SGLang large-scale EP blog, lmsys.org 2025-05-05; DeepSeek's inference system, deepseek-ai/open-infra-index
"Day 6"). Each pool is a whole number of instances, each instance a layout over whole nodes.

  prefill  an instance runs prompts alone, no decode in its steps: a forward packs up to its token budget
           (max_num_batched_tokens) of prompts per DP rank. Its rate (prompt tokens/s) is the budget's prompts
           over that forward's time; a lone prompt's latency is its chunks one after another (prefill.prefill).
  transfer the prompt's KV bytes as the decode instance holds them (every decode GPU that keeps a copy receives
           its own, in parallel over its share of the node's NICs) at kv_transfer_efficiency of line rate.
  decode   an instance decodes with no prefill chunk in its steps, so its TPOT is the decode round alone
           (step.decode_step): the batch is the largest within the TPOT target, the KV pool (prompt + output
           per request) and the engine's caps (metrics.batch_limit).

TTFT = queue on the prefill pool + the prompt's prefill + the exposed transfer + one decode step (the first token
leaves the decode instance after its next step). The prefill queue is M/D/1 per DP rank (Poisson arrivals spread
evenly over the ranks, a deterministic service of one prompt's share of a forward): W = rho s / (2 (1 - rho))
(Kleinrock, "Queueing Systems" vol. 1, the Pollaczek-Khinchine mean wait with a constant service time).
Without a request rate the pools run at the most the TTFT target and the decode pool allow.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil

from mla_planner.memory.accounting import evaluate as memory_evaluate
from mla_planner.perf.batch_search import largest_under
from mla_planner.perf.layer_work import Batch
from mla_planner.perf.metrics import batch_limit, tokens_per_request
from mla_planner.perf.prefill import prefill
from mla_planner.perf.request_times import prefill_tokens
from mla_planner.perf.step import DecodeStep, decode_step, forward_stages
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

PREFILL_ATTENTION = "attn.prefill"   # the step model's prefill attention term (perf/layer_work.py)
RHO_MAX = 0.95    # the busiest a prefill pool is run: at 1 the M/D/1 queue grows without bound


@dataclass(frozen=True)
class PrefillRate:
    """One prefill instance at full load."""
    prompt_tokens: int             # tokens a request prefills (its prompt less the expected prefix hits)
    prompts_per_forward: int       # prompts one DP rank packs into a forward (1 when a prompt needs several)
    forward_s: float               # a packed forward's time (or a lone long prompt's chunks)
    tokens_per_s: float            # prompt tokens/s of the instance (every DP rank busy)
    lone_s: float                  # one prompt alone: its prefill when the instance is idle
    kv_fits: bool                  # whether a DP rank's pool holds the packed prompts' KV until it is sent
    kv_capacity_tokens: int = 0    # a DP rank's KV pool, as the engine logs it
    lone_longest_s: float = 0.0    # the longest (p99) prompt alone: the one held to the TTFT target
    host_s: float = 0.0            # the part of a TTFT outside the forwards (calib.ttft_host_s)


@dataclass(frozen=True)
class Transfer:
    """One request's KV cache from the prefill instance to the decode instance."""
    bytes_per_request: float       # what the decode instance receives, every copy it keeps counted
    bytes_per_gpu: float           # what one receiving GPU gets
    seconds: float                 # at its share of the NICs, kv_transfer_efficiency of line rate
    exposed_s: float               # the part TTFT waits for (chunk-wise sends hide the rest; prompts finishing
                                   # in one forward queue on the NICs)


@dataclass(frozen=True)
class DecodeRate:
    """One decode instance at its operating batch, no prefill in its steps."""
    batch_per_dp_rank: int
    limit: str                     # what caps the batch: tpot, kv, max_num_seqs, deepep_dispatch, cuda_graphs
    step: DecodeStep
    requests_per_s: float          # requests it completes per second (batch x dp / (output_len x TPOT))
    kv_capacity_tokens: int


@dataclass(frozen=True)
class PoolSplit:
    """The two pools' instances and what the deployment does with them."""
    prefill_instances: int
    decode_instances: int
    requests_per_s: float          # what it serves (the offered rate, or the most both pools and the targets allow)
    prefill_utilization: float
    decode_utilization: float
    queue_s: float
    ttft_s: float
    tpot_s: float
    throughput_tokens_per_s: float
    gpus: int
    binding: str                   # "decode", "prefill" (its TTFT or its rate), or "offered" (the request rate)
    overload: float                # offered / served where the rate is beyond both pools; 0 otherwise
    meets_targets: bool
    ttft_longest_s: float          # the longest (p99) prompt's TTFT, held to the target

    @property
    def throughput_tokens_per_s_per_gpu(self) -> float:
        return self.throughput_tokens_per_s / self.gpus


def prefill_rate(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, workload: Workload,
                 calib: Calibration) -> PrefillRate:
    """A prefill instance's prompt rate. A DP rank packs k = budget // L prompts of L tokens into one forward
    (SGLang's prefill batch, vLLM's token budget): its linear layers and collectives run on k x L tokens, its
    attention on each prompt apart (a prompt's queries see only its own keys), so the forward is the k x L-token
    pass with the prefill attention of one k x L-token sequence swapped for k L-token ones (the step model's
    `attn.prefill` term of each layer kind). A prompt longer than the budget runs its chunks one after another
    (prefill.prefill)."""
    tokens = prefill_tokens(workload, knobs)
    budget = knobs.max_num_batched_tokens
    lone = prefill(spec, topo, layout, knobs, tokens, calib)
    k = max(1, budget // max(tokens, 1))
    if k == 1:
        forward = lone.ttft_s
    else:
        lt_packed, packed = forward_stages(spec, topo, layout, knobs, Batch(0, 0, k * tokens, 0), calib)
        lt_one, _ = forward_stages(spec, topo, layout, knobs, Batch(0, 0, tokens, 0), calib)
        swap = {kind: lt_packed[kind].terms_s.get(PREFILL_ATTENTION, 0.0)
                - k * lt_one[kind].terms_s.get(PREFILL_ATTENTION, 0.0) for kind in lt_packed}
        forward = sum(s.total_s - s.dense_layers * swap["dense"] - s.moe_layers * swap.get("moe", 0.0)
                      for s in packed)
    mem = memory_evaluate(spec, topo, layout, knobs)
    fits = mem.fits and mem.requests_fit(tokens_per_request(Workload(input_len=tokens, output_len=1),
                                                            knobs.block_size)) >= k
    longest = prefill_tokens(workload, knobs, workload.input_len_max or workload.input_len)
    lone_longest = prefill(spec, topo, layout, knobs, longest, calib).ttft_s if longest > tokens else lone.ttft_s
    return PrefillRate(tokens, k, forward, layout.dp * k * tokens / forward, lone.ttft_s, fits,
                       mem.kv_capacity_tokens if mem.fits else 0, lone_longest, calib.ttft_host_s)


def transfer(spec: ModelSpec, topo: Topology, prefill_layout: Layout, decode_layout: Layout, kv_dtype: str,
             prompt_tokens: int, calib: Calibration, per_chunk: bool, chunk_tokens: int, packed: int = 1) -> Transfer:
    """The whole prompt's KV (prefix hits included: the decode instance holds all of it) as the decode instance
    holds it: each of its attention-TP ranks keeps its rank share of every KV group (the MLA latent whole on every
    TP rank, attention_of(spec).kv_groups), and with DCP 1/dcp of the tokens; a request lands on one DP rank. Each
    receiving GPU takes its bytes in over its share of the node's NICs (Topology.nic_gbit_per_s_per_gpu), and the
    prefill side sends them from the GPUs that hold the request (its attention-TP ranks: each keeps the whole
    latent), all at kv_transfer_efficiency of line rate; the busier side sets the time. TTFT waits for: with
    `per_chunk` (SGLang: each chunk's KV leaves once its forward is done) and a prompt longer than the chunk, the last
    chunk's share; else the prompt's, behind the others of its forward (`packed` prompts finish together and queue on
    the NICs: (packed + 1) / 2 prompts' time on average; vLLM's NIXL reads after the prefill)."""
    kind = attention_of(spec)
    per_gpu_token = kind.gpu_bytes_per_token(spec, decode_layout, kv_dtype, range(spec.num_hidden_layers))
    per_gpu = per_gpu_token * prompt_tokens / decode_layout.dcp
    receivers, senders = decode_layout.tp, prefill_layout.tp
    rate = topo.nic_gbit_per_s_per_gpu * 1e9 / 8 * calib.kv_transfer_efficiency if topo.inter_node else 0.0
    busiest = per_gpu * max(1.0, receivers / senders)     # the most one GPU of either side moves
    seconds = busiest / rate if rate else float("inf")
    if per_chunk and prompt_tokens > chunk_tokens:
        exposed = seconds * chunk_tokens / prompt_tokens
    else:
        exposed = seconds * (max(packed, 1) + 1) / 2
    return Transfer(per_gpu * receivers, per_gpu, seconds, exposed)


def decode_rate(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, workload: Workload,
                calib: Calibration, cap_per_dp_rank: int = 0) -> DecodeRate:
    """A decode instance's largest batch per DP rank within the TPOT target (no prefill stalls: its prompts were
    prefilled elsewhere) under the KV pool and the engine's caps (metrics.batch_limit), and what it completes.
    `cap_per_dp_rank`: at most this many (a closed loop's concurrency spread over the pool)."""
    mem = memory_evaluate(spec, topo, layout, knobs)
    cap, limit = batch_limit(layout, knobs, mem, workload, topo.gpu)
    if cap_per_dp_rank and cap_per_dp_rank < cap:
        cap, limit = cap_per_dp_rank, "concurrency"
    ctx = workload.mean_decode_context

    def tpot(b: int) -> float:
        return decode_step(spec, topo, layout, knobs, b, ctx, calib, mtp_acceptance=workload.mtp_acceptance).tpot_s
    batch = largest_under(tpot, workload.tpot_ms / 1e3, cap) if cap and workload.tpot_applies else cap
    if cap and batch < cap:
        limit = "tpot"
    step = decode_step(spec, topo, layout, knobs, max(batch, 1), ctx, calib, mtp_acceptance=workload.mtp_acceptance)
    served = batch * layout.dp / (workload.output_len * step.tpot_s) if batch else 0.0
    return DecodeRate(batch, limit if cap else "kv", step, served, mem.kv_capacity_tokens if mem.fits else 0)


def split(workload: Workload, p: PrefillRate, p_layout: Layout, n_p: int, t: Transfer, d: DecodeRate,
          d_layout: Layout, n_d: int, t_longest: Transfer | None = None) -> PoolSplit:
    """n_p prefill and n_d decode instances serving `workload`: the rate is the offered one, else the most the
    decode pool completes and the prefill pool takes within the TTFT target (held by the longest, p99, prompt with
    its transfer `t_longest`); TTFT and the pools' utilisation at that rate. Each prefill DP rank is its own server
    (requests spread evenly over the n_p x dp ranks), a prompt occupying it for s = forward_s / prompts_per_forward (a
    lone prompt's time where one prompt fills a forward): an M/D/1 queue per rank, W = rho s / (2 (1 - rho)), at most
    RHO_MAX busy. A closed loop of `workload.concurrency` requests runs at the rate Little's law gives with the model's
    own times (concurrency / (TTFT + (output_len - 1) x TPOT)); what the decode pool cannot hold (its batch on every
    DP rank) queues, as for an aggregated candidate, and misses the TTFT target."""
    ranks = n_p * p_layout.dp
    s = p.forward_s / p.prompts_per_forward
    t_longest = t_longest or t
    fixed = p.lone_s + t.exposed_s + d.step.step_s + p.host_s
    fixed_longest = max(p.lone_longest_s, p.lone_s) + t_longest.exposed_s + d.step.step_s + p.host_s
    budget = workload.ttft_ms / 1e3 - fixed_longest
    rho_ttft = min(RHO_MAX, 2 * budget / (s + 2 * budget)) if budget > 0 else 0.0
    prefill_max = ranks * rho_ttft / s
    decode_max = n_d * d.requests_per_s
    most = min(prefill_max, decode_max)
    binding = "decode" if decode_max <= prefill_max else "prefill"
    offered = workload.request_rate_per_s
    overload = 0.0
    if offered:
        if offered > most:
            overload = offered / most if most else float("inf")
        else:
            most, binding = offered, "offered"

    def wait(rate: float) -> float:
        rho = rate * s / ranks
        return rho * s / (2 * (1 - rho)) if rho < 1 else float("inf")
    held = n_d * d_layout.dp * d.batch_per_dp_rank
    if workload.concurrency:
        if held < workload.concurrency:
            overload = max(overload, workload.concurrency / held if held else float("inf"))
        rest = fixed - p.host_s + (workload.output_len - 1) * d.step.tpot_s   # the engines' own time (Little's law)

        def in_flight(rate: float) -> float:     # Little's law at `rate`, its own queue included: grows with it
            return rate * (rest + wait(rate))
        if in_flight(most) > workload.concurrency:
            low, high = 0.0, most
            for _ in range(100):                 # bisection to the rate that keeps `concurrency` in flight
                mid = (low + high) / 2
                low, high = (mid, high) if in_flight(mid) <= workload.concurrency else (low, mid)
            most, binding = low, "concurrency"
    rho = most * s / ranks
    queue = wait(most)
    gpus = n_p * p_layout.instance_gpus + n_d * d_layout.instance_gpus
    meets = (p.kv_fits and d.batch_per_dp_rank > 0 and most > 0 and not overload
             and queue + fixed_longest <= workload.ttft_ms / 1e3 + 1e-12)
    return PoolSplit(n_p, n_d, most, rho, most / decode_max if decode_max else 0.0, queue, queue + fixed,
                     d.step.tpot_s, most * workload.output_len, gpus, binding, overload, meets, queue + fixed_longest)


def prefill_knobs(knobs: Knobs, budget: int, workload: Workload) -> Knobs:
    """A prefill instance's knobs: its token budget, and room for twice the prompts a forward packs per DP rank (those
    being prefilled and those whose KV is still being sent); no decode batch to size."""
    prompts = ceil(budget / max(prefill_tokens(workload, knobs), 1))
    return replace(knobs, max_num_batched_tokens=budget, max_num_seqs=max(1, min(knobs.max_num_seqs, 2 * prompts)))


def closed_loop_cap(workload: Workload, layout: Layout, instances: int) -> int:
    """Per decode DP rank, the most requests a closed loop of `workload.concurrency` puts there (0: no cap)."""
    if not workload.concurrency:
        return 0
    return max(1, ceil(workload.concurrency / (instances * layout.dp)))
