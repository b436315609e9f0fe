"""Properties of emitted launch folders.

1. Random legal plans (layouts over every shipped topology, MLA models, random knobs the backend table
   allows) give engine commands that the real vLLM 0.33.0 / SGLang 0.5.23 option tables accept
   (mla_planner/engines/parser/), benchmark commands whose flags those versions define (test_launch_bench.py),
   and scripts bash can parse.
2. Hostile strings in every user-supplied field (model path, interface name, HCA list, head address)
   never escape quoting: the scripts are run against stub programs that record their argv and
   environment, and each value arrives as exactly the one word it was, with nothing else executed.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from mla_planner.engines.parser.check import check_command
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from launch_cases import STUB_HOST_IP, bash_syntax_ok, expand, install_stubs, make_plan, run_script, scripts
from test_launch_bench import bench_command, check_bench

from mla_planner.core.errors import PlanError
from mla_planner.engines.backends import usable_backends
from mla_planner.launch.build import build, launch_inputs
from mla_planner.launch.emit import emit_plan
from mla_planner.launch.placement import place
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import ENGINES, Knobs, Workload
from mla_planner.specs.layout import Layout, layout_problems
from mla_planner.specs.topology import builtin_topologies, load_topology

TOPOLOGIES = {name: load_topology(name) for name in builtin_topologies()}
MODELS = {name: load_model(name).spec for name in ("deepseek-v3", "deepseek-r1", "deepseek-v2-lite", "kimi-k2")}
POW2 = [1, 2, 4, 8, 16, 32]


@st.composite
def legal_plans(draw):
    topo = TOPOLOGIES[draw(st.sampled_from(sorted(TOPOLOGIES)))]
    spec = MODELS[draw(st.sampled_from(sorted(MODELS)))]
    engine = draw(st.sampled_from(ENGINES))
    total, per_node = topo.total_gpus, topo.gpus_per_node
    tp = draw(st.sampled_from([t for t in POW2 if t <= total and spec.num_attention_heads % t == 0]))
    dp = draw(st.sampled_from([d for d in POW2 if tp * d <= total]))
    stage = tp * dp
    eps = [1, stage] if engine == "vllm" else [e for e in POW2 if stage % e == 0]
    layout = Layout(tp=tp, dp=dp, ep=draw(st.sampled_from(eps)), pp=draw(st.integers(1, 4)),
                    dcp=draw(st.sampled_from([d for d in POW2 if tp % d == 0])))
    layout = replace(layout, replicas=draw(st.integers(1, max(1, total // layout.instance_gpus))))
    assume(not layout_problems(layout, spec, per_node, total))
    try:
        place(layout, topo)
    except PlanError:
        assume(False)
    if engine == "vllm" and layout.dp > 1 and layout.instance_gpus > per_node:
        assume(layout.tp * layout.pp <= per_node and per_node % (layout.tp * layout.pp) == 0)
    return topo, spec, engine, layout, draw(knobs_for(engine, topo, spec, layout))


@st.composite
def knobs_for(draw, engine, topo, spec, layout):
    kv = draw(st.sampled_from(["bf16", "fp8"])) if topo.gpu.has_fp8 else "bf16"
    usable = usable_backends(engine, topo.gpu, kv, layout.dcp)
    assume(usable)
    chosen = draw(st.sampled_from(usable)) if layout.dcp > 1 else draw(st.none() | st.sampled_from(usable))
    seqs = draw(st.integers(1, 512))
    return Knobs(engine=engine, block_size=draw(st.sampled_from((chosen or usable[0]).legal_block_sizes())),
                 kv_cache_dtype=kv, memory_fraction=draw(st.floats(0.5, 0.95)), max_num_seqs=seqs,
                 max_num_batched_tokens=draw(st.integers(max(seqs, 256), 65536)),
                 max_model_len=draw(st.integers(1024, spec.max_position_embeddings)),
                 attention_backend=chosen.name if chosen else None, prefix_caching=draw(st.booleans()),
                 cuda_graphs=draw(st.booleans()), mtp=draw(st.booleans()) and spec.num_nextn_predict_layers > 0)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(legal_plans(), st.sampled_from(["native", "ray"]),
       st.builds(Workload, input_len=st.integers(1, 32768), output_len=st.integers(1, 8192),
                 concurrency=st.none() | st.integers(1, 4096)))
def test_random_plans_give_commands_the_engines_accept(case, mode, workload):
    topo, spec, engine, layout, knobs = case
    multi_node = layout.instance_gpus > topo.gpus_per_node
    mode = mode if engine == "vllm" and multi_node else "native"
    plan = make_plan(topo, layout, knobs, workload, model=spec.name)
    commands = build(launch_inputs(plan, plan.candidates[0], mode), engine)
    assert sum(c.gpus for c in commands) == layout.total_gpus
    for c in commands:
        if c.runs_engine:
            assert check_command(c.engine_args, engine, topo.gpu.arch_id,
                                 model_max_len=spec.max_position_embeddings) == [], c.argv
    with tempfile.TemporaryDirectory() as tmp:
        emit_plan(plan, 1, engine, Path(tmp) / "out", mode=mode)
        assert all(bash_syntax_ok(p) for p in scripts(Path(tmp) / "out"))
        assert check_bench(bench_command(Path(tmp) / "out" / "bench.sh"), engine) == []


NASTY = ["$(touch PWNED)", "`touch PWNED`", "a; touch PWNED", "x' ; touch PWNED ; '", 'q" $(touch PWNED) "',
         "two words", "new\nline touch PWNED", "tab\there", "\\", "'", '"', "${HOME}", "*", "~root", "#hash",
         "a|b&c>d<e", "é \u2028 end", "!!", "--flag-like"]
hostile = st.sampled_from(NASTY) | st.text(
    alphabet=st.sampled_from(list(" '\"$`;&|<>()\\\n\t*?~#!{}[]=%,:/-_.aZ9é")) | st.characters(
        blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=16)
SCENARIOS = [("2x8xh100-ib", Layout(tp=8, pp=2), "vllm", "native"),
             ("2x8xh20-roce", Layout(tp=8, pp=2), "vllm", "ray"),
             ("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), "vllm", "native"),
             ("2x8xh200-ib", Layout(tp=1, dp=16, ep=16), "sglang", "native")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SCENARIOS), hostile, hostile, hostile, hostile)
@example(SCENARIOS[0], "$(touch PWNED)", "`touch PWNED`", "a; touch PWNED", "new\nline touch PWNED")
@example(SCENARIOS[3], "x' ; touch PWNED ; '", 'q" $(touch PWNED) "', "${HOME}", "two words")
def test_hostile_values_stay_single_words(scenario, model_path, ifname, hca, head):
    assume(not model_path.startswith("-"))
    topo_name, layout, engine, mode = scenario
    topo = TOPOLOGIES[topo_name]
    try:
        inter = replace(topo.inter_node, socket_ifname=ifname, ib_hca=hca)
    except ValueError:      # an HCA list the topology itself refuses (e.g. blank: 0 HCAs for 8 NICs) never gets here
        assume(False)
    plan = make_plan(replace(topo, inter_node=inter), layout, Knobs(engine=engine))
    commands = build(launch_inputs(plan, plan.candidates[0], mode, model_path), engine)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        install_stubs(tmp / "bin")
        emit_plan(plan, 1, engine, tmp / "out", mode=mode, model_path=model_path, head_address=head)
        values = {"HEAD_IP": head, "VLLM_HOST_IP": STUB_HOST_IP}
        for c in commands:
            calls = run_script(tmp / "out" / f"node-{c.node_rank}.sh", tmp / "bin", tmp / "log", {"HOME": str(tmp)})
            ran = [argv for argv, _ in calls if argv[0] == c.argv[0] and argv[1:2] == c.argv[1:2]]
            assert expand(c.argv, values) in ran
            env = next(e for argv, e in calls if argv == expand(c.argv, values))
            assert {k: env.get(k) for k in c.env} == c.env
            assert env["NCCL_SOCKET_IFNAME"] == ifname and env["NCCL_IB_HCA"] == hca
            if "VLLM_HOST_IP" in c.needs:
                assert ["ip", "-4", "-o", "addr", "show", "dev", ifname] in [argv for argv, _ in calls]
                assert env["VLLM_HOST_IP"] == STUB_HOST_IP
        bench = run_script(tmp / "out" / "bench.sh", tmp / "bin", tmp / "log", {"HOME": str(tmp)})
        assert model_path in bench[-1][0] and bench[-1][0][bench[-1][0].index(model_path) - 1] == "--model"
        assert not list(tmp.rglob("PWNED")) and not list(Path.cwd().glob("PWNED"))
