"""Cross-flag rules of ``vllm serve``, each tied to the wheel file that enforces it.

A rule written as code (``if tp % dcp != 0``) is not interpreted
generically: each function here checks that the code the rule relies on is
still in the wheel (a known message or expression; it stops with a message
naming the check otherwise) and records that file as ``source``.  Values
(backend lists, dtypes, bounds, defaults) are always read out of the wheel.
"""

from __future__ import annotations

import ast
from typing import Any

from .evaluate import evaluate
from .symbols import SourceIndex
from .type_atoms import TypeAnalyzer
from .vllm_backends import attention_backend_rules, auto_priority, rocm_auto_priority
from .vllm_kwargs import ARG_UTILS, dataclass_fields

CACHE = "vllm.config.cache"
PARALLEL = "vllm.config.parallel"
SERVE = "vllm.entrypoints.cli.serve"
VLLM_CONFIG = "vllm.config.vllm"
SCHEDULER = "vllm.config.scheduler"
MODEL = "vllm.config.model"
# Error messages of the DP launch checks in EngineArgs.create_engine_config
DP_LAUNCH_NEEDLES = (
    "data_parallel_hybrid_lb is not applicable in headless mode",
    "requires \"\n                \"`--data-parallel-backend mp`",
    "must evenly divide the total",
    "`--node-rank` must \"",
    "`--data-parallel-external-lb` requires a data-parallel",
    "rank requires `--data-parallel-size-local",
    "`--data-parallel-hybrid-lb` requires",
)


def _require(text: str, needles: tuple[str, ...], what: str) -> None:
    if not all(n in text for n in needles):
        raise SystemExit(what)


def vllm_rules(idx: SourceIndex, ta: TypeAnalyzer) -> dict:
    rules: dict[str, Any] = {}
    rules["attention_backends"] = attention_backend_rules(idx)
    rules["attention_backend_auto_priority_mla"] = auto_priority(idx)
    rules["attention_backend_auto_priority_mla_rocm"] = rocm_auto_priority(idx)
    rules.update(cache_rules(idx, ta))
    psrc = idx.source_text(PARALLEL)
    _require(psrc, ("must be divisible by dcp_size", "tp % dcp != 0"), "tp/dcp check changed")
    rules["tp_divisible_by_dcp"] = {
        "source": idx.source_of(PARALLEL),
        "when": "prefill_context_parallel_size == 1",
        "otherwise": "dcp in (1, pcp, tp*pcp)",
        "message": "tp_size={tp} must be divisible by dcp_size={dcp}.",
    }
    rules.update(serve_rules(idx))
    rules.update(batch_rules(idx))
    rules["dp_launch"] = dp_launch_rule(idx)
    _require(psrc, ("is larger than the number of ", "self.nnodes > 1"), "world size vs GPU count check changed")
    rules["world_size_vs_gpus"] = {
        "source": idx.source_of(PARALLEL),
        "rule": "with no --distributed-executor-backend and --nnodes 1, a world size "
        "tp*pp*pcp (per DP rank) larger than the GPUs on the node -> "
        "'World size (N) is larger than the number of available GPUs (M) in this node'",
    }
    # default model when none is given
    mcls, _ = idx.find_class(MODEL, "ModelConfig")
    mf = dataclass_fields(idx, ta, mcls, MODEL)["model"]
    rules["default_model"] = {"source": idx.source_of(MODEL), "value": mf["default"]}
    return rules


def cache_rules(idx: SourceIndex, ta: TypeAnalyzer) -> dict:
    """Valid ``--kv-cache-dtype`` values (CacheDType) and ``--block-size`` bounds."""
    cd = evaluate(idx, ast.Name(id="CacheDType"), CACHE)
    _require(idx.source_text(CACHE), ("Invalid kv_cache_dtype",), "kv_cache_dtype validator changed")
    cache_cls, _ = idx.find_class(CACHE, "CacheConfig")
    bs = dataclass_fields(idx, ta, cache_cls, CACHE)["block_size"]
    return {
        "kv_cache_dtype": {
            "source": idx.source_of(CACHE),
            "valid": list(cd.values),
            "message": "Invalid kv_cache_dtype: {value!r}. Valid values are: [...]",
        },
        "block_size": {"source": idx.source_of(CACHE), "bounds": bs["bounds"]},
    }


def serve_rules(idx: SourceIndex) -> dict:
    """``vllm serve``: --headless with --api-server-count, and the DP load-balancing modes."""
    ssrc = idx.source_text(SERVE)
    _require(ssrc, ("cannot be ", "used with --headless"), "headless check changed")
    _require(ssrc, ("Cannot use more than one data parallel load balancing mode",), "DP LB check changed")
    return {
        "headless_api_server_count": {
            "source": idx.source_of(SERVE),
            "rule": "--headless with --api-server-count > 0 is rejected",
        },
        "dp_lb_modes": {
            "source": idx.source_of(SERVE),
            "modes": {
                "multi_port": ["--data-parallel-multi-port-external-lb"],
                "external": ["--data-parallel-external-lb", "--data-parallel-rank"],
                "hybrid": ["--data-parallel-hybrid-lb", "--data-parallel-start-rank (only when neither hybrid nor multi-port flag is given)"],
            },
            "rule": "at most one mode",
        },
    }


def batch_rules(idx: SourceIndex) -> dict:
    """CUDA-graph capture sizes, scheduler budgets and max_model_len."""
    _require(idx.source_text(VLLM_CONFIG), ("should be consistent with the max value of",),
             "cudagraph consistency check changed")
    rules: dict[str, Any] = {"cudagraph_capture_sizes_consistency": {
        "source": idx.source_of(VLLM_CONFIG),
        "rule": "if both --max-cudagraph-capture-size and --cudagraph-capture-sizes are "
        "given (and CUDA graphs are on), max_cudagraph_capture_size must equal the "
        "largest capture size (sizes above max_num_batched_tokens are dropped first)",
    }}
    _require(idx.source_text(SCHEDULER), ("self.max_num_batched_tokens < max_model_len", "not self.enable_chunked_prefill"),
             "scheduler check changed")
    rules["scheduler"] = {
        "source": idx.source_of(SCHEDULER),
        "rules": [
            "chunked prefill disabled and max_num_batched_tokens < max_model_len -> error",
            "max_num_batched_tokens < max_num_seqs -> error",
            "max_num_active_seqs > max_num_seqs -> error",
        ],
    }
    _require(idx.source_text(MODEL), ("than the derived max_model_len", "VLLM_ALLOW_LONG_MAX_MODEL_LEN"),
             "max_model_len check changed")
    rules["max_model_len"] = {
        "source": idx.source_of(MODEL),
        "rule": "max_model_len (not -1/auto) greater than the model's derived max is rejected "
        "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
    }
    return rules


def dp_launch_rule(idx: SourceIndex) -> dict:
    """Data-parallel launch checks in ``EngineArgs.create_engine_config``."""
    ausrc = idx.source_text(ARG_UTILS)
    for needle in DP_LAUNCH_NEEDLES:
        if needle not in ausrc:
            raise SystemExit(f"EngineArgs DP launch checks changed: {needle!r}")
    return {
        "source": idx.source_of(ARG_UTILS),
        "rules": [
            "--headless with --data-parallel-hybrid-lb -> error",
            "--nnodes > 1 requires --data-parallel-backend mp",
            "--nnodes > 1: nnodes must divide dp*pp*tp*pcp; 0 <= node_rank < nnodes",
            (
                "external LB (--data-parallel-external-lb / --data-parallel-rank) needs a rank "
                "(given, or inferred when nnodes > 1 and dp > 1 and nnodes % dp == 0) and "
                "--data-parallel-size-local 1 or unset"
            ),
            "--data-parallel-hybrid-lb without external LB requires --data-parallel-size-local",
        ],
    }
