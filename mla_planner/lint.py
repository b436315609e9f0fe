"""A user's own vLLM / SGLang launch command, checked against the model, the cluster and the engines' rules.

USER_PROBLEMS.md problem 11 (and G, "flag hygiene"): flags people add to an already block-FP8 DeepSeek
checkpoint or "to be safe" that cost a crash or most of the speed. Each finding says why, with its source,
and what to do instead:
  eager mode            vLLM --enforce-eager, SGLang --disable-cuda-graph: every decode kernel pays a CPU
                        launch (priced by the step model: one request's time per token with and without graphs)
  re-quantizing         --quantization on a checkpoint whose config.json already says how it is quantized
                        (sgl-project/sglang#3283: --quantization fp8 on DeepSeek-V3 segfaults; SGLang's AWQ
                        path: an explicit `awq` forces the slow kernels over awq_marlin, awq/awq.py)
  fp8_e5m2 KV           the MLA backends' FP8 cache is e4m3 (vLLM supported_kv_cache_dtypes; SGLang's DeepSeek
                        guide): --kv-cache-dtype fp8 (vLLM) / fp8_e4m3 (SGLang)
  backend x block size  backends.backend_problems / the engine's auto order (data/backends.yaml)
  layout                layout.layout_problems and engine_layouts.engine_layout_problem
  context length        --max-model-len / --context-length above the model's max_position_embeddings
Flags this module does not know are left alone: the engines' own parsers judge them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .backends import backend, backend_problems, usable_backends
from .calibration import Calibration
from .engine_layouts import engine_layout_problem
from .errors import PlanError
from .knobs import Knobs
from .layout import Layout, layout_problems
from .spec import ModelSpec
from .step import decode_step
from .topology import Topology

# flag -> the field it sets, per engine (aliases the engines accept: vllm/engine/arg_utils.py, SGLang server_args.py)
FIELDS = {
    "vllm": {"--tensor-parallel-size": "tp", "-tp": "tp", "--pipeline-parallel-size": "pp", "-pp": "pp",
             "--data-parallel-size": "dp", "-dp": "dp", "--decode-context-parallel-size": "dcp", "-dcp": "dcp",
             "--kv-cache-dtype": "kv", "--block-size": "block", "--attention-backend": "backend",
             "--max-model-len": "max_len", "--quantization": "quant", "-q": "quant", "--model": "model"},
    "sglang": {"--tp-size": "tp", "--tp": "tp", "--pp-size": "pp", "--dp-size": "dp_size", "--dp": "dp_size",
               "--attn-dp-size": "dp", "--ep-size": "ep", "--ep": "ep", "--kv-cache-dtype": "kv",
               "--page-size": "block", "--attention-backend": "backend", "--context-length": "max_len",
               "--quantization": "quant", "--model-path": "model", "--model": "model"},
}
EAGER = {"vllm": "--enforce-eager", "sglang": "--disable-cuda-graph"}
BOOLEAN = {"--enforce-eager", "--disable-cuda-graph", "--enable-expert-parallel", "--enable-dp-attention",
           "--trust-remote-code", "--enable-prefix-caching", "--headless", "--enable-dp-lm-head"}
KV = {"auto": "bf16", "bfloat16": "bf16", "bf16": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_ds_mla": "fp8_ds_mla"}


@dataclass(frozen=True)
class Finding:
    level: str          # error (the engine refuses, or it is broken) | warn (it runs, worse than it could)
    flag: str
    text: str


@dataclass
class Command:
    engine: str
    model: str | None
    values: dict = field(default_factory=dict)     # FIELDS' names -> the flag's value (str)
    flags: set = field(default_factory=set)         # every --flag given


def parse_command(words: list[str]) -> Command:
    """`vllm serve MODEL ...`, `python -m vllm.entrypoints.openai.api_server --model M ...` or
    `python -m sglang.launch_server --model-path M ...` (also `sglang serve`)."""
    text = " ".join(words[:4])
    engine = ("vllm" if "vllm" in text else "sglang" if "sglang" in text else None)
    if engine is None:
        raise PlanError("lint: expected a vLLM or SGLang launch command after --, like "
                        "`vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 ...`")
    start = next((i + 1 for i, w in enumerate(words) if w == "serve" or w.startswith(("vllm.", "sglang."))), 1)
    cmd, rest = Command(engine, None), words[start:]
    if engine == "vllm" and rest and not rest[0].startswith("-"):
        cmd.model, rest = rest[0], rest[1:]
    i = 0
    while i < len(rest):
        word = rest[i]
        if not word.startswith("-"):
            i += 1
            continue
        flag, _, value = word.partition("=")
        cmd.flags.add(flag)
        if not value and flag not in BOOLEAN and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value, i = rest[i + 1], i + 1
        if flag in FIELDS[engine]:
            cmd.values[FIELDS[engine][flag]] = value
        i += 1
    cmd.model = cmd.values.get("model", cmd.model)
    return cmd


def _int(cmd: Command, key: str, default: int = 1) -> int:
    try:
        return int(cmd.values.get(key, default))
    except ValueError:
        raise PlanError(f"lint: {key} is {cmd.values[key]!r}, not a whole number") from None


def layout_of(cmd: Command, spec: ModelSpec) -> Layout:
    """The layout the flags ask for. vLLM: --data-parallel-size is DP attention for an MoE model, and its EP
    group, when enabled, is tp*dp. SGLang (launch/sglang.py): --tp-size is the whole group, tp*dp, and DP
    attention is --attn-dp-size (or the deprecated --enable-dp-attention with --dp-size); --dp-size alone is
    that many independent replicas."""
    tp, pp, dcp, replicas = _int(cmd, "tp"), _int(cmd, "pp"), _int(cmd, "dcp"), 1
    if cmd.engine == "vllm":
        dp = _int(cmd, "dp")
        ep = tp * dp if "--enable-expert-parallel" in cmd.flags else 1
    else:
        attention_dp = "--enable-dp-attention" in cmd.flags or "dp" in cmd.values
        dp = _int(cmd, "dp", _int(cmd, "dp_size")) if attention_dp else 1
        replicas = 1 if attention_dp else _int(cmd, "dp_size")
        if tp % dp:
            raise PlanError(f"lint: --tp-size {tp} (SGLang's whole group, tp*dp) is not a multiple of the "
                            f"{dp} DP-attention ranks")
        tp, ep = tp // dp, _int(cmd, "ep")
    return Layout(tp=tp, pp=pp, dp=dp, ep=ep if spec.is_moe else 1, dcp=dcp, replicas=replicas)


def lint(cmd: Command, spec: ModelSpec, topo: Topology, calib: Calibration) -> list[Finding]:
    layout, engine, out = layout_of(cmd, spec), cmd.engine, []
    problems = layout_problems(layout, spec, topo.gpus_per_node, topo.total_gpus)
    out += [Finding("error", "layout", f"{layout.label}: {p}") for p in problems]
    if not problems and (problem := engine_layout_problem(spec, topo, layout, engine)):
        out.append(Finding("error", "layout", problem))
    out += _quantization(cmd, spec) + _kv_and_backend(cmd, topo, layout)
    max_len = _int(cmd, "max_len", 0)
    if max_len > spec.max_position_embeddings:
        out.append(Finding("error", "max_len", f"{max_len:,} tokens is above {spec.name}'s "
                                               f"max_position_embeddings ({spec.max_position_embeddings:,})"))
    if EAGER[engine] in cmd.flags and not problems:
        out.append(_eager(cmd, spec, topo, layout, calib))
    return out


def _quantization(cmd: Command, spec: ModelSpec) -> list[Finding]:
    quant = cmd.values.get("quant")
    if quant is None:
        return []
    stored = {"fp8": "block-FP8", "int4": "int4"}.get(spec.weight_dtype) or (
        "int4 experts" if spec.expert_dtype == "int4" else None)
    if stored is None:
        return [Finding("warn", "--quantization", f"{quant} quantizes a BF16 checkpoint at load: the plan prices "
                                                  "the checkpoint as stored (bf16); plan with a quantized one")]
    if spec.weight_dtype == "int4" and quant in ("awq_marlin", "marlin"):
        return []
    why = ("an explicit awq skips the Marlin kernels, layers/quantization/awq" if spec.weight_dtype == "int4" else
           "sgl-project/sglang#3283: re-quantizing the FP8 DeepSeek-V3 crashed")
    return [Finding("error", "--quantization", f"the checkpoint is already {stored} (its config.json says so, and "
                                               f"the engine reads it): drop --quantization {quant} ({why})")]


def _kv_and_backend(cmd: Command, topo: Topology, layout: Layout) -> list[Finding]:
    out, raw = [], cmd.values.get("kv", "auto")
    if raw == "fp8_e5m2":
        out.append(Finding("error", "--kv-cache-dtype", "fp8_e5m2: the MLA backends' FP8 cache is e4m3; use "
                                                        + ("fp8" if cmd.engine == "vllm" else "fp8_e4m3")))
        return out
    kv = KV.get(raw)
    if kv is None:
        return out      # the engine's parser judges unknown values
    block = _int(cmd, "block", 0) or None
    name = cmd.values.get("backend")
    if name:
        try:
            b = backend(cmd.engine, name)
        except PlanError as exc:
            return out + [Finding("error", "--attention-backend", str(exc))]
        problems = backend_problems(b, topo.gpu, kv, layout.dcp, block)
        out += [Finding("error", "--attention-backend", p) for p in problems]
        return out
    usable = usable_backends(cmd.engine, topo.gpu, kv, layout.dcp)
    if not usable:
        return out + [Finding("error", "--kv-cache-dtype", f"no {cmd.engine} MLA backend runs a {raw} KV cache on "
                                                           f"{topo.gpu.name} (sm{topo.gpu.sm})")]
    if block:
        taking = [b for b in usable if b.accepts_block(block)]
        if not taking:
            out.append(Finding("error", "block size", f"no usable backend takes block size {block} "
                                                      f"({usable[0].name}: {usable[0].legal_block_sizes()})"))
        elif taking[0] is not usable[0] and taking[0].name != usable[0].name:
            out.append(Finding("warn", "block size", f"block size {block} is not one {usable[0].name} (the "
                                                     f"engine's first choice here) takes, so it runs "
                                                     f"{taking[0].name} instead; {usable[0].name} takes "
                                                     f"{usable[0].legal_block_sizes()}"))
    return out


def _eager(cmd: Command, spec: ModelSpec, topo: Topology, layout: Layout, calib: Calibration) -> Finding:
    """Priced: one request's decode step at 2k tokens of context with and without CUDA graphs."""
    kv = KV.get(cmd.values.get("kv", "auto"), "bf16")
    steps = [decode_step(spec, topo, layout, Knobs(engine=cmd.engine, kv_cache_dtype=kv, cuda_graphs=graphs),
                         1, 2048, calib).tpot_s * 1e3 for graphs in (True, False)]
    return Finding("warn", EAGER[cmd.engine], f"no CUDA graphs: one request decodes at {steps[1]:.1f} ms per token "
                                              f"instead of {steps[0]:.1f} (the step model); keep graphs on in "
                                              "production (ai-dynamo/dynamo#2109, sgl-project/sglang#2794)")
