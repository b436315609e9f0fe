"""A user's own vLLM / SGLang launch command, checked against the model, the cluster and the engines' rules.

sgl-project/sglang#3283 and #2794, ai-dynamo/dynamo#2109 (flag hygiene): flags people add to an already
block-FP8 DeepSeek checkpoint or "to be safe" that cost a crash or most of the speed. Each finding says why,
with its source, and what to do instead:
  eager mode            vLLM --enforce-eager, SGLang --disable-cuda-graph: the host dispatches every layer of every
                        step (priced by the step model: one request's time per token with and without graphs)
  host not overlapped   audit.lint_host: vLLM --no-async-scheduling, SGLang --disable-overlap-schedule: every decode
                        step waits for the scheduler's host work (priced: a step at the command's running-request cap
                        or the engine's default, perf/host.py)
  re-quantizing         --quantization on a checkpoint whose config.json already says how it is quantized
                        (sgl-project/sglang#3283: --quantization fp8 on DeepSeek-V3 segfaults; SGLang's AWQ
                        path: an explicit `awq` forces the slow kernels over awq_marlin, awq/awq.py)
  fp8_e5m2 KV           the MLA backends' FP8 cache is e4m3 (vLLM supported_kv_cache_dtypes; SGLang's DeepSeek
                        guide): --kv-cache-dtype fp8 (vLLM) / fp8_e4m3 (SGLang)
  backend x block size  backends.backend_problems / the engine's auto order (data/backends.yaml)
  layout                layout.layout_problems and engines.layouts.engine_layout_problem
  context length        --max-model-len / --context-length above the model's max_position_embeddings
  AMD GPU               audit.lint_rocm: the AITER switches, SGLang's own backend pick, DeepEP on ROCm
  the engine's parser  audit.lint_engine: every flag and value held to the release's own parser and start-up
                        rules (engines/parser), unknown flags with the nearest ones, variables it does not read
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mla_planner.audit.lint_engine import engine_findings, env_findings
from mla_planner.audit.lint_command import KV, Command
from mla_planner.audit.lint_model import model_findings
from mla_planner.audit.lint_devices import device_findings
from mla_planner.audit.lint_host import host_findings, parsed
from mla_planner.audit.lint_nodes import sglang_node_findings
from mla_planner.audit.lint_quant import quantization_findings
from mla_planner.audit.lint_rocm import rocm_findings
from mla_planner.audit.lint_sparse import sparse_findings
from mla_planner.core.errors import PlanError
from mla_planner.engines.backends import backend, backend_problems
from mla_planner.engines.layouts import engine_layout_problem
from mla_planner.engines.sparse import own_rows
from mla_planner.engines.parallel import a2a_library, uses_ep_all_to_all
from mla_planner.launch.a2a import DEFAULT_DISPATCH, SGLANG_BACKEND, VLLM_BACKEND
from mla_planner.perf.step import decode_step
from mla_planner.search.candidate_warnings import cross_node_tp_note, shared_nic_deepep_note
from mla_planner.search.attention_backend import Rejected, backend_and_block
from mla_planner.specs.calibration import Calibration
from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout, layout_problems, query_heads_per_rank
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

@dataclass(frozen=True)
class Finding:
    level: str          # error (the engine refuses, or it is broken) | warn (it runs, worse than it could)
    flag: str
    text: str


def _int(cmd: Command, key: str, default: int = 1) -> int:
    try:
        return int(cmd.values.get(key, default))
    except ValueError:
        raise PlanError(f"lint: {key} is {cmd.values[key]!r}, not a whole number") from None


def layout_of(cmd: Command, spec: ModelSpec) -> Layout:
    """The layout the flags ask for. vLLM: --data-parallel-size is DP attention for an MoE model, and its EP
    group, when enabled, is tp*dp. SGLang (launch/sglang.py): --tp-size is the whole group, tp*dp, and DP
    attention is --attn-dp-size (or the deprecated --enable-dp-attention with --dp-size); --dp-size alone is
    that many independent replicas; --moe-a2a-backend deepep spreads the experts over the whole group."""
    tp, pp, dcp, replicas = _int(cmd, "tp"), _int(cmd, "pp"), _int(cmd, "dcp"), 1
    if cmd.engine == "vllm":
        dp = _int(cmd, "dp")
        ep = tp * dp if "--enable-expert-parallel" in cmd.flags else 1
    else:
        dp = _sglang_attention_dp(cmd)
        replicas = 1 if dp > 1 or "dp" in cmd.values else _int(cmd, "dp_size")
        ep = tp if cmd.values.get("a2a") == "deepep" else _int(cmd, "ep")
        tp //= dp                 # whole: _sglang_parallel refuses the command before a layout is built otherwise
    sizes = {"tp": tp, "pp": pp, "dp": dp, "dcp": dcp, "ep": ep, "replicas (--dp-size)": replicas}
    if below := [f"{name} {value}" for name, value in sizes.items() if value < 1]:
        raise PlanError(f"lint: a parallel size must be at least 1: {', '.join(below)}")
    return Layout(tp=tp, pp=pp, dp=dp, ep=ep if spec.is_moe else 1, dcp=dcp, replicas=replicas)


def _sglang_attention_dp(cmd: Command) -> int:
    """SGLang's DP-attention ranks: --attn-dp-size, or the deprecated --enable-dp-attention with --dp-size."""
    if "dp" in cmd.values:
        return _int(cmd, "dp")
    return _int(cmd, "dp_size") if "--enable-dp-attention" in cmd.flags else 1


def _sglang_parallel(cmd: Command) -> list[Finding]:
    """What SGLang's own argument checks refuse before any layout is built."""
    out, tp, dp = [], _int(cmd, "tp"), _sglang_attention_dp(cmd)
    if "dp" in cmd.values and _int(cmd, "dp_size") > 1:
        out.append(Finding("error", "--attn-dp-size", "SGLang takes --attn-dp-size or --dp-size (with the "
                                                      "deprecated --enable-dp-attention), not both"))
    if min(tp, dp) < 1:
        return out + [Finding("error", "--tp-size", f"--tp-size {tp} and {dp} DP-attention ranks: both must be at "
                                                    "least 1")]
    if tp % dp:
        out.append(Finding("error", "--tp-size", f"--tp-size {tp} is SGLang's whole group (tp*dp): it must be a "
                                                 f"multiple of the {dp} DP-attention ranks"))
    return out


def lint(cmd: Command, spec: ModelSpec, topo: Topology, calib: Calibration) -> list[Finding]:
    """The engine's own parser and start-up rules and its environment first (audit/lint_engine), then what the
    planner knows that the engine does not check up front."""
    engine = cmd.engine
    own = [Finding(*f) for f in engine_findings(engine, cmd.args, cmd.env, spec, topo) + env_findings(engine, cmd.env)]
    try:
        out = _sglang_parallel(cmd) + [Finding(*f) for f in sglang_node_findings(cmd.values, topo.gpus_per_node)] \
            if engine == "sglang" else []
        layout = None if out else layout_of(cmd, spec)
    except PlanError as exc:   # a parallel size that is not a count: a finding (exit 1), as the engine refuses it
        out = [Finding("error", "engine", str(exc).removeprefix("lint: "))]
    if out:          # no layout to build; the engine's own parallel rules have said the same where they apply
        return own if any(f.level == "error" for f in own) else own + out
    out = own
    problems = layout_problems(layout, spec, topo.gpus_per_node, topo.total_gpus)
    out += [Finding("error", "layout", f"{layout.label}: {p}") for p in problems]
    per_rank = cmd.values.get("dense_tp") == "1"
    a2a = cmd.values.get("a2a", "")
    deepep = a2a.startswith(("deepep", "mori")) if a2a or engine == "sglang" else None   # the EP all-to-all given
    if not problems and (problem := engine_layout_problem(spec, topo, layout, engine, per_rank, deepep)):
        out.append(Finding("error", "layout", problem))
    out += [Finding(*f) for f in quantization_findings(cmd.engine, cmd.values.get("quant"), spec, topo.gpu)
            + rocm_findings(engine, cmd.env, cmd.values, spec, topo, layout)
            + device_findings(cmd, layout, topo.gpu, topo.gpus_per_node)]
    out += ([Finding(*f) for f in sparse_findings(engine, cmd.values, spec, topo.gpu, layout.dcp,
                                                  spec.num_attention_heads // layout.tp)] if own_rows(spec)
            else _kv_and_backend(cmd, topo, layout, query_heads_per_rank(spec, layout)))
    out += [Finding(*f) for f in model_findings(engine, cmd.flags, cmd.values, cmd.model, spec, cmd.env)]
    if eager_flag(cmd) and not problems:
        out.append(_eager(cmd, spec, topo, layout, calib))
    if not problems and not any(f.level == "error" for f in own):
        out += [Finding(*f) for f in host_findings(cmd, spec, topo, layout, calib, not eager_flag(cmd))]
    if not problems:
        deepep_used = deepep if deepep is not None else uses_ep_all_to_all(layout)
        notes = [cross_node_tp_note(layout, topo), shared_nic_deepep_note(layout, topo) if deepep_used else ""]
        out += [Finding("warn", "layout", n) for n in notes if n]
        if default_dispatch(layout, a2a):
            out.append(_default_a2a(engine, topo, a2a))
    return out + _ib_hca(cmd, topo, layout)


def default_dispatch(layout: Layout, a2a: str) -> bool:
    """DP attention with the experts over the whole stage on the engine's default expert dispatch (the a2a flag absent
    or naming that default), not the EP all-to-all the planner plans and its memory model prices there."""
    return uses_ep_all_to_all(layout) and a2a in ("", *(d for _, d, _ in DEFAULT_DISPATCH.values()))


def _default_a2a(engine: str, topo: Topology, a2a: str = "") -> Finding:
    """DP attention with the experts over the whole stage and no EP all-to-all named: the engine runs its default
    dispatch, not the all-to-all the planner plans and prices there (launch/a2a.py, perf.layer_comm)."""
    flag, default, where = DEFAULT_DISPATCH[engine]
    planned = {"vllm": VLLM_BACKEND, "sglang": SGLANG_BACKEND}[engine][a2a_library(topo.gpu)]
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    said = f"{flag} {a2a}: {name}'s default" if a2a else f"no {flag}: {name} runs its default"
    return Finding("warn", flag, f"{said}, {default} ({where}), which moves every "
                                 f"rank's tokens to every rank for the experts; the planner plans and prices {flag} "
                                 f"{planned} here, which sends each token to the ranks of its routed experts only")


def _ib_hca(cmd: Command, topo: Topology, layout: Layout) -> list[Finding]:
    """NCCL_IB_HCA against the topology's NICs, by the topology file's own rule (InterNode._hcas_match_nics),
    for an instance that spans nodes."""
    hca = cmd.env.get("NCCL_IB_HCA")
    if not hca or topo.inter_node is None or layout.instance_gpus <= topo.gpus_per_node:
        return []
    try:
        replace(topo.inter_node, ib_hca=hca)
    except ValueError as exc:
        msg = str(exc).removeprefix("ib_hca ")
        return [Finding("warn", "NCCL_IB_HCA", msg.replace("make them agree", f"{topo.name} is priced with "
                                                                 f"{topo.inter_node.nics_per_node} per node"))]
    return []


def eager_flag(cmd: Command) -> str:
    """The flag that turns decode CUDA graphs off ('' when none does): vLLM --enforce-eager; SGLang
    --disable-cuda-graph (deprecated), --disable-decode-cuda-graph, --cuda-graph-backend-decode disabled."""
    given = parsed(cmd) or {}       # as the engine's parser reads the words: a unique prefix like --enforce too
    if cmd.engine == "vllm":
        return "--enforce-eager" if "--enforce-eager" in cmd.flags or given.get("--enforce-eager") else ""
    for flag in ("--disable-cuda-graph", "--disable-decode-cuda-graph"):
        if flag in cmd.flags or given.get(flag):
            return flag
    return "--cuda-graph-backend-decode" if cmd.values.get("graph_decode") == "disabled" else ""


def _kv_and_backend(cmd: Command, topo: Topology, layout: Layout, heads: int) -> list[Finding]:
    out, raw = [], cmd.values.get("kv", "auto")
    if raw == "fp8_e5m2":
        out.append(Finding("error", "--kv-cache-dtype", "fp8_e5m2: the MLA backends' FP8 cache is e4m3; use "
                                                        + ("fp8" if cmd.engine == "vllm" else "fp8_e4m3")))
        return out
    kv = KV.get(raw)
    if kv is None:
        return out      # the engine's parser judges unknown values
    try:
        block = _int(cmd, "block", 0) or None
    except PlanError:       # not a count: the engine's parser has said so
        block = None
    name = cmd.values.get("backend")
    if name:
        try:     # vLLM reads the name case-insensitively (AttentionBackendEnum[value.upper()])
            b = backend(cmd.engine, name.upper() if cmd.engine == "vllm" else name)
        except PlanError as exc:
            return out + [Finding("error", "--attention-backend", str(exc))]
        out += [Finding("error", "--attention-backend", p) for p in backend_problems(b, topo.gpu, kv, layout.dcp, heads=heads)]
        if block and not b.accepts_block(block):
            # SGLang resets the page size its fixed-page backends need, with a warning (server_args overrides)
            level = "warn" if cmd.engine == "sglang" and b.block_sizes else "error"
            fix = (f"SGLang resets it to {b.block_sizes[0]}" if level == "warn" else "the engine refuses it")
            out.append(Finding(level, "block size", f"{b.name} does not take block size {block} "
                                                    f"({b.legal_block_sizes()}): {fix}"))
        return out
    try:      # the engine's own pick, as the plan makes it (tuning.backend_and_block)
        why = backend_and_block(cmd.engine, topo.gpu, kv, layout.dcp, block, heads)[2]
    except Rejected as exc:
        return out + [Finding("error", "block size" if block else "--kv-cache-dtype", str(exc))]
    return out + ([Finding("warn", "block size", f"block size {why}")] if "runs instead" in why else [])


def _eager(cmd: Command, spec: ModelSpec, topo: Topology, layout: Layout, calib: Calibration) -> Finding:
    """Priced: one request's decode step at 2k tokens of context with and without CUDA graphs."""
    kv = KV.get(cmd.values.get("kv", "auto"), "bf16")
    steps = [decode_step(spec, topo, layout, Knobs(engine=cmd.engine, kv_cache_dtype=kv, cuda_graphs=graphs),
                         1, 2048, calib).tpot_s * 1e3 for graphs in (True, False)]
    return Finding("warn", eager_flag(cmd), f"no CUDA graphs: one request decodes at {steps[1]:.1f} ms per token "
                                              f"instead of {steps[0]:.1f} (the step model); keep graphs on in "
                                              "production (ai-dynamo/dynamo#2109, sgl-project/sglang#2794)")
