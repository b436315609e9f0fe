"""What an engine's log says by itself, read without a plan: the engine and its release, the KV pool it sized, the
settings it logged, the fused-MoE kernels it ran untuned, the transports NCCL chose, a start-up refusal, and
bench.sh's result (`mla-plan check-log` without --plan; with one, the same facts beside the checks).

Every number is read by a pattern that matches only what int() / float() accept, a bounded number of digits,
and is then held to a plausible range: a line whose number does not parse or is out of range is ignored with
a note, never a traceback. The formats, from the engines' own source (the wheels of vLLM 0.33.0, SGLang 0.5.23):
  vLLM    "vLLM server version %s, serving model %s", or the logo's "version %s" (entrypoints/common/startup.py:
          log_version_and_model; "vLLM API server version" in older releases); "Initializing a V1 LLM engine (v%s)
          with config: ... max_seq_len=, tensor_parallel_size=, pipeline_parallel_size=, data_parallel_size=, ...,
          enforce_eager=, kv_cache_dtype=, ..." (v1/engine/core.py:EngineCore.__init__, config/vllm.py:
          VllmConfig.__str__); "non-default args: {...}" (entrypoints/common/startup.py:log_non_default_args, the
          only line with block_size and gpu_memory_utilization, and only when they were set); "GPU KV cache size: %s
          tokens, Maximum concurrency for %s tokens per request: %.2fx" (v1/core/kv_cache_utils.py:
          update_kv_cache_capacity); "Using %s attention backend out of potential backends: %s." (platforms/cuda.py:
          CudaPlatformBase.get_attn_backend_cls); "Using default MoE config. Performance might be sub-optimal! Config
          file not found at %s" (model_executor/layers/fused_moe/fused_moe.py:get_moe_configs); the refusals of
          v1/core/kv_cache_planning.py:_check_enough_kv_cache_memory
  SGLang  "server_args={...}" (srt/entrypoints/engine.py:Engine.__init__, srt/server_args.py:ServerArgs.resolved_dict);
          "max_total_num_tokens=%d, chunked_prefill_size=, max_prefill_tokens=, max_running_requests=, context_len="
          (srt/managers/scheduler.py:Scheduler.init_model_worker); "KV Cache is allocated. dtype: %s, #tokens: %d, K
          size: ..." (srt/mem_cache/memory_pool.py:KVCache._finalize_allocation_log; "Post-capture KV sizing: KV cache
          allocated" from model_executor/model_runner_components/kv_pool_runtime.py:compute_post_capture_kv_resize);
          "Using default MoE kernel config. ..." (srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py:
          get_moe_configs); "KV pool holds %d tokens, fewer than --context-length %d" (srt/managers/tp_worker.py:
          TpModelWorker.get_worker_info); "Loaded weights leave no GPU memory for the KV cache" (srt/mem_cache/
          kv_cache_configurator.py:_profile_available_bytes); "Not enough memory. Please try to increase
          --mem-fraction-static." and "... leaves no room for the full KV pool ..." (srt/model_executor/
          pool_configurator.py: no pool at all, a V4 SWA cap that leaves none). SGLang does not log its release at start-up;
          `python3 -m sglang.check_env` prints "sglang: 0.5.23" (check_env.py:BaseEnv.check_env), read when present.
  NCCL    with NCCL_DEBUG=INFO: "NCCL version %s"; "Channel %02d/%d : %d[%d] -> %d[%d] via P2P/CUMEM|IPC|direct
          pointer|indirect/..." (src/transport/p2p.cc:p2pSendSetup), "... via SHM/%s/%s" (shm.cc:shmSendSetup),
          "... [send] via NET/%s/%d/GDRDMA" (net.cc:sendSetup); "Using network IB"; "NET/IB : Using [0]mlx5_0:1/IB"
  bench   "Output token throughput (tok/s):" and "Mean TPOT (ms):" (vllm/benchmarks/serve.py, sglang/bench_serving.py);
          bench.sh's own "mla-plan bench: REPLICAS=N CONCURRENCY=C" (the replicas behind the endpoint it loaded and
          the requests it kept in flight)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from mla_planner.audit.bench_results import bench_run_line

COUNT = r"(\d{1,3}(?:,\d{3}){1,5}|\d{1,15})(?![\d,.]?\w)"   # 1,616,640 or 1616640; never 1.5, 1,2, 7e9, 20 digits
REAL_BODY = r"(\d{1,12}(?:\.\d{1,12})?)"
REAL = REAL_BODY + r"(?![\w.])"                              # 4000.12; never 1.2.3, "." or "...", 1e400, 5nan
FRACTION = r"(\d(?:\.\d{1,20})?)"      # a logged fraction in full: SGLang's 0.965 x 0.85 is 0.8202499999999999
VERSION = r"v?(\d{1,4}\.\d{1,4}[\w.+\-]{0,40})"
MAX_TOKENS = 10**11         # no GPU pool holds this many tokens: a larger figure is a garbled line
MAX_RATE = 1e9              # output tok/s of one benchmark
MAX_MS = 1e7                # a mean TPOT of almost three hours
MAX_NOTES = 20

ENGINE_LINES = {
    "vllm": re.compile(r"Initializing a V1 LLM engine|vLLM (?:API )?server version|\bKV cache size: |non-default "
                       r"args: \{|Using default MoE config\b|attention backend out of potential backends"),
    "sglang": re.compile(r"server_args=|\bmax_total_num_tokens=|KV [Cc]ache (?:is )?allocated\.|Using default MoE "
                         r"kernel config|^sglang: \d", re.M)}
KV_MARK = {"vllm": re.compile(r"\bKV cache size: "), "sglang": re.compile(r"\bmax_total_num_tokens=")}
KV_WHAT = {"vllm": "a 'GPU KV cache size: N tokens' line", "sglang": "a 'max_total_num_tokens=N' line"}
KV_VALUE = {"vllm": re.compile(COUNT + " tokens"), "sglang": re.compile(COUNT)}
SGLANG_POOL = re.compile(r"(?<![Dd]raft )KV [Cc]ache (?:is )?allocated\. (?:dtype: [\w.]{1,30}, )?#tokens: ")
CONCURRENCY = re.compile(r"Maximum concurrency for ")
CONCURRENCY_VALUE = re.compile(COUNT + r" tokens per request: " + REAL_BODY + r"x(?!\w)")
VERSIONS = {"vllm": re.compile(r"Initializing a V1 LLM engine \(" + VERSION + r"\)|vLLM (?:API )?server version "
                               + VERSION + r"|^[^\n]{0,120}█[ \t]{1,8}version[ \t]{1,8}" + VERSION, re.M),
            "sglang": re.compile(r"^sglang: " + VERSION + r"[ \t]*$", re.M)}
NCCL_VERSION = re.compile(r"NCCL version " + VERSION)
DEFAULT_MOE = re.compile(r"Using default MoE (kernel )?config")
MOE_FILE = re.compile(r"E=\d{1,6},N=\d{1,7},device_name=[\w\-.]{1,80}?(?:,dtype=[\w.]{1,40})?"
                      r"(?:,block_shape=\[\d{1,6}, ?\d{1,6}\])?(?:,per_channel_quant=True)?(?:_down)?\.json")
NCCL_NETWORK = re.compile(r"Using network (IB|Socket)")
# "NET/IB : Using [0]mlx5_0:1/IB ...", "NET/IBext_v8 : Using ...", a channel "... via NET/IB/0/GDRDMA"
NCCL_IB_USED = re.compile(r"NET/IB\w{0,20}[ \t]{0,4}:[ \t]{0,4}Using\b|via NET/IB")
NCCL_SOCKET_USED = re.compile(r"NET/Socket[ \t]{0,4}:[ \t]{0,4}Using\b|via NET/Socket")
NCCL_VIA = re.compile(r"\] via (?:P2P/(direct pointer|CUMEM|MNNVL|IPC|indirect)[^\n]{0,20}?(/read)?(/CE)?[ \t\r]{0,4}$"
                      r"|(SHM)/(?:direct|CE)/(?:direct|CE)|NET/([\w\- ]{1,40}?)/\d{1,4}(?:\(\d{1,7}\))?(/GDRDMA)?)",
                      re.M)
BENCH = {"tok_s": (re.compile(r"Output token throughput \(tok/s\):[ \t]{0,200}"), MAX_RATE,
                   "an 'Output token throughput (tok/s):' line"),
         "tpot_ms": (re.compile(r"Mean TPOT \(ms\):[ \t]{0,200}"), MAX_MS, "a 'Mean TPOT (ms):' line")}
REFUSED = re.compile(r"No available memory for the cache blocks|KV cache is needed, which is larger than the available "
                     r"KV cache memory|Loaded weights leave no GPU memory for the KV cache|CUDA out of memory|"
                     r"torch\.OutOfMemoryError|Not enough memory\. Please try to increase --mem-fraction-static|"
                     r"leaves no room for the full KV pool")
SHORT_POOL = re.compile(r"KV pool holds (\d{1,15}) tokens, fewer than --context-length (\d{1,15})(?!\d)")
VLLM_BACKEND = re.compile(r"Using (\w{1,40}) (?:attention )?backend out of potential backends")
SEGMENTS = {"vllm": re.compile(r"Initializing a V1 LLM engine \([^)\n]{0,60}\) with config: |non-default args: \{"),
            "sglang": re.compile(r"server_args=(?:ServerArgs\(|\{)|\bmax_total_num_tokens=")}
VALUE = r"""(?:'([\w.\-/]{1,60})'|<\w{1,60}\.(\w{1,40}): [^>\n]{0,120}>|([\w.\-]{1,40}))"""
SETTING = re.compile(r"(?:'(\w{1,40})': |(?<![\w.'])(\w{1,40})=)" + VALUE)
# (engine's key) -> (neutral name, kind); the first source in the log wins
KEYS = {"tensor_parallel_size": ("tp", "int"), "tp_size": ("tp", "int"), "pipeline_parallel_size": ("pp", "int"),
        "pp_size": ("pp", "int"), "data_parallel_size": ("dp", "int"), "dp_size": ("dp", "int"),
        "decode_context_parallel_size": ("dcp", "int"), "dcp_size": ("dcp", "int"), "ep_size": ("ep", "int"),
        "max_seq_len": ("max_model_len", "int"), "max_model_len": ("max_model_len", "int"),
        "context_length": ("max_model_len", "int"), "context_len": ("max_model_len", "int"),
        "kv_cache_dtype": ("kv_cache_dtype", "str"), "block_size": ("block_size", "int"),
        "page_size": ("block_size", "int"), "gpu_memory_utilization": ("memory_fraction", "fraction"),
        "mem_fraction_static": ("memory_fraction", "fraction"), "attention_backend": ("attention_backend", "str"),
        "decode_attention_backend": ("attention_backend", "str"), "enforce_eager": ("cuda_graphs", "not"),
        "disable_cuda_graph": ("cuda_graphs", "not"), "enable_prefix_caching": ("prefix_caching", "bool"),
        "disable_radix_cache": ("prefix_caching", "not"), "quantization": ("quantization", "str"),
        "max_num_seqs": ("max_num_seqs", "int"), "max_running_requests": ("max_num_seqs", "int"),
        "disaggregation_mode": ("pd_role", "str"), "kv_role": ("pd_role", "str"),
        "attn_dp_size": ("attn_dp", "int"), "enable_dp_attention": ("dp_attention", "bool")}
INT_LIMIT = {"max_model_len": 10**9, "block_size": 10**6, "max_num_seqs": 10**7}   # others (the parallel sizes): 10**5


@dataclass(frozen=True)
class LogCheck:
    name: str
    status: str        # ok | warn | fail | absent (the log has no line to judge by)
    text: str


@dataclass
class LogFacts:
    engine: Optional[str] = None                  # "vllm" | "sglang"; None: neither's lines
    version: Optional[str] = None
    kv_tokens: dict[str, list[int]] = field(default_factory=lambda: {"vllm": [], "sglang": []})
    max_concurrency: Optional[float] = None       # vLLM's "Maximum concurrency for N tokens per request: Cx"
    settings: dict[str, object] = field(default_factory=dict)
    untuned_moe: int = 0                          # lines saying the engine runs a default fused-MoE config
    moe_files: list[str] = field(default_factory=list)   # the tuned files it looked for, by name
    nccl_version: Optional[str] = None
    nccl_ib: bool = False                         # NCCL runs over IB / RoCE between nodes
    nccl_socket: bool = False                     # ... or over TCP sockets
    transports: dict[str, int] = field(default_factory=dict)   # "P2P/CUMEM/read" -> channels logged
    bench: dict[str, float] = field(default_factory=dict)      # tok_s, tpot_ms: the last result in the log
    refused: list[str] = field(default_factory=list)           # the engine's start-up refusals, quoted
    short_pool: Optional[tuple[int, int]] = None  # SGLang: (pool tokens, context length) where the pool is shorter
    notes: list[str] = field(default_factory=list)

    def kv(self, engine: Optional[str] = None) -> list[int]:
        return self.kv_tokens.get(engine or self.engine or "", [])

    @property
    def recognised(self) -> bool:
        """Whether the log holds any line this reader knows (else it is not an engine, NCCL or bench.sh log)."""
        return bool(self.engine or self.nccl_version or self.nccl_ib or self.nccl_socket or self.transports
                    or self.bench or self.refused or self.notes)


def _message_start(text: str, at: int) -> int:
    """Where the message holding AT starts: after the log prefix ("ERROR ... ] ", "ValueError: ") on its line, so
    a quoted refusal keeps its figures (vLLM: "To serve at least one request with the models's max seq len
    (163840), (10.72 GiB KV cache is needed, ...")."""
    line = text.rfind("\n", 0, at) + 1
    ends = [i + len(mark) for mark in ("] ", "Error: ") if (i := text.rfind(mark, line, at)) >= 0]
    return max(ends, default=line)


def excerpt(text: str, start: int, width: int = 80) -> str:
    """The line from START, at most WIDTH characters, printable."""
    end = text.find("\n", start, start + width)
    piece = text[start:end if end >= 0 else start + width]
    return "".join(c if c.isprintable() else "?" for c in piece) + ("" if end >= 0 or len(piece) < width else "...")


def note(facts: LogFacts, words: str) -> None:
    if len(facts.notes) < MAX_NOTES:
        facts.notes.append(words)
    elif len(facts.notes) == MAX_NOTES:
        facts.notes.append("further lines that do not parse were ignored without a note")


def scan(text: str, facts: LogFacts, mark: re.Pattern, value: re.Pattern, parse: Callable[[re.Match], float],
         limit: float, what: str) -> list:
    """Every value after MARK: VALUE matched right there, parsed and within LIMIT, or a note that it was not."""
    found = []
    for m in mark.finditer(text):
        v = value.match(text, m.end())
        got = parse(v) if v else None
        if got is None or not 0 <= got <= limit:
            why = "out of range" if got is not None else "no number that parses"
            note(facts, f"ignored {what} ({why}): '{excerpt(text, m.start())}'")
        else:
            found.append(got)
    return found


def _bench_run(text: str, facts: LogFacts) -> None:
    """bench.sh's own line, its last run's (audit/bench_results.bench_run_line), or a note."""
    got, at = bench_run_line(text)
    if got:
        facts.bench["replicas"], facts.bench["concurrency"] = got
    elif at is not None:
        note(facts, f"ignored bench.sh's line (REPLICAS, CONCURRENCY: whole numbers from 1): '{excerpt(text, at)}'")


def count(m: re.Match, group: int = 1) -> int:
    return int(m.group(group).replace(",", ""))


def read_log(text: str) -> LogFacts:
    """Every fact the log holds; never raises on any text (a line it cannot read becomes a note)."""
    facts = LogFacts()
    hits = {engine: sum(1 for _ in zip(range(1000), p.finditer(text))) for engine, p in ENGINE_LINES.items()}
    if any(hits.values()):
        facts.engine = max(hits, key=lambda e: (hits[e], e == "vllm"))
        if all(hits.values()):
            note(facts, f"the log holds lines of both vLLM and SGLang; read as {facts.engine}'s (more lines)")
    for engine in KV_MARK:
        facts.kv_tokens[engine] = scan(text, facts, KV_MARK[engine], KV_VALUE[engine], count, MAX_TOKENS,
                                       KV_WHAT[engine])
    if not facts.kv_tokens["sglang"]:
        facts.kv_tokens["sglang"] = scan(text, facts, SGLANG_POOL, re.compile(COUNT), count, MAX_TOKENS,
                                         "a 'KV Cache is allocated' line")
    concurrency = scan(text, facts, CONCURRENCY, CONCURRENCY_VALUE, lambda m: float(m.group(2)), 1e9,
                       "a 'Maximum concurrency' line")
    facts.max_concurrency = min(concurrency) if concurrency else None
    for name, (mark, limit, what) in BENCH.items():
        got = scan(text, facts, mark, re.compile(REAL), lambda m: float(m.group(1)), limit, what)
        if got:
            facts.bench[name] = got[-1]
    _bench_run(text, facts)
    if facts.engine:
        m = VERSIONS[facts.engine].search(text)
        facts.version = next((g for g in m.groups() if g), None) if m else None
        _settings(text, facts)
    facts.untuned_moe = sum(1 for _ in DEFAULT_MOE.finditer(text))
    facts.moe_files = sorted({m.group(0) for m in MOE_FILE.finditer(text)})[:20] if facts.untuned_moe else []
    _nccl(text, facts)
    facts.refused = [excerpt(text, _message_start(text, m.start()), 240) for _, m in zip(range(5), REFUSED.finditer(text))]
    short = SHORT_POOL.search(text)
    facts.short_pool = (int(short.group(1)), int(short.group(2))) if short else None
    return facts


def _settings(text: str, facts: LogFacts) -> None:
    """The settings the engine logged, by the planner's knob names; the first line that gives one wins."""
    for seg in SEGMENTS[facts.engine].finditer(text):
        end = text.find("\n", seg.end(), seg.end() + 20000)
        for m in SETTING.finditer(text, seg.end(), end if end >= 0 else seg.end() + 20000):
            key = m.group(1) or m.group(2)
            if key in KEYS and KEYS[key][0] not in facts.settings:
                _setting(facts, key, m.group(3) or m.group(4) or m.group(5))
    backend = VLLM_BACKEND.search(text) if facts.engine == "vllm" else None
    if backend:
        facts.settings.setdefault("attention_backend", backend.group(1))
    if facts.engine == "sglang":
        _sglang_attention_dp(facts.settings)
    m = CONCURRENCY.search(text) if "max_model_len" not in facts.settings else None
    v = CONCURRENCY_VALUE.match(text, m.end()) if m else None
    if v and count(v) <= INT_LIMIT["max_model_len"]:
        facts.settings["max_model_len"] = count(v)


def _sglang_attention_dp(settings: dict) -> None:
    """SGLang's `dp` as the attention-DP size the planner counts: attn_dp_size where logged (0.5.23, whose dp_size
    counts router replicas: arg_groups/fields/parallel.py), else dp_size where enable_dp_attention is logged true
    (older releases) or absent, and 1 where it is logged false."""
    attn, dp_attention = settings.pop("attn_dp", None), settings.pop("dp_attention", None)
    if attn is not None:
        settings["dp"] = attn
    elif dp_attention is False and "dp" in settings:
        settings["dp"] = 1


def _setting(facts: LogFacts, key: str, raw: str) -> None:
    name, kind = KEYS[key]
    if raw == "None":
        return
    if kind in ("bool", "not"):
        if raw in ("True", "False"):
            facts.settings[name] = (raw == "True") != (kind == "not")
        return
    if kind == "str":
        facts.settings[name] = raw
        return
    number = re.fullmatch(COUNT if kind == "int" else FRACTION if kind == "fraction" else REAL, raw)
    value = (count(number) if kind == "int" else float(number.group(1))) if number else None
    if value is None or not 0 < value <= (1.0 if kind == "fraction" else INT_LIMIT.get(name, 10**5)):
        note(facts, f"ignored the logged {key}={raw[:40]} (not a plausible value)")
        return
    facts.settings[name] = value


def _nccl(text: str, facts: LogFacts) -> None:
    m = NCCL_VERSION.search(text)
    facts.nccl_version = m.group(1) if m else None
    facts.nccl_ib, facts.nccl_socket = nccl_network(text)
    for m in NCCL_VIA.finditer(text):
        p2p, read, ce, shm, net, gdr = m.groups()
        key = (f"P2P/{p2p}{read or ''}{ce or ''}" if p2p else "SHM" if shm else f"NET/{net}{gdr or ''}")
        facts.transports[key] = facts.transports.get(key, 0) + 1
    facts.transports = dict(sorted(facts.transports.items()))


def nccl_network(text: str) -> tuple[bool, bool]:
    """(IB or RoCE in use between nodes, TCP sockets in use): NCCL's own 'Using network' verdict where logged,
    else the plugin that says 'Using' devices ('NET/IB : No device found.' is IB missing, not IB used)."""
    chosen = {m.group(1) for m in NCCL_NETWORK.finditer(text)}
    ib = NCCL_IB_USED.search(text) is not None
    socket = "Socket" in chosen if chosen else NCCL_SOCKET_USED.search(text) is not None and not ib
    return ("IB" in chosen if chosen else ib), socket
