"""What the memory-model tests (test_memory*.py) share: DeepSeek-V3's spec, GiB, an engine's default knobs
and the memory report of a layout with the engine's default memory fraction."""

from dataclasses import replace

from mla_planner.engines.memory_rules import default_memory_fraction, engine_default_knobs
from mla_planner.memory.report import memory_report
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.topology import load_topology

V3 = load_model("deepseek-v3").spec
GiB = 2**30


def knobs_for(engine, topo, **given):
    return engine_default_knobs(engine, V3, topo, **given)


def report(topo_name, layout, engine="vllm", spec=V3, **given):
    topo = load_topology(topo_name)
    knobs = engine_default_knobs(engine, spec, topo, **given)
    if "memory_fraction" not in given:
        knobs = replace(knobs, memory_fraction=default_memory_fraction(engine, spec, topo, layout, knobs))
    return memory_report(spec, topo, layout, knobs)
