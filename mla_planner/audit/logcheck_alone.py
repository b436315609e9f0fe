"""`check-log` without a plan: what the log of a server the user launched themselves says by itself (the facts
logcheck_read.py finds), as the same ok / warn / fail / absent checks the plan's checks use, and the facts as
one JSON object.

Without a plan nothing can be held against a prediction, so what fails is only what is wrong whatever was
planned: the engine refusing to start (no memory left for the KV cache, CUDA out of memory). An untuned
fused-MoE kernel, NCCL on TCP sockets between nodes (fine on Ethernet, 4-20x slower on an InfiniBand or RoCE
fabric), a release other than the one the planner models, and an SGLang pool shorter than one full-length
request are warnings. A line that does not parse is a note.
"""

from __future__ import annotations

from mla_planner.audit.logcheck_read import LogCheck, LogFacts
from mla_planner.core.errors import PlanError
from mla_planner.engines.backends import engine_version
from mla_planner.engines.memory_rules import vllm_default_utilization
from mla_planner.engines.moe_configs import TUNE_OUTPUT, TUNE_SCRIPT, UNTUNED_LOG

NAME = {"vllm": "vLLM", "sglang": "SGLang"}
# the settings in the order they are shown, with each engine's own name for them
SHOWN = {"tp": ("tensor_parallel_size", "tp_size"), "pp": ("pipeline_parallel_size", "pp_size"),
         "dp": ("data_parallel_size", "attn_dp_size"), "dcp": ("decode_context_parallel_size", "dcp_size"),
         "ep": ("-", "ep_size"), "max_model_len": ("max_model_len", "context_length"),
         "kv_cache_dtype": ("kv_cache_dtype", "kv_cache_dtype"), "block_size": ("block_size", "page_size"),
         "memory_fraction": ("gpu_memory_utilization", "mem_fraction_static"),
         "attention_backend": ("attention backend", "attention_backend"), "cuda_graphs": ("cuda graphs", "cuda graphs"),
         "prefix_caching": ("enable_prefix_caching", "radix cache"), "max_num_seqs": ("max_num_seqs",
                                                                                    "max_running_requests"),
         "quantization": ("quantization", "quantization")}


def alone_checks(facts: LogFacts) -> list[LogCheck]:
    """The checks of a log read by itself, in a fixed order (docs/json.md)."""
    return [_version(facts), startup_check(facts), _kv(facts), _settings(facts), _moe(facts), _network(facts),
            _bench(facts)]


def facts_dict(facts: LogFacts) -> dict:
    """The facts as `--json` prints them under `facts` (docs/json.md)."""
    return {"engine": facts.engine, "engine_version": facts.version,
            "kv_cache_tokens": facts.kv(), "max_concurrency": facts.max_concurrency,
            "settings": {k: facts.settings[k] for k in SHOWN if k in facts.settings},
            "untuned_moe_lines": facts.untuned_moe, "untuned_moe_configs": facts.moe_files,
            "nccl": {"version": facts.nccl_version, "network": _net_name(facts), "transports": facts.transports},
            "benchmark": ({"output_tokens_per_s": facts.bench.get("tok_s"), "mean_tpot_ms": facts.bench.get("tpot_ms"),
                           "replicas": facts.bench.get("replicas"), "concurrency": facts.bench.get("concurrency")}
                          if facts.bench else None),
            "refused": facts.refused}


def _net_name(facts: LogFacts) -> str | None:
    return "IB" if facts.nccl_ib else "Socket" if facts.nccl_socket else None


def _version(facts: LogFacts) -> LogCheck:
    if not facts.engine:
        return LogCheck("engine_version", "absent", "no vLLM or SGLang start-up line: not an engine's log")
    name = NAME[facts.engine]
    if not facts.version:
        how = ("no 'vLLM server version' or 'Initializing a V1 LLM engine (vX)' line" if facts.engine == "vllm" else
               "SGLang does not log its release at start-up: add `python3 -m sglang.check_env` output to the log "
               "('sglang: X')")
        return LogCheck("engine_version", "absent", f"a {name} log; {how}")
    modelled = engine_version(facts.engine)
    if facts.version.split(".")[:2] != modelled.split(".")[:2]:
        return LogCheck("engine_version", "warn", f"{name} {facts.version} runs; mla-plan models {modelled}, whose "
                                                  "flags, defaults and memory accounting may differ")
    return LogCheck("engine_version", "ok", f"{name} {facts.version}")


def startup_check(facts: LogFacts) -> LogCheck:
    """The engine's own start-up refusals (vLLM _check_enough_kv_cache_memory, SGLang _profile_available_bytes,
    CUDA out of memory) fail; SGLang's warning that one full-length request does not fit warns."""
    if facts.refused:
        return LogCheck("startup", "fail", f"the engine stopped: '{facts.refused[0]}'; its message says what to "
                                           "change, and `mla-plan memory` prices the memory fraction, max_model_len "
                                           "and layout")
    if facts.short_pool:
        pool, context = facts.short_pool
        return LogCheck("startup", "warn", f"the KV pool holds {pool:,} tokens, fewer than the context length "
                                           f"{context:,}: one full-length request does not fit")
    if facts.kv():
        return LogCheck("startup", "ok", "the engine sized its KV pool (no start-up refusal logged)")
    return LogCheck("startup", "absent", "no KV-pool line and no refusal: the log ends before the engine started, "
                                         "or is not an engine's")


def _kv(facts: LogFacts) -> LogCheck:
    tokens = facts.kv()
    if not tokens:
        line = "'max_total_num_tokens=N'" if facts.engine == "sglang" else "'GPU KV cache size: N tokens'"
        return LogCheck("kv_cache", "absent", f"no readable {line} line")
    words = f"the engine holds {min(tokens):,} KV tokens"
    if len(tokens) > 1:
        words += f" (the smallest of {len(tokens)} pools: each engine core or DP rank logs its own)"
    if facts.max_concurrency is not None and "max_model_len" in facts.settings:
        words += (f"; {facts.max_concurrency:.2f}x concurrency at {facts.settings['max_model_len']:,} tokens per "
                  "request")
    return LogCheck("kv_cache", "ok", words)


def _settings(facts: LogFacts) -> LogCheck:
    column = 0 if facts.engine != "sglang" else 1
    shown = [f"{SHOWN[k][column]} {_fmt(facts.settings[k])}" for k in SHOWN if k in facts.settings]
    if not shown:
        line = ("'non-default args: {...}' or 'Initializing a V1 LLM engine ... with config' line"
                if facts.engine == "vllm" else "\"server_args={...}\" line")
        return LogCheck("engine_config", "absent", f"no {line}")
    default = _default_utilization(facts.version)
    unlogged = "" if facts.engine != "vllm" or "memory_fraction" in facts.settings else \
        (f" (vLLM logs gpu_memory_utilization and block_size only when set: the defaults are {default:g} and the "
         "backend's)")
    return LogCheck("engine_config", "ok", "logged: " + ", ".join(shown) + unlogged)


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _moe(facts: LogFacts) -> LogCheck:
    engine = facts.engine or "vllm"
    if not facts.untuned_moe:
        if not facts.kv():   # not a log of a started engine: its silence says nothing
            return LogCheck("moe_kernels", "absent", "no engine start-up lines to look for an untuned fused-MoE "
                                                     "kernel in")
        return LogCheck("moe_kernels", "ok", f"no '{UNTUNED_LOG[engine]}' warning")
    files = f" ({', '.join(facts.moe_files[:3])}{', ...' if len(facts.moe_files) > 3 else ''})" \
        if facts.moe_files else ""
    return LogCheck("moe_kernels", "warn", f"the engine runs untuned fused-MoE kernels: no tuned config for this "
                                           f"GPU and split{files}; tune with {TUNE_SCRIPT[engine]} from the "
                                           f"engine's source tree, {TUNE_OUTPUT[engine]} (`mla-plan plan` and "
                                           "`emit` give the exact command for a planned layout)")


def _network(facts: LogFacts) -> LogCheck:
    """By the channels NCCL logged where it logged them (a NET/ channel crosses nodes; a one-node run still names
    its network plugin, NET/Socket where no IB device is found, and never uses it), else by the plugin."""
    via = ", ".join(f"{k} ({n})" for k, n in facts.transports.items())
    seen = f"; NCCL channels: {via}" if via else ""
    sockets = ("NCCL runs over TCP sockets between nodes (NET/Socket): right on an Ethernet cluster, 4-20x slower "
               "collectives on an InfiniBand or RoCE fabric (check NCCL_IB_HCA, /dev/infiniband in the container, "
               "libibverbs)")
    net = [k for k in facts.transports if k.startswith("NET/")]
    if any(k.startswith("NET/Socket") for k in net):
        return LogCheck("network", "warn", sockets + seen)
    if net:
        return LogCheck("network", "ok", f"NCCL runs between nodes over {', '.join(net)}{seen}")
    if facts.transports:
        plugin = " (its network plugin is sockets, unused within a node)" if facts.nccl_socket else ""
        return LogCheck("network", "ok", f"NCCL within a node only{plugin}{seen}")
    if facts.nccl_socket:
        return LogCheck("network", "warn", sockets + " - if the instance spans nodes; NCCL_DEBUG=INFO's channel "
                                                   "lines ('via NET/...') say whether it does")
    if facts.nccl_ib:
        return LogCheck("network", "ok", "NCCL runs over InfiniBand / RoCE between nodes (NET/IB)")
    return LogCheck("network", "absent", "no NCCL transport line: start the engine with NCCL_DEBUG=INFO to see which "
                                         "transport NCCL chose (P2P, SHM, NET/IB, NET/Socket)")


def _bench(facts: LogFacts) -> LogCheck:
    if "tok_s" not in facts.bench:
        return LogCheck("benchmark", "absent", "no benchmark result ('Output token throughput (tok/s):'): add "
                                               "bench.sh's output to see its tok/s and TPOT")
    words = f"bench.sh: {facts.bench['tok_s']:,.0f} output tok/s"
    if facts.bench.get("replicas", 1) > 1:
        words += f" over {facts.bench['replicas']} replicas behind a balancer"
    if "tpot_ms" in facts.bench:
        words += f", mean TPOT {facts.bench['tpot_ms']:.1f} ms"
    if facts.bench["tok_s"] <= 0:    # every request failed, or none ran: the result measures nothing
        return LogCheck("benchmark", "warn", words + ": no output was produced (look at the failed requests and the "
                                                     "server's log)")
    return LogCheck("benchmark", "ok", words + " (with --plan, held against the plan's prediction)")


def _default_utilization(version) -> float:
    """vLLM's default fraction at the logged release (engines/memory_rules), or 0.33.0's where none was logged or it
    does not parse (a log is not the user's input to refuse)."""
    try:
        return vllm_default_utilization(version)
    except PlanError:
        return vllm_default_utilization()
