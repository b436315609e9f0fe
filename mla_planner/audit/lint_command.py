"""A hand-written launch command read as the planner needs it: the engine (from the program or the module),
the VAR=value words before it, the words its parser sees, and the values of the flags the checks use (last one
wins, aliases resolved, `--no-X` removing X). The engine's own parser judges every word (audit/lint_engine);
this reading only has to find the values."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mla_planner.core.errors import PlanError
from mla_planner.engines.parser.tables import load_table, option_table
from mla_planner.specs.knobs import KV_DTYPE_CHOICES

# flag -> the field it sets, per engine, with the aliases the engines define (mla_planner/data/engines/*.json, read
# from vllm/engine/arg_utils.py and SGLang's arg_groups/fields): -tp, --tensor-parallel-size, ...
FIELDS = {
    "vllm": {"--tensor-parallel-size": "tp", "-tp": "tp", "--pipeline-parallel-size": "pp", "-pp": "pp",
             "--data-parallel-size": "dp", "-dp": "dp", "--decode-context-parallel-size": "dcp", "-dcp": "dcp",
             "--kv-cache-dtype": "kv", "--block-size": "block", "--attention-backend": "backend",
             "--max-model-len": "max_len", "--quantization": "quant", "-q": "quant", "--model": "model",
             "--speculative-config": "spec", "--attention-config": "attention_config", "--all2all-backend": "a2a",
             "--gpu-memory-utilization": "fraction", "--max-num-seqs": "max_seqs",
             "--max-num-batched-tokens": "batched", "--max-cudagraph-capture-size": "graph_max_bs",
             "--eplb-config": "eplb_config"},
    "sglang": {"--tp-size": "tp", "--tensor-parallel-size": "tp", "--tp": "tp", "--pp-size": "pp",
               "--pipeline-parallel-size": "pp", "--dp-size": "dp_size", "--data-parallel-size": "dp_size",
               "--dp": "dp_size", "--attn-dp-size": "dp", "--attention-data-parallel-size": "dp",
               "--ep-size": "ep", "--expert-parallel-size": "ep", "--ep": "ep", "--dcp-size": "dcp",
               "--decode-context-parallel-size": "dcp", "--kv-cache-dtype": "kv", "--page-size": "block",
               "--attention-backend": "backend", "--context-length": "max_len", "--quantization": "quant",
               "--model-path": "model", "--model": "model", "--moe-a2a-backend": "a2a",
               "--moe-dense-tp-size": "dense_tp", "--cuda-graph-backend-decode": "graph_decode",
               "--model-config-parser": "config_parser", "--speculative-algorithm": "spec",
               "--mem-fraction-static": "fraction", "--max-running-requests": "max_seqs",
               "--chunked-prefill-size": "batched", "--cuda-graph-max-bs-decode": "graph_max_bs",
               "--nnodes": "nnodes", "--node-rank": "node_rank", "--base-gpu-id": "base_gpu",
               "--ep-num-redundant-experts": "redundant", "--dsa-decode-backend": "dsa_decode",
               "--dsa-prefill-backend": "dsa_prefill"},
}
ALIASES = {"-ep": "--enable-expert-parallel"}
BOOLEAN = {"--language-model-only", "--enforce-eager", "--disable-cuda-graph", "--disable-decode-cuda-graph", "--enable-expert-parallel",
           "--enable-dp-attention", "--trust-remote-code", "--enable-prefix-caching", "--headless",
           "--enable-dp-lm-head", "--enable-chunked-prefill", "--disable-radix-cache", "--enable-torch-compile"}
KV = KV_DTYPE_CHOICES | {"bfloat16": "bf16"}   # plus vLLM's spelling of bf16


@dataclass
class Command:
    engine: str
    model: str | None
    values: dict = field(default_factory=dict)     # FIELDS' names -> the flag's value (str); the last one wins
    flags: set = field(default_factory=set)         # every --flag given (a later --no-X removes X)
    env: dict = field(default_factory=dict)         # VAR=value words before the program
    args: list = field(default_factory=list)        # the words after the program, as the engine's parser sees them


SERVER_MODULES = {"vllm.entrypoints.openai.api_server": "vllm", "sglang.launch_server": "sglang"}


def _engine(words: list[str]) -> tuple[str | None, int]:
    """The engine and where its arguments start, from the program (`vllm serve`, `sglang serve`) or the server
    module (`python -m vllm.entrypoints.openai.api_server`, `python -m sglang.launch_server`), not from paths.
    Another subcommand or module of an engine (`vllm bench serve`, `python -m sglang.bench_serving`) is not a
    server launch: PlanError naming it."""
    program = words[0].rsplit("/", 1)[-1] if words else ""
    if program in ("vllm", "sglang"):
        if len(words) > 1 and words[1] == "serve":
            return program, 2
        raise PlanError(f"lint: `{' '.join(words[:2])} ...` is not a server launch: lint reads "
                        f"`{program} serve MODEL ...`")
    if "-m" in words:
        i = words.index("-m")
        module = words[i + 1] if i + 1 < len(words) else ""
        if module in SERVER_MODULES:
            return SERVER_MODULES[module], i + 2
        if module.split(".")[0] in ("vllm", "sglang"):
            raise PlanError(f"lint: `python -m {module}` is not a server launch: lint reads `python -m "
                            + ("vllm.entrypoints.openai.api_server" if module.startswith("vllm") else
                               "sglang.launch_server") + " ...`")
    return None, 0


def _prefix_env(words: list[str]) -> tuple[dict, list[str]]:
    """The VAR=value words before the program, and the words from the program on: `A=1 vllm ...`,
    `env [-i] [-u NAME] [-C DIR] A=1 vllm ...` (or /usr/bin/env), `sudo [-E] [-u USER] ...`, `nohup ...`."""
    env, i, wrapper = {}, 0, False
    while i < len(words):
        word = words[i]
        if re.fullmatch(r"[A-Za-z_]\w*=.*", word):
            name, _, value = word.partition("=")
            env[name] = value
        elif word.rsplit("/", 1)[-1] in ("env", "sudo", "nohup"):
            wrapper = True
        elif not (wrapper and word.startswith("-")):
            break
        i += 2 if wrapper and word in ("-u", "--unset", "-C", "--chdir", "-g", "--group") else 1
    return env, words[i:]


def _looks_like_option(word: str) -> bool:
    return len(word) > 1 and word[0] == "-" and (word[1].isalpha() or word[1] == "-")


def _arity(engine: str, flag: str):
    """How many words FLAG takes, from the engine's own flag table (engines/parser): None (a switch), "one" or
    "many" (nargs + or *); for a flag the table does not define (the engine's parser reports it), a guess: a
    value unless it is a known switch or a --no- form."""
    hit = option_table(engine).get(flag)
    if hit is None:
        return None if flag in BOOLEAN or (flag.startswith("--no-") and flag not in FIELDS[engine]) else "one"
    key, negated = hit
    spec = load_table(engine)["flags"][key]
    if negated or not spec.get("takes_value", True):
        return None
    return "many" if spec.get("nargs") in ("+", "*") else "one"


def parse_command(words: list[str]) -> Command:
    """`vllm serve MODEL ...`, `python -m vllm.entrypoints.openai.api_server --model M ...`,
    `python -m sglang.launch_server --model-path M ...` or `sglang serve ...`."""
    env, words = _prefix_env(words)
    engine, start = _engine(words)
    if engine is None:
        quoted = len(words) == 1 and " " in words[0]     # the whole command passed as one quoted word
        raise PlanError("lint: expected a vLLM or SGLang launch command after --, like "
                        "`vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 ...`"
                        + ("; it came as one quoted word: give its words unquoted after --" if quoted else ""))
    cmd, rest, positional, i = Command(engine, None, env=env, args=words[start:]), words[start:], [], 0
    while i < len(rest):
        word = rest[i]
        if not _looks_like_option(word):
            positional.append(word)
            i += 1
            continue
        flag, eq, value = word.partition("=")
        flag = ALIASES.get(flag, flag[:2] + flag[2:].replace("_", "-") if flag.startswith("--") else flag)
        arity = _arity(engine, flag)
        if not eq and arity and i + 1 < len(rest) and not _looks_like_option(rest[i + 1]):
            value, i = rest[i + 1], i + 1
            while arity == "many" and i + 1 < len(rest) and not _looks_like_option(rest[i + 1]):
                i += 1                                    # nargs + / *: the values after the first are no model
        if flag.startswith("--no-"):
            cmd.flags.discard("--" + flag[5:])
        else:
            cmd.flags.add(flag)
        if flag in FIELDS[engine]:
            cmd.values[FIELDS[engine][flag]] = value
        elif engine == "vllm" and flag.startswith("--attention-config."):   # vLLM's dotted form of a JSON key
            cmd.values["attention_config"] = f"{cmd.values.get('attention_config', '')} {flag[19:]}={value}".strip()
        i += 1
    cmd.model = cmd.values.get("model") or (positional[0] if engine == "vllm" and positional else None)
    return cmd
