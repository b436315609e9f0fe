"""Command-line values checked once for every command that takes them: lengths and the workload, knob
flags with their bounds, the memory fraction under each engine's own flag name, the KV dtype, the
pipeline layer split. Each raises PlanError (one `error:` line, exit 2) on a bad value."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import asdict
from math import inf
from typing import Optional

from mla_planner.cli.common import check_acceptance
from mla_planner.core.errors import PlanError
from mla_planner.engines.compressed_kv import is_compressed
from mla_planner.engines.compressed_pool import compressed_choice
from mla_planner.engines.memory_rules import default_memory_fraction, engine_default_knobs
from mla_planner.engines.parallel import uses_ep_all_to_all
from mla_planner.engines.profile import PROFILES
from mla_planner.engines.sparse import compressed_backend, is_sparse, sparse_choice
from mla_planner.memory.pp_split import split_problem
from mla_planner.specs.knobs import KV_DTYPE_CHOICES, MTP_ACCEPTANCE, Knobs, Workload
from mla_planner.specs.layout import Layout


FRACTION_FLAG = {name: p.fraction_flag for name, p in PROFILES.items()}
KV_CAPACITY_LABEL = "KV capacity (tokens per engine instance / DP rank, as the engine logs it)"
# Upper bounds on per-DP-rank knobs: far above any engine default (vLLM max-num-seqs 1024, SGLang 2048;
# batched tokens 8192-16384; block sizes <= 256), low enough that a typo cannot price a 10^14-row table.
UPPER_BOUNDS = {"--max-num-seqs": 65_536, "--max-num-batched-tokens": 1_048_576, "--block-size": 1024,
                "--cuda-graph-max-bs": 65_536}


def positive(flag: str, value: Optional[int]) -> Optional[int]:
    if value is not None and value < 1:
        raise PlanError(f"{flag} must be a positive integer, got {value}")
    return value


def bounded(flag: str, value: Optional[int]) -> Optional[int]:
    """A positive int not above UPPER_BOUNDS[flag] (None = the engine's default)."""
    positive(flag, value)
    if value is not None and value > UPPER_BOUNDS[flag]:
        raise PlanError(f"{flag} {value:,} is beyond any real deployment (at most {UPPER_BOUNDS[flag]:,})")
    return value


def graph_cap_choice(value: Optional[int], enforce_eager: bool) -> Optional[int]:
    """--cuda-graph-max-bs, bounded; refused with --enforce-eager (which captures no graphs)."""
    if enforce_eager and value is not None:
        raise PlanError("--cuda-graph-max-bs sizes CUDA graphs, and --enforce-eager captures none: give one")
    return bounded("--cuda-graph-max-bs", value)


def partition_choice(text: Optional[str], spec, layout: Layout) -> Optional[tuple[int, ...]]:
    """--pp-layer-partition "32,29" as the engines read it: one positive count per stage, summing to the layers."""
    if text is None:
        return None
    try:
        parts = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise PlanError(f"--pp-layer-partition must be comma-separated layer counts like 31,30, got '{text}'") from None
    problem = split_problem(spec, layout, Knobs(pp_layer_partition=parts))
    if problem:
        raise PlanError(f"--pp-layer-partition: {problem}")
    return parts


def kv_dtype_choice(text: str) -> str:
    """--kv-cache-dtype as memory, compare and plan take it: auto (= bf16; for a sparse-attention model kv_knobs
    resolves it to the engine's own default), bf16, fp8, fp8_ds_mla."""
    if text not in KV_DTYPE_CHOICES:
        raise PlanError(f"--kv-cache-dtype must be one of {', '.join(KV_DTYPE_CHOICES)}, got '{text}'")
    return KV_DTYPE_CHOICES[text]


def kv_knobs(spec, topo, layout: Layout, engine: str, kv_text: str, block_size: Optional[int]) -> tuple[dict, list]:
    """The cache knobs from --kv-cache-dtype and --block-size: for a sparse-attention model (DSA) as the engine
    resolves them on this GPU (engines/sparse.py: its default dtype, its backend and what "fp8" becomes there,
    64-token blocks), with the sentence that says so; else the dtype as given (auto = bf16)."""
    if is_compressed(spec):     # and the engine's V4 backend on this GPU, whose head padding the step prices
        cache, why = compressed_choice(engine, kv_dtype_choice(kv_text), kv_text, bounded("--block-size", block_size))
        return {**cache, "attention_backend": compressed_backend(engine, topo.gpu)["backend"]}, why
    if not is_sparse(spec):
        return dict(kv_cache_dtype=kv_dtype_choice(kv_text), block_size=bounded("--block-size", block_size)), []
    kv_dtype_choice(kv_text)      # a value the planner knows at all
    choice = sparse_choice(engine, spec, topo.gpu, kv_text, spec.num_attention_heads // layout.tp,
                           bounded("--block-size", block_size), layout.dcp)
    return dict(kv_cache_dtype=choice.kv_cache_dtype, block_size=choice.block_size,
                attention_backend=choice.backend), [choice.why]


def fraction_from_flags(engine: str, util: Optional[float], static: Optional[float]) -> Optional[float]:
    """The memory fraction the user gave under the engine's own flag name (None: the engine's default)."""
    if engine not in FRACTION_FLAG:
        raise PlanError(f"--engine must be vllm or sglang, got '{engine}'")
    if util is not None and static is not None:
        raise PlanError("give one of --gpu-memory-utilization (vLLM) and --mem-fraction-static (SGLang), not both")
    fraction = util if util is not None else static
    if fraction is not None:
        flag = "--gpu-memory-utilization" if util is not None else "--mem-fraction-static"
        if flag != FRACTION_FLAG[engine]:
            raise PlanError(f"{flag} is not a {engine} flag; with --engine {engine} use {FRACTION_FLAG[engine]}")
        if not 0 < fraction <= 1:
            raise PlanError(f"{flag} must be in (0, 1], got {fraction:g}")
    return fraction


def knobs_from_flags(spec, topo, layout: Layout, engine: str, util: Optional[float], static: Optional[float],
           given: dict, engine_version: Optional[str] = None) -> Knobs:
    """Engine defaults, the user's flags over them, then the memory fraction (given or the engine's, at the
    release modelled)."""
    fraction = fraction_from_flags(engine, util, static)
    knobs = engine_default_knobs(engine, spec, topo, layout.dp, uses_ep_all_to_all(layout), **given)
    if fraction is None:
        fraction = default_memory_fraction(engine, spec, topo, layout, knobs, engine_version)
    return Knobs(**{**asdict(knobs), "memory_fraction": fraction})


def parse_length(text: str, flag: str) -> tuple[int, int]:
    """`2048` (fixed) or `p50=1024,p90=4096,p99=8192` -> (typical = p50, longest = the highest percentile)."""
    try:
        if "=" not in text:
            value = int(text)
            if value < 1:
                raise ValueError
            return value, value
        pairs = [(float(k.strip().removeprefix("p")), int(v)) for k, v in (p.split("=") for p in text.split(","))]
        pct = dict(pairs)
        ordered = [pct[k] for k in sorted(pct)]
        if len(pct) != len(pairs) or 50 not in pct or min(ordered) < 1 or ordered != sorted(ordered) \
                or not all(0 < k <= 100 for k in pct):
            raise ValueError
    except ValueError:
        raise PlanError(f"{flag} '{text}': expected a positive token count or percentiles like "
                        "'p50=1024,p90=4096,p99=8192' (p50 required, and p99 or above, e.g. p99.9 or p100 for the "
                        "longest; each percentile once, lengths not decreasing)") from None
    if max(pct) < 99:
        raise PlanError(f"{flag} '{text}': give p99 too: the longest length sizes --max-model-len, and the engine "
                        f"refuses longer requests (p{max(pct):g} would turn away {100 - max(pct):g} % of them)")
    return pct[50], pct[max(pct)]


def workload_from(input_len: str, output_len: str, concurrency: Optional[int], request_rate: Optional[float],
                  ttft_ms: float, tpot_ms: float, prefix_hit_rate: float,
                  mtp_acceptance: float = MTP_ACCEPTANCE) -> Workload:
    inp, inp_max = parse_length(input_len, "--input-len")
    out, out_max = parse_length(output_len, "--output-len")
    if concurrency is not None and not 1 <= concurrency < 1e9:
        raise PlanError("--concurrency must be a positive number of requests, below a billion")
    for flag, value in (("--ttft-ms", ttft_ms), ("--tpot-ms", tpot_ms)):
        if not 0 < value < inf:
            raise PlanError(f"{flag} must be a positive, finite number of milliseconds, got {value:g}")
    if concurrency is not None and request_rate is not None:
        raise PlanError("give --concurrency or --request-rate, not both")
    if not 0 <= prefix_hit_rate < 1:
        raise PlanError("--prefix-hit-rate must be in [0, 1)")
    check_acceptance(mtp_acceptance)
    if request_rate is not None:
        if not 0 < request_rate < inf:
            raise PlanError("--request-rate must be positive (requests per second)")
        # Little's law: requests in flight = arrival rate x time in system (TTFT + output x TPOT at target)
        in_flight = request_rate * (ttft_ms + out * tpot_ms) / 1e3
        if not in_flight < 1e9:
            raise PlanError(f"--request-rate {request_rate:g}: implies more than a billion requests in flight")
        concurrency = concurrency or max(1, round(in_flight))
    return Workload(inp, out, inp_max, out_max, concurrency, request_rate, ttft_ms, tpot_ms, prefix_hit_rate,
                    mtp_acceptance)


def knob_args_of(engine: str, util: Optional[float], static: Optional[float], kv_cache_dtype: str,
                 block_size: Optional[int], max_model_len: Optional[int], max_num_seqs: Optional[int],
                 max_num_batched_tokens: Optional[int], mtp: bool, enforce_eager: bool) -> dict:
    """memory's knob options, checked (verify's --layout takes them: cli/verify.candidate_from_options)."""
    return dict(engine=engine, util=util, static=static, kv_cache_dtype=kv_dtype_choice(kv_cache_dtype),
                kv_text=kv_cache_dtype,
                block_size=positive("--block-size", block_size),
                max_model_len=positive("--max-model-len", max_model_len),
                max_num_seqs=positive("--max-num-seqs", max_num_seqs),
                max_num_batched_tokens=positive("--max-num-batched-tokens", max_num_batched_tokens),
                mtp=mtp, cuda_graphs=not enforce_eager)


HOST_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = re.compile(rf"(?=.{{1,253}}$){HOST_LABEL}(\.{HOST_LABEL})*")


def checked_head_address(text: Optional[str]) -> Optional[str]:
    """--head-address: an IPv4 address or a host name (RFC 1123 labels). Not a port (the scripts add their own:
    `host:80` became `host:80:5000`), and not IPv6, which the engines' `addr:port` flags would need bracketed."""
    if text is None:
        return None
    try:
        if ipaddress.ip_address(text).version == 4:
            return text
        raise PlanError(f"--head-address {text}: an IPv6 address is not supported (the engines' addr:port flags "
                        "would need it in brackets); give the head's host name or IPv4 address")
    except ValueError:
        pass
    if not HOST_NAME.fullmatch(text) or text.rsplit(".", 1)[-1].isdigit():   # 010.0.0.1, 10.0.0: not an IPv4
        raise PlanError(f"--head-address {text!r}: expected the head node's host name or IPv4 address, without a port")
    return text
