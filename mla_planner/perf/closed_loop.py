"""What a closed-loop serving benchmark measures for the time to first token, beside the steady state.

`vllm bench serve` and `sglang.bench_serving` with `--max-concurrency C --request-rate inf` (and the harnesses built
on them: InferenceX's benchmark_serving.py, this project's bench.sh) create every request at the start behind a
semaphore of C: the first C prompts arrive together, each later one when an earlier request finishes. SGLang prefills the first C in
forwards of its prompt budget one after another before it decodes any (a waiting prefill batch runs first; vLLM's
scheduler puts running requests' decodes first, which this does not model), so the prompt in forward j waits for
forwards 1..j; the later arrivals, spread over the decode phase by the benchmark's output lengths, see the steady state
the planner prices (perf.metrics). Over N prompts:

    mean TTFT = (C x first-wave mean + (N - C) x steady-state TTFT) / N

An SGLang server launched with --scheduler-recv-interval R > 1 reads new requests only every R decode steps
(managers/scheduler_components/recv_skipper.py: each decode forward adds 1 to a counter, the socket is polled when it
reaches R), so a request arriving while the server decodes waits R / 2 steps on average before it is even queued.

A forward packs budget // L prompts of the L tokens each must compute (its prompt less prefix-cache hits;
perf.disagg.prefill_rate prices such a forward: linear layers on all the tokens, attention on each prompt apart). DP
ranks take the prompts round-robin, each packing its own into its share of the budget (SGLang divides
--chunked-prefill-size by the DP size).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil

from mla_planner.perf.disagg import prefill_rate
from mla_planner.perf.request_times import prefill_tokens
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


@dataclass(frozen=True)
class FirstWave:
    """The C prompts a closed-loop benchmark sends at once, as the engine prefills them."""
    prompts_per_forward: int
    forwards: int                 # on the busiest DP rank
    forward_s: float              # one full forward
    mean_ttft_s: float            # over the C prompts sent at once


def first_wave(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, workload: Workload, calib: Calibration,
               concurrency: int, prompt_budget_tokens: int) -> FirstWave:
    """The C prompts sent at once: per DP rank ceil(C / dp) of them, packed `budget // L` to a forward (the server's
    prompt budget, a DP rank's share of it under SGLang; L the tokens a prompt computes), the last forward holding the
    rest at its own size; the j-th forward's prompts get their first token when it ends, and the part of a TTFT outside
    the forwards (calib.ttft_host_s) after it."""
    per_rank = ceil(concurrency / layout.dp)
    budget = prompt_budget_tokens // (layout.dp if knobs.engine == "sglang" else 1)
    tokens = prefill_tokens(workload, knobs)

    def forward(prompts: int):
        packed = replace(knobs, max_num_batched_tokens=max(prompts * tokens, 1))
        return prefill_rate(spec, topo, layout, packed, workload, calib)

    full = forward(max(1, min(per_rank, budget // tokens)))
    k = full.prompts_per_forward
    sizes = [k] * (per_rank // k) + ([per_rank % k] if per_rank % k else [])
    clock, waits = 0.0, 0.0
    for n in sizes:
        clock += full.forward_s if n == k else forward(n).forward_s
        waits += n * clock
    return FirstWave(k, len(sizes), full.forward_s, waits / per_rank + calib.ttft_host_s)


def closed_loop_mean_ttft_s(steady_ttft_s: float, wave: FirstWave, concurrency: int, prompts: int) -> float:
    """The benchmark's mean TTFT over `prompts` requests at `concurrency` in flight (module docstring)."""
    first = min(concurrency, prompts)
    return (first * wave.mean_ttft_s + (prompts - first) * steady_ttft_s) / prompts


def recv_wait_s(recv_interval_steps: int, decode_step_s: float) -> float:
    """Mean wait of a request that arrives while SGLang decodes, polled every `recv_interval_steps` decode steps."""
    return recv_interval_steps / 2 * decode_step_s if recv_interval_steps > 1 else 0.0
