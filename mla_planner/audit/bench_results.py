"""bench.sh's result files read: vLLM's `vllm bench serve --save-result` JSON (vllm/benchmarks/serve.py: `model_id`,
`max_concurrency`, `mean_tpot_ms`, `completed`, `failed`, `total_input_tokens`, `total_output_tokens`, the --metadata
it was given, and `endpoint_type`, which only vLLM's writes) and SGLang's `sglang.benchmark.serving --output-file` JSONL
(sglang/benchmark/serving.py: `backend` "sglang", `max_concurrency`, `mean_tpot_ms`, ..., `tag`, `server_info` with
the server's `model_path`). bench.sh names in each the GPU it ran on (`mla_plan_gpu=NAME`) and the replicas behind the
endpoint it loaded (`mla_plan_replicas=N`: a balancer), in vLLM's metadata or SGLang's tag; every number is checked
before it is used, and a file that is not such a result is one error line (audit/calibrate.py fits them)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import ceil, isfinite

from mla_planner.core.errors import InputError, PlanError
from mla_planner.core.files import parse_user_data
from mla_planner.launch.command import DEPLOYMENT_TAG, GPU_TAG, REPLICAS_TAG

MAX_CONCURRENCY = 1_000_000
BENCH_RUN = re.compile(r"mla-plan bench: REPLICAS=(\S{0,20}) CONCURRENCY=(\S{0,20})")   # what bench.sh echoes


@dataclass(frozen=True)
class BenchRun:
    path: str
    engine: str
    model: str | None
    gpu: str | None
    concurrency: int
    input_len: int
    output_len: int
    mean_tpot_s: float
    prompts: int = 0                        # the requests the run completed (on one replica)
    mean_ttft_s: float | None = None        # where the result gives it
    replicas: int | None = None             # behind the endpoint bench.sh loaded (REPLICAS: a balancer); None: unsaid
    failed: int = 0                         # requests the benchmark counted as failed (vLLM's `failed`)
    completed: int = 0                      # requests it completed, over every replica


MAX_COUNT = 10**15      # above any benchmark's token total or TPOT in ms; a bigger number is not a measurement


def read_bench(path: str, text: str) -> list[BenchRun]:
    """The bench.sh results `text` (read from `path`) holds: one JSON object, or one per line of a JSONL file."""
    jsonl = path.endswith(".jsonl")
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()] if jsonl else [(0, text)]
    if not lines or not text.strip():
        raise PlanError(f"{path}: empty: not a vLLM or SGLang benchmark result")
    records = []
    for number, line in lines:
        where = f"{path} line {number}" if jsonl else path
        try:
            record = parse_user_data(line, path, as_json=True)
        except InputError as exc:
            raise PlanError(f"{where}: not a vLLM or SGLang benchmark result ({exc.message})") from None
        if not isinstance(record, dict):
            raise PlanError(f"{where}: not a vLLM or SGLang benchmark result (a JSON object)")
        records.append((where, record))
    return [_run(path, where, r) for where, r in records]


def _run(path: str, where: str, data: dict) -> BenchRun:
    """One result record (`where`: the file, and its line in a JSONL file)."""
    tag = dict(p.split("=", 1) for p in str(data.get("tag") or "").split(",") if "=" in p)   # SGLang: bench.sh's --tag
    if deployment := data.get(DEPLOYMENT_TAG) or tag.get(DEPLOYMENT_TAG):
        raise PlanError(f"{where}: measured behind the router of disaggregated deployment {deployment}; calibrate "
                        "fits one aggregated candidate, not a prefill/decode deployment")
    if "endpoint_type" in data:
        engine, model, gpu, replicas = "vllm", data.get("model_id"), data.get(GPU_TAG), data.get(REPLICAS_TAG)
    elif str(data.get("backend", "")).startswith("sglang"):
        info = data.get("server_info") if isinstance(data.get("server_info"), dict) else {}
        engine, model, gpu, replicas = "sglang", info.get("model_path"), tag.get(GPU_TAG), tag.get(REPLICAS_TAG)
    else:
        raise PlanError(f"{where}: neither vLLM's `vllm bench serve --save-result` JSON nor SGLang's "
                        "`sglang.benchmark.serving --output-file` JSONL")
    fields = {}
    for name in ("max_concurrency", "completed", "total_input_tokens", "total_output_tokens", "mean_tpot_ms"):
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_COUNT or \
                not isfinite(value) or (name != "mean_tpot_ms" and value != int(value)):
            what = ("a positive " + ("number of milliseconds" if name == "mean_tpot_ms" else "whole number")
                    + f" below {MAX_COUNT:.0e}")
            shown = ("missing" if name not in data else "null" + (" (a run without --max-concurrency, which bench.sh "
                                                                  "always sets)" if name == "max_concurrency" else "")
                     ) if value is None else repr(value)
            raise PlanError(f"{where}: {name} is {shown}, expected {what}")
        fields[name] = value
    if fields["max_concurrency"] > MAX_CONCURRENCY:
        raise PlanError(f"{where}: max_concurrency {fields['max_concurrency']} is not a benchmark bench.sh runs")
    for name, value in (("model", model), ("GPU", gpu)):
        if value is not None and not isinstance(value, str):
            raise PlanError(f"{where}: the {name} it names is {value!r}, expected a string")
    if replicas is not None and (isinstance(replicas, bool) or not re.fullmatch(r"[0-9]{1,6}", str(replicas))
                                 or not 0 < int(replicas) <= 10**5):
        raise PlanError(f"{where}: {REPLICAS_TAG} is {replicas!r}, expected a positive whole number (bench.sh's "
                        "REPLICAS)")
    failed = data.get("failed", 0)
    if isinstance(failed, bool) or not isinstance(failed, int) or not 0 <= failed <= MAX_COUNT:
        raise PlanError(f"{where}: failed is {failed!r}, expected a whole number of requests")
    done = int(fields["completed"])
    for name in ("total_input_tokens", "total_output_tokens"):   # a mean length under a token prices nothing
        if fields[name] < done:
            raise PlanError(f"{where}: {name} {fields[name]:,} over {done:,} completed requests is under one token a "
                            "request: not a result the plan's workload can be held against")
    ttft = data.get("mean_ttft_ms")
    if ttft is not None and (isinstance(ttft, bool) or not isinstance(ttft, (int, float)) or not isfinite(ttft)
                             or not 0 < ttft <= MAX_COUNT):
        raise PlanError(f"{where}: mean_ttft_ms is {ttft!r}, expected a positive number of milliseconds")
    shared = int(replicas or 1)    # through a balancer: each replica runs its share of the load
    return BenchRun(path, engine, model, gpu, ceil(int(fields["max_concurrency"]) / shared),
                    round(fields["total_input_tokens"] / done), round(fields["total_output_tokens"] / done),
                    fields["mean_tpot_ms"] / 1e3, ceil(done / shared), ttft / 1e3 if ttft is not None else None,
                    int(replicas) if replicas is not None else None, failed, done)


def bench_run_line(text: str) -> tuple[tuple[int, int] | None, int | None]:
    """((replicas, requests in flight) from the last line bench.sh echoes before its run, 'mla-plan bench: REPLICAS=N
    CONCURRENCY=C', or None where either is not a whole number from 1; where that line starts, None without one)."""
    runs = list(BENCH_RUN.finditer(text))
    if not runs:
        return None, None
    got = [int(g) if g.isdigit() and 0 < int(g) <= MAX_CONCURRENCY else None for g in runs[-1].groups()]
    return (None if None in got else (got[0], got[1])), runs[-1].start()
