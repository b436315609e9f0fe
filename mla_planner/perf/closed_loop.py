"""What a closed-loop serving benchmark measures for the time to first token, beside the steady state.

`vllm bench serve` and `sglang.bench_serving` with `--max-concurrency C --request-rate inf` (and the harnesses built
on them: InferenceX's benchmark_serving.py, this project's bench.sh) create every request at the start behind a
semaphore of C: the first C prompts arrive together, each later one when an earlier request finishes. The engine
prefills the first C in forwards of its prompt budget one after another (both engines schedule waiting prompts before
decoding them), so the prompt in forward j waits for forwards 1..j; the later arrivals, spread over the decode phase
by the benchmark's output lengths, see the steady state the planner prices (perf.metrics). Over N prompts:

    mean TTFT = (C x first-wave mean + (N - C) x steady-state TTFT) / N

An SGLang server launched with --scheduler-recv-interval R > 1 reads new requests only every R decode steps
(managers/scheduler_components/recv_skipper.py: each decode forward adds 1 to a counter, the socket is polled when it
reaches R), so a request arriving while the server decodes waits R / 2 steps on average before it is even queued.

A forward packs budget // L prompts of L tokens (perf.disagg.prefill_rate prices such a forward: linear layers on
all the tokens, attention on each prompt apart). DP ranks take the prompts round-robin, each packing its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil

from mla_planner.perf.disagg import prefill_rate
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs, Workload
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology


@dataclass(frozen=True)
class FirstWave:
    prompts_per_forward: int
    forwards: int                 # on the busiest DP rank
    forward_s: float              # one full forward
    mean_ttft_s: float            # over the C prompts sent at once


def first_wave(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, workload: Workload, calib: Calibration,
               concurrency: int, prompt_budget: int) -> FirstWave:
    """The C prompts sent at once: per DP rank ceil(C / dp) of them, packed `prompt_budget // input_len` to a
    forward (the last forward holds the rest, priced at its own size); the j-th forward's prompts get their first
    token when it ends."""
    per_rank = ceil(concurrency / layout.dp)

    def forward(prompts: int):
        budget = max(prompts * workload.input_len, 1)
        return prefill_rate(spec, topo, layout, replace(knobs, max_num_batched_tokens=budget), workload, calib)

    full = forward(max(1, min(per_rank, prompt_budget // max(workload.input_len, 1))))
    k = full.prompts_per_forward
    sizes = [k] * (per_rank // k) + ([per_rank % k] if per_rank % k else [])
    clock, waits = 0.0, 0.0
    for n in sizes:
        clock += full.forward_s if n == k else forward(n).forward_s
        waits += n * clock
    return FirstWave(k, len(sizes), full.forward_s, waits / per_rank)


def closed_loop_mean_ttft_s(steady_ttft_s: float, wave: FirstWave, concurrency: int, prompts: int) -> float:
    """The benchmark's mean TTFT over `prompts` requests at `concurrency` in flight (module docstring)."""
    first = min(concurrency, prompts)
    return (first * wave.mean_ttft_s + (prompts - first) * steady_ttft_s) / prompts


def recv_wait_s(recv_interval: int, decode_step_s: float) -> float:
    """Mean wait of a request that arrives while SGLang decodes, polled every `recv_interval` decode steps."""
    return recv_interval / 2 * decode_step_s if recv_interval > 1 else 0.0
