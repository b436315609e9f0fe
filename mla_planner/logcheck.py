"""An engine's own start-up log held against the plan: the KV pool it sized, the network NCCL chose, untuned
MoE kernels, eager mode and the engine release (USER_PROBLEMS.md problems 4, 12, 17, 20 and 25: users cannot
tell whether what they got is what they should have got).

The lines each engine prints (read from the wheels):
  vLLM 0.33.0    "GPU KV cache size: 1,616,640 tokens, Maximum concurrency for ..." (v1/core/kv_cache_utils.py;
                 older releases print the size alone, validation.yaml kv-vllm-v3-h800x16-tp16), once per engine
                 core; "Initializing a V1 LLM engine (v0.33.0) with config: ... enforce_eager=False, ..."
                 (v1/engine/core.py, config/vllm.py); "Using default MoE config" (fused_moe/fused_moe.py)
  SGLang 0.5.23  "max_total_num_tokens=712400, ..." once per DP rank (managers/scheduler.py); "Using default MoE
                 kernel config" (moe_runner/triton_utils/fused_moe_triton_config.py)
  NCCL           "NET/IB" or "NET/Socket" with NCCL_DEBUG=INFO (the transport between nodes)
  bench.sh       both engines' serving benchmarks print "Output token throughput (tok/s):" and "Mean TPOT (ms):"
                 (vllm/benchmarks/serve.py, sglang/benchmark/serving.py)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .backends import engine_version
from .moe_configs import moe_kernel_config
from .planfile import Candidate, Plan

KV_TOLERANCE = 0.05        # the memory model's tested band against logged pools (docs/memory.md)
KV_LINES = {"vllm": re.compile(r"\bKV cache size: ([\d,]+) tokens"),
            "sglang": re.compile(r"\bmax_total_num_tokens=(\d+)")}
DEFAULT_MOE = re.compile(r"Using default MoE (kernel )?config")
VLLM_VERSION = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)")
VLLM_EAGER = re.compile(r"\benforce_eager=(True|False)\b")
BENCH_TOK_S = re.compile(r"Output token throughput \(tok/s\):\s+([\d.]+)")
BENCH_TPOT = re.compile(r"Mean TPOT \(ms\):\s+([\d.]+)")
BENCH_LOW = 0.7            # the step model has been up to 23 % optimistic (README, Validation): below 0.7x, look


@dataclass(frozen=True)
class LogCheck:
    name: str
    status: str        # ok | warn | fail | absent (the log has no line to judge by)
    text: str


def check_log(text: str, plan: Plan, cand: Candidate) -> list[LogCheck]:
    """Every check the log has material for, in a fixed order (absent ones say which line to look for)."""
    engine = cand.knobs.engine
    checks = [_kv(text, engine, cand), _network(text, plan, cand), _moe(text, plan, cand)]
    if engine == "vllm":
        checks += [_eager(text, cand), _version(text)]
    return checks + [_bench(text, cand)]


def _kv(text: str, engine: str, cand: Candidate) -> LogCheck:
    planned = (cand.memory or {}).get("kv_capacity_tokens")
    logged = [int(m.group(1).replace(",", "")) for m in KV_LINES[engine].finditer(text)]
    line = "'GPU KV cache size: N tokens'" if engine == "vllm" else "'max_total_num_tokens=N'"
    if not logged:
        return LogCheck("kv_cache", "absent", f"no {line} line: is this the log of an engine that finished starting?")
    low = min(logged)   # each engine core / DP rank logs its own pool; the smallest binds
    if not planned:
        return LogCheck("kv_cache", "absent", f"the engine holds {low:,} tokens; the plan has no KV figure to hold "
                                              "it against")
    ratio = low / planned
    words = f"the engine holds {low:,} KV tokens, the plan {planned:,} ({ratio - 1:+.1%})"
    if ratio < 1 - KV_TOLERANCE:
        return LogCheck("kv_cache", "fail", words + ": fewer than planned; the memory fraction, the engine release or "
                                                    "the model files differ from the plan (`mla-plan memory` prices "
                                                    "any of them), and fewer requests fit")
    if ratio > 1 + KV_TOLERANCE:
        return LogCheck("kv_cache", "warn", words + ": more than planned; check the memory fraction the engine ran "
                                                    "with (a higher one risks out-of-memory under load)")
    return LogCheck("kv_cache", "ok", words)


def _network(text: str, plan: Plan, cand: Candidate) -> LogCheck:
    inter = plan.topology.inter_node
    if cand.layout.instance_gpus <= plan.topology.gpus_per_node or inter is None:
        return LogCheck("network", "ok", "one node per engine instance: no traffic between nodes")
    socket, fast = "NET/Socket" in text, re.search(r"NET/IB\b|NET/IBext|NET/RoCE", text) is not None
    if socket and inter.fabric != "ethernet":
        return LogCheck("network", "fail", f"NCCL fell back to TCP sockets (NET/Socket) on a {inter.fabric} "
                                           "fabric: 4-20x slower collectives; check NCCL_IB_HCA, /dev/infiniband in "
                                           "the container and libibverbs (the emitted README)")
    if fast or socket:
        return LogCheck("network", "ok", "NCCL runs over " + ("sockets, as this Ethernet topology expects"
                                                              if socket else "InfiniBand / RoCE (NET/IB)"))
    return LogCheck("network", "absent", "no NET/IB or NET/Socket line: start the engine with NCCL_DEBUG=INFO to see "
                                         "which transport NCCL chose between nodes")


def _moe(text: str, plan: Plan, cand: Candidate) -> LogCheck:
    if not DEFAULT_MOE.search(text):
        return LogCheck("moe_kernels", "ok", "no 'Using default MoE config' warning")
    kernel = moe_kernel_config(plan.spec, plan.topology.gpu, cand.layout, cand.knobs.engine)
    advice = (kernel.advice(plan.spec.hf_id or plan.spec.name, cand.layout.moe_tp, plan.spec.expert_dtype == "fp8")
              if kernel else "tune the fused-MoE kernel for this GPU and split with the engine's benchmark_moe script")
    return LogCheck("moe_kernels", "warn", "the engine runs untuned fused-MoE kernels ('Using default MoE config'): "
                                           + advice)


def _eager(text: str, cand: Candidate) -> LogCheck:
    found = VLLM_EAGER.search(text)
    if not found:
        return LogCheck("cuda_graphs", "absent", "no engine config line with enforce_eager")
    eager = found.group(1) == "True"
    if eager and cand.knobs.cuda_graphs:
        return LogCheck("cuda_graphs", "fail", "the engine runs eagerly (enforce_eager=True) where the plan priced "
                                               "CUDA graphs: every decode kernel pays a CPU launch")
    return LogCheck("cuda_graphs", "ok", "eager, as planned" if eager else "CUDA graphs on, as planned")


def _version(text: str) -> LogCheck:
    found, want = VLLM_VERSION.search(text), engine_version("vllm")
    if not found:
        return LogCheck("engine_version", "absent", "no 'Initializing a V1 LLM engine (vX)' line")
    got = found.group(1)
    if got.split(".")[:2] != want.split(".")[:2]:
        return LogCheck("engine_version", "warn", f"vLLM {got} runs; the plan models {want}, whose flags, defaults "
                                                  "and memory accounting may differ")
    return LogCheck("engine_version", "ok", f"vLLM {got}")


def _bench(text: str, cand: Candidate) -> LogCheck:
    """bench.sh's result against the plan's figures for one replica at the planned concurrency."""
    tok_s, tpot = BENCH_TOK_S.findall(text), BENCH_TPOT.findall(text)
    perf = cand.performance or {}
    if not tok_s or not perf.get("throughput_tokens_per_s"):
        return LogCheck("benchmark", "absent", "no benchmark result ('Output token throughput (tok/s):'): add "
                                               "bench.sh's output to compare its tok/s and TPOT with the plan")
    planned = perf["throughput_tokens_per_s"] / cand.layout.replicas
    got = float(tok_s[-1])
    words = f"bench.sh: {got:,.0f} output tok/s against the plan's {planned:,.0f} ({got / planned:.2f}x)"
    if tpot and perf.get("tpot_s"):
        words += f", mean TPOT {float(tpot[-1]):.1f} ms against {perf['tpot_s'] * 1e3:.1f} ms"
    if got < BENCH_LOW * planned:
        return LogCheck("benchmark", "warn", words + ": well below the plan (it has been up to 23 % optimistic); "
                                                     "look for NET/Socket, eager mode and untuned MoE kernels above, "
                                                     "and check bench.sh ran at the planned concurrency")
    return LogCheck("benchmark", "ok", words)
