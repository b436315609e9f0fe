"""vLLM's FlexibleArgumentParser pre-processing: ``--model X`` moved to the positional model, underscores
in option names turned into dashes, ``-O3`` and dotted JSON options merged into their JSON option."""

from __future__ import annotations

import json
import re
from typing import Any

from mla_planner.engines.parser.values import vllm_human_int


def vllm_preprocess(args: list[str], problems: list[str]) -> list[str]:
    """FlexibleArgumentParser.parse_args pre-processing."""
    args = list(args)
    # `--model X` is moved to the positional model
    for i, a in enumerate(args):
        if re.match(r"^--model(=.+|$)", a):
            if a == "--model":
                if i + 1 >= len(args):
                    break  # argparse reports the missing value below
                tag, rest = args[i + 1], i + 2
            else:
                tag, rest = a[len("--model="):], i + 1
            args = [tag, *args[:i], *args[rest:]]
            break
    else:
        if (
            args
            and args[0].startswith("-")
            and not any(re.match(r"^--config(=.+|$)", a) for a in args)
            and any(re.match(r"^--served[-_]model[-_]name(=.+|$)", a) for a in args)
        ):
            problems.append(
                "`model` should be provided as the first positional argument when "
                "using `vllm serve` (--served-model-name given without a model)"
            )
    key_part = re.compile(r"(?<=--)[^.]*")
    processed: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
                processed.append(key_part.sub(lambda m: m.group(0).replace("_", "-"), k, count=1) + "=" + v)
            else:
                processed.append(key_part.sub(lambda m: m.group(0).replace("_", "-"), a, count=1))
        elif a.startswith("-O") and a != "-O":
            processed += ["--optimization-level", a[3:] if a[2] == "=" else a[2:]]
        elif a == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(a)
        i += 1

    # dotted JSON options: --json-arg.key value  ->  --json-arg '{"key": value}'
    dict_args: dict[str, dict] = {}
    delete: set[int] = set()
    for i, a in enumerate(processed):
        if i in delete:
            continue
        if a.startswith("--") and "." not in a:
            continue
        if a.startswith("-") and "." in a:
            if "=" in a:
                a, value_str = a.split("=", 1)
                if "." not in a:
                    continue
            else:
                if i + 1 >= len(processed):
                    problems.append(f"argument {a}: expected one argument")
                    delete.add(i)
                    continue
                value_str = processed[i + 1]
                delete.add(i + 1)
            if a.endswith("+"):
                a = a[:-1]
                value_str = json.dumps(value_str.split(","))
            key, *keys = a.split(".")
            try:
                value: Any = json.loads(value_str)
            except json.JSONDecodeError:
                try:
                    value = vllm_human_int(value_str)
                except ValueError:
                    value = value_str
            nested: Any = value
            for k in reversed(keys):
                nested = {k: nested}
            _merge(dict_args.setdefault(key, {}), nested)
            delete.add(i)
    out = [a for i, a in enumerate(processed) if i not in delete]
    for k, v in dict_args.items():
        out += [k, json.dumps(v)]
    return out


def _merge(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        elif isinstance(v, list) and isinstance(dst.get(k), list):
            dst[k] += v
        else:
            dst[k] = v
