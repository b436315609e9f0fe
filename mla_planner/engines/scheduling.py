"""Whether an engine overlaps its host work with the GPU: the scheduler prepares step N+1 and takes in step N-1's
tokens while the GPU runs step N, so its CPU time costs a decode step nothing until it outlasts the GPU's
(perf/host.py prices both cases).

vLLM: async scheduling arrived as an opt-in (`--async-scheduling`, vllm-project/vllm#19970, v0.10) and is on by
default from v0.14.0 (release notes: "Async scheduling is now enabled by default", #27614), then not with pipeline
parallelism; async scheduling with PP followed (#32359, #32618; vLLM's advisory GHSA-v97p-wpxp-px84 dates the V1
runner's async + PP from 0.16.0), and in 0.33 the V2 model runner keeps it on for every layout the planner emits
(config/vllm.py: off only for pooling models, ROCm DeepEP high-throughput DBO, some drafters on the V1 runner).
`--no-async-scheduling` turns it off, and so does the V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0) with pipeline
parallelism.

SGLang: the overlap ("zero-overhead") scheduler is on by default from v0.4 (lmsys.org/blog/2024-12-04-sglang-v0-4).
With pipeline parallelism SGLang 0.5.23 sets --disable-overlap-schedule (arg_groups/overrides.py
_pipeline_parallel_overlap_disable) but runs its own loop, which processes a micro-batch's results while the next
one computes (managers/scheduler_pp_mixin.py event_loop_pp), so its host work overlaps there too.
`--disable-overlap-schedule` turns it off.

`overlaps_host` is exact for the releases the planner targets and by release alone before them; older releases had
more exceptions it does not ask about: SGLang v0.4.0 turned the overlap off under DP attention (server_args.py) and
with its first speculative-decoding worker, vLLM before v0.14.0 turned async scheduling off with EAGLE / MTP drafting
(#31998) and its old Ray executor refused it with PP (#40084).
"""

from __future__ import annotations

from typing import Optional

from mla_planner.engines.memory_rules import parse_version

VLLM_ASYNC_DEFAULT = (0, 14, 0)      # vLLM v0.14.0: async scheduling on by default, pipeline parallelism excepted
VLLM_ASYNC_WITH_PP = (0, 16, 0)      # vLLM 0.16.0: async scheduling with pipeline parallelism
SGLANG_OVERLAP_DEFAULT = (0, 4, 0)   # SGLang v0.4: the overlap scheduler on by default
OFF_FLAGS = {"vllm": "--no-async-scheduling", "sglang": "--disable-overlap-schedule"}


def overlaps_host(engine: str, version: Optional[str] = None, pp: int = 1) -> bool:
    """True where `engine` at `version` (None: the release the planner targets) runs its host work beside the
    GPU's by default for a layout with `pp` pipeline stages."""
    if version is None:
        return True
    v = parse_version(version)
    if engine == "sglang":
        return v >= SGLANG_OVERLAP_DEFAULT
    return v >= (VLLM_ASYNC_WITH_PP if pp > 1 else VLLM_ASYNC_DEFAULT)
