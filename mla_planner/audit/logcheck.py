"""An engine's own log held against the plan: the KV pool it sized, the network NCCL chose, untuned MoE kernels,
eager mode and the KV cache dtype it ran, the engine release, and bench.sh's tokens/s and TPOT
(sgl-project/sglang#3226 and #4161, vllm-project/vllm#30832, #51041 and #54677: users cannot tell whether
what they got is what they should have got).

The lines are read once, by logcheck_read.read_log, which names each engine's format and the function of the
engine's source that prints it (vLLM 0.33.0: "GPU KV cache size: 1,616,640 tokens, Maximum concurrency for ..."
from v1/core/kv_cache_utils.py:update_kv_cache_capacity, older releases print the size alone, vllm-project/vllm
#16692, once per engine core; "Initializing a V1 LLM engine (v0.33.0) with config: ... enforce_eager=False, ..."
from v1/engine/core.py:EngineCore.__init__. SGLang 0.5.23: "max_total_num_tokens=712400, ..." once per DP rank
from managers/scheduler.py; "server_args={..., 'kv_cache_dtype': 'fp8_e4m3', ...}" from entrypoints/engine.py.
NCCL: "NET/IB" or "NET/Socket" with NCCL_DEBUG=INFO. bench.sh: "Output token throughput (tok/s):" and "Mean
TPOT (ms):" from vllm/benchmarks/serve.py and sglang/bench_serving.py), and a number that does not parse is a
note there, never a traceback here.
"""

from __future__ import annotations

from math import ceil

from mla_planner.audit.logcheck_read import LogCheck, LogFacts, nccl_network
from mla_planner.audit.logcheck_settings import settings_check
from mla_planner.engines.backends import engine_version
from mla_planner.engines.moe_configs import TUNE_SCRIPT, UNTUNED_LOG, moe_kernel_config
from mla_planner.launch.folder import deployment_concurrency
from mla_planner.launch.sglang import KV_CACHE_DTYPES as SGLANG_KV_CACHE_DTYPES
from mla_planner.launch.vllm import KV_CACHE_DTYPES as VLLM_KV_CACHE_DTYPES
from mla_planner.search.planfile import Candidate, Plan
from mla_planner.specs.knobs import KV_DTYPE_CHOICES

KV_TOLERANCE = 0.05        # the memory model's tested band against logged pools (docs/memory.md)
FABRIC = {"infiniband": "an InfiniBand", "roce": "a RoCE", "ethernet": "an Ethernet"}
BENCH_LOW = 0.7            # the step model has been up to 23 % optimistic (README, Validation): below 0.7x, look


def check_log(facts: LogFacts, plan: Plan, cand: Candidate, files: dict[str, str]) -> list[LogCheck]:
    """Every check, in a fixed order; one the log has no line for is 'absent' and says which line to look for.
    FACTS: what logcheck_read.read_log found in all the files together; FILES (name -> text): NCCL's transport
    is judged per file, as each node logs its own."""
    engine = cand.knobs.engine
    checks = [_kv(facts, engine, cand), settings_check(facts, plan, cand), _network_per_file(files, plan, cand),
              _moe(facts, plan, cand)]
    if engine == "vllm":
        checks += [_vllm_config(facts, cand), _version(facts, plan)]
    else:
        checks.append(_sglang_config(facts, cand))
    return checks + [_bench(facts, cand, plan)]


def _kv(facts: LogFacts, engine: str, cand: Candidate) -> LogCheck:
    planned = cand.memory.kv_capacity_tokens if cand.memory else None
    logged = facts.kv(engine)
    line = "'GPU KV cache size: N tokens'" if engine == "vllm" else "'max_total_num_tokens=N'"
    other = "sglang" if engine == "vllm" else "vllm"
    if not logged and facts.kv(other):
        return LogCheck("kv_cache", "fail", f"this is {other}'s log, but the candidate runs {engine}: check "
                                            "--candidate (or --engine when emitting)")
    if not logged:
        return LogCheck("kv_cache", "absent", f"no readable {line} line: is this the log of an engine that finished "
                                              "starting?")
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


def _network_per_file(files: dict[str, str], plan: Plan, cand: Candidate) -> LogCheck:
    """The worst file's verdict (fail over ok over absent), naming the file that failed: one node falling back
    to sockets slows every collective of the instance, whatever the other nodes log."""
    verdicts = {name: _network(text, plan, cand) for name, text in files.items()}
    for status in ("fail", "ok"):
        hit = [(name, v) for name, v in verdicts.items() if v.status == status]
        if hit:
            name, v = hit[0]
            return LogCheck(v.name, v.status, (f"{name}: " if status == "fail" and name else "") + v.text)
    return next(iter(verdicts.values()))


def _network(text: str, plan: Plan, cand: Candidate) -> LogCheck:
    inter = plan.topology.inter_node
    if cand.layout.instance_gpus <= plan.topology.gpus_per_node or inter is None:
        return LogCheck("network", "ok", "one node per engine instance: no traffic between nodes")
    fast, socket = nccl_network(text)
    if socket and inter.fabric != "ethernet":
        return LogCheck("network", "fail", f"NCCL fell back to TCP sockets (NET/Socket) on {FABRIC[inter.fabric]} "
                                           "fabric: 4-20x slower collectives; check NCCL_IB_HCA, /dev/infiniband in "
                                           "the container and libibverbs (the emitted README)")
    if fast or socket:
        return LogCheck("network", "ok", "NCCL runs over " + ("sockets, as this Ethernet topology expects"
                                                              if socket else "InfiniBand / RoCE (NET/IB)"))
    return LogCheck("network", "absent", "no NET/IB or NET/Socket line: start the engine with NCCL_DEBUG=INFO to see "
                                         "which transport NCCL chose between nodes")


def _moe(facts: LogFacts, plan: Plan, cand: Candidate) -> LogCheck:
    engine = cand.knobs.engine
    said = UNTUNED_LOG[engine]
    if not facts.untuned_moe:
        if not facts.kv(engine):   # not a log of a started engine: its silence says nothing
            return LogCheck("moe_kernels", "absent", f"no engine start-up lines to look for '{said}' in")
        return LogCheck("moe_kernels", "ok", f"no '{said}' warning")
    kernel = moe_kernel_config(plan.spec, plan.topology.gpu, cand.layout, engine)
    model = plan.model_path or plan.spec.hf_id or plan.spec.name
    advice = (kernel.advice(model, cand.layout)
              if kernel else f"tune it for this GPU and split with {TUNE_SCRIPT[engine]} from the engine's source tree")
    return LogCheck("moe_kernels", "warn", f"the engine runs untuned fused-MoE kernels ('{said}'): " + advice)


def same_kv(logged: str, planned_flag: str, planned: str) -> bool:
    """Whether the KV cache dtype an engine logged is the plan's: its flag as emitted, or another spelling of the
    same storage (fp8 and fp8_e4m3; auto, bfloat16 and bf16 for a BF16 cache: specs/knobs.KV_DTYPE_CHOICES)."""
    spelled = KV_DTYPE_CHOICES.get(logged.lower(), "bf16" if logged == "bfloat16" else "")
    return logged == planned_flag or spelled == planned


def _vllm_config(facts: LogFacts, cand: Candidate) -> LogCheck:
    """vLLM's engine config line (or its non-default args): eager mode and the KV cache dtype against the plan's
    knobs."""
    logged = facts.settings if facts.engine == "vllm" else {}
    if "cuda_graphs" not in logged:
        return LogCheck("engine_config", "absent", "no 'Initializing a V1 LLM engine ... with config' line")
    eager, kv = not logged["cuda_graphs"], logged.get("kv_cache_dtype")
    wrong = []
    if eager == cand.knobs.cuda_graphs:
        wrong.append(f"enforce_eager={eager} where the plan has CUDA graphs " + ("on" if cand.knobs.cuda_graphs else
                                                                                  "off"))
    planned_kv = VLLM_KV_CACHE_DTYPES[cand.knobs.kv_cache_dtype]
    if kv and not same_kv(kv, planned_kv, cand.knobs.kv_cache_dtype):
        wrong.append(f"kv_cache_dtype={kv} where the plan has {planned_kv}: another KV pool, another candidate")
    if wrong:
        return LogCheck("engine_config", "fail", "; ".join(wrong))
    return LogCheck("engine_config", "ok", f"enforce_eager={eager}" + (f", kv_cache_dtype={kv}" if kv else "")
                    + ", as planned")


def _sglang_config(facts: LogFacts, cand: Candidate) -> LogCheck:
    """SGLang's 'server_args={...}' start-up line (entrypoints/engine.py): the KV cache dtype against the plan's, and
    eager mode where the line says `disable_cuda_graph` (0.5.23 folds the graph settings into a nested record)."""
    kv = facts.settings.get("kv_cache_dtype") if facts.engine == "sglang" else None
    if not kv:
        return LogCheck("engine_config", "absent", "no \"server_args={...'kv_cache_dtype': ...}\" line")
    planned, graphs = SGLANG_KV_CACHE_DTYPES[cand.knobs.kv_cache_dtype], facts.settings.get("cuda_graphs")
    wrong = ([f"kv_cache_dtype={kv} where the plan has {planned}: another KV pool, another candidate"]
             if not same_kv(kv, planned, cand.knobs.kv_cache_dtype) else [])
    if graphs is not None and graphs != cand.knobs.cuda_graphs:
        wrong.append(f"disable_cuda_graph={not graphs} where the plan has CUDA graphs "
                     + ("on" if cand.knobs.cuda_graphs else "off"))
    if wrong:
        return LogCheck("engine_config", "fail", "; ".join(wrong))
    return LogCheck("engine_config", "ok", f"kv_cache_dtype={kv}" + (f", CUDA graphs {'on' if graphs else 'off'}"
                                                                    if graphs is not None else
                                                                    " (CUDA-graph settings not in the line)")
                    + ", as planned")


def _version(facts: LogFacts, plan: Plan) -> LogCheck:
    want = plan.engine_versions.get("vllm") or engine_version("vllm")
    got = facts.version if facts.engine == "vllm" else None
    if not got:
        return LogCheck("engine_version", "absent", "no 'Initializing a V1 LLM engine (vX)' line")
    if got.split(".")[:2] != want.split(".")[:2]:
        return LogCheck("engine_version", "warn", f"vLLM {got} runs; the plan models {want}, whose flags, defaults "
                                                  "and memory accounting may differ")
    return LogCheck("engine_version", "ok", f"vLLM {got}")


def _bench(facts: LogFacts, cand: Candidate, plan: Plan) -> LogCheck:
    """bench.sh's result against the plan's figures for one replica at the planned concurrency: below 0.7x
    the tokens/s, or a mean TPOT over the workload's target, contradicts the plan."""
    got, tpot = facts.bench.get("tok_s"), facts.bench.get("tpot_ms")
    perf = cand.performance
    if got is None or not (perf and perf.throughput_tokens_per_s):
        return LogCheck("benchmark", "absent", "no benchmark result ('Output token throughput (tok/s):'): add "
                                               "bench.sh's output to compare its tok/s and TPOT with the plan")
    planned, shared = perf.throughput_tokens_per_s / cand.layout.replicas, int(facts.bench.get("replicas") or 1)
    words = (f"bench.sh: {got:,.0f} output tok/s" + (f" over {shared} replicas, {got / shared:,.0f} each," if shared > 1
                                                     else "") + f" against the plan's {planned:,.0f} for one")
    got /= shared                                 # through a balancer: each replica's share is what the plan prices
    words += f" ({got / planned:.2f}x)"
    if "concurrency" in facts.bench:      # bench.sh's own line: the load it ran at
        total = deployment_concurrency(plan.workload.concurrency, cand.knobs.max_num_seqs, cand.layout)
        ran, want = ceil(facts.bench["concurrency"] / shared), ceil(total / cand.layout.replicas)   # as bench.sh
        if ran != want:
            return LogCheck("benchmark", "warn", f"{words}, but at {ran} requests in flight per replica where the "
                            f"plan's figures are for {want}: run bench.sh with CONCURRENCY={want * shared} to hold it "
                            "against the plan (other loads are for `mla-plan calibrate`)")
    if tpot is not None and perf.tpot_s:
        words += f", mean TPOT {tpot:.1f} ms against {perf.tpot_s * 1e3:.1f} ms"
    limit_ms = max(plan.workload.tpot_ms, (perf.tpot_s or 0.0) * 1e3)   # a shortfall candidate's own TPOT
    over = tpot is not None and tpot > limit_ms
    if got < BENCH_LOW * planned or over:
        why = f"mean TPOT over the plan's {limit_ms:g} ms" if over else "well below the plan (it has been up to " \
            "23 % optimistic)"
        return LogCheck("benchmark", "fail", f"{words}: {why}; look for NET/Socket, eager mode and untuned MoE "
                                             "kernels above, and check bench.sh ran at the planned concurrency")
    return LogCheck("benchmark", "ok", words)
