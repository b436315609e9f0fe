"""Will the command's own settings start? Weights, the engine's other terms and the KV pool at the command's
memory fraction, KV dtype, block size and --max-model-len, by the memory model `mla-plan memory` uses
(memory/accounting.evaluate): a layout whose weights exceed the GPU, or whose pool cannot hold one request of
--max-model-len, is refused by the engine at start-up (vLLM: "To serve at least one request with the models's
max seq len ... increase gpu_memory_utilization or decrease max_model_len", v1/core/kv_cache_utils.py; SGLang:
"Not enough memory", model_executor/pool_configurator.py). A fraction above the model's safe one is a risk,
not a refusal: a warning."""

from __future__ import annotations

from mla_planner.engines.sglang_defaults import sglang_reserve_words
from mla_planner.memory.accounting import evaluate
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

FRACTION_WORD = {"vllm": "--gpu-memory-utilization", "sglang": "--mem-fraction-static"}
CONTEXT_WORD = {"vllm": "--max-model-len", "sglang": "--context-length"}


DEFAULT_DISPATCH = (" (priced with the EP all-to-all's buffers, which the engine's default dispatch does not "
                    "allocate)")


def memory_findings(spec: ModelSpec, topo: Topology, layout: Layout, knobs: Knobs, fraction_given: bool,
                    default_dispatch: bool = False) -> list[tuple]:
    """(level, flag, text): each reason the memory model says the command does not fit (error), then its
    risks (warn), led by the command's fraction and capacity so the line can be checked against `memory`.
    `default_dispatch`: DP attention with EP over the engine's default dispatch, not the all-to-all the memory model
    prices (lint's a2a finding): a verdict that the all-to-all's buffers could decide is a warning saying so."""
    report = evaluate(spec, topo, layout, knobs)
    if not report.per_gpu:       # the layout cannot exist: lint's layout findings say why
        return []
    where = (f"{FRACTION_WORD[knobs.engine]} {knobs.memory_fraction:.3f}"
             + ("" if fraction_given else " (the engine's default)")
             + f", {knobs.kv_cache_dtype} KV, {CONTEXT_WORD[knobs.engine]} {knobs.max_model_len:,}")
    if knobs.memory_fraction <= 0 and not fraction_given:    # SGLang's own formula reserves more than the GPU holds
        return [("error", "memory", f"{where}: SGLang's own fraction is not positive: "
                 f"{sglang_reserve_words(topo.gpu, layout, knobs, spec)}, more than the GPU holds, so no pool is left; "
                 "give --mem-fraction-static, or a smaller --chunked-prefill-size")]
    if not report.fits:    # SGLang starts with a pool shorter than its context and caps requests: a warning here
        capped = [r for r in report.findings if r.code == "pool_below_context" and knobs.engine == "sglang"]
        weights_over = all(r.weights_bytes >= r.total_bytes * knobs.memory_fraction for r in report.per_gpu)
        unsure = [r for r in report.findings
                  if default_dispatch and not weights_over and r.code != "weights_exceed_gpu"]
        return [("warn", "memory", f"at {where}: {r.text}") if r in capped else
                ("warn", "memory", f"may not fit at {where}: {r.text}{DEFAULT_DISPATCH}") if r in unsure else
                ("error", "memory", f"does not fit at {where}: {r.text}") for r in report.findings if r.blocks]
    risks = [r.text for r in report.findings if not r.blocks]
    return [("warn", "memory", f"at {where}: {t}") for t in risks]
