"""A user's command held to the engine's own parser and start-up rules, and to the environment it reads.

The parser and rules are engines/parser (read out of the vLLM 0.33.0 and SGLang 0.5.23 wheels): what that
release's argparse refuses (an unknown or misspelled flag, a value outside its choices or type, an ambiguous
abbreviation) and what its config code refuses before loading (a world size above the node's GPUs, a
--max-num-batched-tokens below --max-num-seqs, a backend the GPU lacks). Each unknown flag gets the nearest
flags the engine defines.

Environment: vLLM warns "Unknown vLLM environment variable detected" for a VLLM_* name outside
vllm/envs.py's table and otherwise ignores it (vllm/platforms/interface.py validate_environ), so a setting
the user meant, such as the removed VLLM_ATTENTION_BACKEND, silently does nothing. SGLang has no such check;
a SGLANG_* / SGL_* name that no file of its wheel mentions is read by nothing.
"""

from __future__ import annotations

import difflib
import re

from mla_planner.engines.parser.check import check_command
from mla_planner.engines.parser.tables import load_table, option_table
from mla_planner.specs.model import ModelSpec
from mla_planner.specs.topology import Topology

# Variables an earlier release read, with what replaced them (vLLM 0.33.0 reads the flag; the variable is
# absent from its vllm/envs.py).
REPLACED = {"VLLM_ATTENTION_BACKEND": "--attention-backend NAME",
            "VLLM_USE_V1": "nothing (V1 is the only engine in vLLM 0.33)"}
TRUE_WORDS = ("1", "true", "True", "TRUE")


def engine_findings(engine: str, args: list[str], env: dict, spec: ModelSpec, topo: Topology) -> list[tuple]:
    """(level, flag, text) for everything the engine's parser or start-up rules refuse in ARGS (the words
    after `vllm serve` / `python -m sglang.launch_server`). The attention-backend rules (and the page sizes SGLang
    replaces for a backend) are left to the planner's own backend checks (audit/lint.py), which read the same
    wheels and say why and what runs instead."""
    problems = check_command(
        args, engine, topo.gpu.arch_id, model_max_len=spec.max_position_embeddings,
        allow_long_max_model_len=env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") in TRUE_WORDS,
        gpus_per_node=topo.gpus_per_node, attention_rules=False)
    return [("error", "engine", p + _suggestions(engine, p)) for p in problems]


def env_findings(engine: str, env: dict) -> list[tuple]:
    """A VLLM_* / SGLANG_* variable set before the program that this release does not read."""
    table = load_table(engine)["environment"]
    known = set(table["names"])
    prefixes = ("VLLM_",) if engine == "vllm" else ("SGLANG_", "SGL_")
    out = []
    for name in env:
        if not name.startswith(prefixes) or name in known:
            continue
        instead = REPLACED.get(name) or ", ".join(difflib.get_close_matches(name, known, n=2, cutoff=0.8))
        why = ("vLLM logs 'Unknown vLLM environment variable detected' and ignores it" if engine == "vllm"
               else "no code in the SGLang wheel names it")
        out.append(("error", name, f"{_version(engine)} does not read {name} ({why})"
                                   + (f"; use {instead}" if instead else "")))
    return out


def _version(engine: str) -> str:
    t = load_table(engine)
    return f"{'vLLM' if engine == 'vllm' else 'SGLang'} {t['version']}"


def _suggestions(engine: str, problem: str) -> str:
    """For argparse's 'unrecognized arguments: ...', the flags the engine defines nearest to each unknown one."""
    m = re.search(r"unrecognized arguments: (.*)$", problem)
    if not m:
        return ""
    options = [o for o in option_table(engine) if o.startswith("--")]
    hints = []
    for word in m.group(1).split():
        if not word.startswith("-"):
            continue
        flag = word.split("=", 1)[0].replace("_", "-") if word.startswith("--") else word
        near = difflib.get_close_matches(flag, options, n=2, cutoff=0.75)
        if near:
            hints.append(f"{word.split('=', 1)[0]} -> did you mean {' or '.join(near)}?")
    return ("; " + "; ".join(hints)) if hints else ""
