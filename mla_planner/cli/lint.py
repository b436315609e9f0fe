"""`mla-plan lint -- <your engine command>`: a hand-written vLLM / SGLang launch command, checked (lint.py)."""

from __future__ import annotations

import json

from typing import Annotated, Optional

import click

from mla_planner.audit.lint import Finding, default_dispatch, eager_flag, layout_of, lint
from mla_planner.audit.lint_command import FIELDS, Command, parse_command
from mla_planner.audit.lint_memory import memory_findings
from mla_planner.cli.options import knobs_from_flags, kv_knobs, partition_choice
from mla_planner.cli.params import Opt
from mla_planner.cli.common import DEFAULT_TOPOLOGY, JsonOpt, TopologyOpt, guard, print_json
from mla_planner.cli.plannable import check_plannable
from mla_planner.cli.console import console
from mla_planner.core.errors import PlanError
from mla_planner.core.files import MAX_COUNT, path_kind, user_path
from mla_planner.engines.parser.tables import load_table
from mla_planner.engines.profile import profile
from mla_planner.engines.parser.values import to_number
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import builtin_by_hf_id, load_model
from mla_planner.specs.topology import load_topology

LintModelOpt = Annotated[Optional[str], Opt(
    "--model", "-m", help="The model, when the command's own (an HF id or a local snapshot folder) is not a "
    "built-in's HF id or a folder here: a built-in name, a YAML spec, a config.json or a snapshot folder.")]


@guard
def lint_cmd(ctx: click.Context, model: LintModelOpt = None, topology: TopologyOpt = DEFAULT_TOPOLOGY,
             as_json: JsonOpt = False) -> None:
    """Check your own vLLM or SGLang launch command against the model, the cluster and the engines' rules.

    The command goes after `--`, as you would run it: mla-plan lint [OPTIONS] -- vllm serve MODEL [FLAGS...]

    Every word goes through the engine's own parser and start-up rules (vLLM 0.33.0 / SGLang 0.5.23, read out
    of their wheels): unknown or misspelled flags (with the nearest ones), bad values, a world size above the
    node's GPUs without --nnodes, a --node-rank outside --nnodes, a batch budget below --max-num-seqs, and
    VLLM_* / SGLANG_* variables the release does not read (VLLM_ATTENTION_BACKEND). Then what the planner knows:
    whether the command's own settings fit (weights, KV for one --max-model-len request, at its memory
    fraction), eager mode (priced), --quantization on an already-quantized checkpoint, an fp8_e5m2 KV cache, an
    attention backend or block size the GPU or KV dtype rules out (or that makes the engine pick a slower
    backend), a layout that cannot exist or that the engine cannot start, a context longer than the model's.

    Exit status: 0 nothing wrong (warnings, listed apart, allowed); 1 something the engine would refuse, that
    would not fit, or that would not take effect; 2 bad input.

    Examples:

      mla-plan lint -t 8xh200 -- vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --enforce-eager

      mla-plan lint -t 8xh200 -- python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 8 \\
          --quantization fp8 --kv-cache-dtype fp8_e5m2
    """
    if not ctx.args:
        raise PlanError("lint: give the engine command after --, e.g. `mla-plan lint -- vllm serve MODEL ...`")
    cmd = parse_command(list(ctx.args))
    ref = model or _builtin_for(cmd.model)
    if ref is None:
        raise PlanError(f"lint: {cmd.model or 'the command'} names no built-in model (by HF id) nor a folder "
                        "here: give --model")
    loaded, topo = load_model(ref), load_topology(topology)
    check_plannable(loaded.spec, "lint", topo.gpu)
    findings = lint(cmd, loaded.spec, topo, load_calibration(None, topo))
    if not any(f.level == "error" for f in findings):     # the memory model judges a command the engine takes
        findings += _memory(cmd, loaded.spec, topo)
    findings = sorted(findings, key=lambda f: f.level != "error")       # errors first, then the warnings
    errors = [f for f in findings if f.level == "error"]
    if as_json:
        print_json({"engine": cmd.engine, "model": loaded.spec.name, "topology": topo.name, "ok": not errors,
                    "findings": [{"level": f.level, "flag": f.flag, "text": f.text} for f in findings]})
    else:
        out = console()
        out.print(f"{cmd.engine} command for {loaded.spec.name} on {topo.name}: "
                  + (f"{len(findings)} finding(s)" if findings else "nothing to flag"), markup=False)
        for f in findings:
            out.print(f"  {f.level.upper():<5} {f.flag}: {f.text}", markup=False, soft_wrap=True)
    raise SystemExit(1 if errors else 0)


def _memory(cmd: Command, spec, topo) -> list[Finding]:
    """The memory verdict for the command's own settings (audit/lint_memory), its flags read into knobs the way
    `mla-plan memory` reads its own (cli/options). SGLang's --chunked-prefill-size and --max-running-requests are the
    whole server's: per DP-attention rank they are divided by the ranks, as the planner's knobs are."""
    layout, v = layout_of(cmd, spec), cmd.values
    fraction = _number(v.get("fraction"), float)
    if cmd.engine == "sglang" and "fraction" in v and (fraction is None or fraction > 1):   # vLLM's parser bounds it
        return [Finding("error", "--mem-fraction-static", f"{v['fraction']}: not a fraction in (0, 1]; SGLang does not "
                        "check it: at 0 or below its KV pool is empty, above 1 it asks for more than the GPU holds")]
    split_env = profile(cmd.engine).pp_partition_env
    try:
        split = partition_choice(cmd.env.get(split_env), spec, layout) if layout.pp > 1 else None
    except PlanError as e:      # the engines refuse a split that does not match the stages and layers at start
        return [Finding("error", split_env, str(e).replace("--pp-layer-partition", cmd.env[split_env], 1))]
    try:
        cache, _ = kv_knobs(spec, topo, layout, cmd.engine, v.get("kv", "auto").lower(), _number(v.get("block")))
        batched, seqs = _flag_number(cmd, "batched"), _number(v.get("max_seqs"))
        per_rank = layout.dp if cmd.engine == "sglang" else 1
        knobs = knobs_from_flags(
            spec, topo, layout, cmd.engine, fraction if cmd.engine == "vllm" else None,
            fraction if cmd.engine == "sglang" else None,
            dict(**cache, max_model_len=_flag_number(cmd, "max_len"),
                 max_num_seqs=None if seqs is None else max(seqs // per_rank, 1),
                 max_num_batched_tokens=None if batched is None else max(batched // per_rank, 1),
                 cuda_graphs=not eager_flag(cmd), cuda_graph_max_bs=_number(v.get("graph_max_bs")),
                 redundant_experts=_redundant(v) if layout.ep > 1 else 0, pp_layer_partition=split,
                 images=cmd.engine == "vllm" and bool(spec.vision_params)     # vLLM builds the encoder unless told
                 and "--language-model-only" not in cmd.flags))
    except PlanError:       # a value the planner does not model: the engine's own checks have judged it
        return []
    default = default_dispatch(layout, v.get("a2a", ""))    # lint's a2a finding
    return [Finding(*f) for f in memory_findings(spec, topo, layout, knobs, fraction is not None, default)]


def _redundant(values: dict) -> int:
    """EPLB's redundant experts the command asks for: SGLang's --ep-num-redundant-experts, vLLM's --eplb-config
    num_redundant_experts (JSON); 0 when absent or not a count (the engine's parser reports that)."""
    if "redundant" in values:
        return max(_number(values["redundant"]) or 0, 0)
    try:
        config = json.loads(values.get("eplb_config") or "{}")
    except ValueError:
        return 0
    count = config.get("num_redundant_experts", 0) if isinstance(config, dict) else 0
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def _flag_number(cmd: Command, key: str) -> Optional[int]:
    """The value of the flag behind KEY as the engine's parser reads it (vLLM's --max-model-len 8k is 8,000, SGLang's
    --context-length 8Ki 8,192: the flag tables' types), None as `_number`."""
    flags = [f for f, k in FIELDS[cmd.engine].items() if k == key and f.startswith("--")]
    kind = load_table(cmd.engine)["flags"].get(flags[0], {}).get("type", "int") if flags else "int"
    return _number(cmd.values.get(key), lambda raw: to_number(kind, raw))


def _number(text: Optional[str], kind=int):
    """A flag's value as a number, None when absent or not a plausible one (the engine's parser, or the planner's
    own checks, report that)."""
    try:
        value = kind(text) if text is not None else None
    except ValueError:
        return None
    return value if value is None or 0 < value <= MAX_COUNT else None


def _builtin_for(served: Optional[str]) -> Optional[str]:
    """The built-in whose HF id the command serves, else the served path itself when it exists here."""
    if not served:
        return None
    return builtin_by_hf_id(served) or (served if path_kind(user_path(served)) != "missing" else None)
