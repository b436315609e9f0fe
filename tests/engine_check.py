"""Offline checker for vLLM / SGLang launch commands.

``check_command(argv, engine, gpu_arch)`` parses ``argv`` the way the engine's
argparse parser would (using the flag tables extracted from the published
wheels, see ``tests/fixtures/engines/README.md``) and then applies the
cross-flag rules recorded under ``rules`` in the same fixtures.  It returns a
list of human-readable problems; an empty list means the command is accepted.

Only the standard library is used; nothing from vLLM or SGLang is imported.

Parsing follows CPython 3.11 argparse (allow_abbrev=True for both engines):
exact option strings, ``--opt=value``, unique-prefix abbreviations of long
options (an ambiguous prefix is an error), ``-xVALUE`` for one-letter short
options, negative numbers as values, nargs None/?/*/+/N.  vLLM's
FlexibleArgumentParser pre-processing is reproduced as well: ``--model X`` is
moved to the positional model, underscores in option names become dashes,
``-O3`` means ``--optimization-level 3`` and dotted JSON options
(``--compilation-config.cudagraph_mode FULL``) are merged into their JSON
option.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

__all__ = ["check_command", "load_fixture", "FIXTURE_FILES"]

FIXTURE_DIR = Path(__file__).resolve().parent / "fixtures" / "engines"
FIXTURE_FILES = {
    "vllm": FIXTURE_DIR / "vllm-0.33.0.json",
    "sglang": FIXTURE_DIR / "sglang-0.5.23.json",
}
_ENGINE_ALIASES = {
    "vllm": "vllm",
    "vllm-0.33.0": "vllm",
    "sglang": "sglang",
    "sglang-0.5.23": "sglang",
}

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class _ParseError(Exception):
    pass


@functools.lru_cache(maxsize=None)
def load_fixture(engine: str) -> dict:
    key = _ENGINE_ALIASES.get(engine.lower())
    if key is None:
        raise ValueError(f"unknown engine {engine!r}; expected 'vllm' or 'sglang'")
    with open(FIXTURE_FILES[key], encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=None)
def _option_table(engine: str) -> dict[str, tuple[str, bool]]:
    """option string -> (flag key, is_negated)."""
    fx = load_fixture(engine)
    table: dict[str, tuple[str, bool]] = {}
    for key, spec in fx["flags"].items():
        table[key] = (key, False)
        for alias in spec.get("aliases", []):
            table[alias] = (key, False)
        for neg in spec.get("negated", []):
            table[neg] = (key, True)
    return table


def _gpu_major(gpu_arch: str | None) -> int | None:
    if gpu_arch is None:
        return None
    m = re.fullmatch(r"(?i)sm_?(\d+)[a-z]?", gpu_arch.strip())
    if not m:
        raise ValueError(f"unrecognised gpu_arch {gpu_arch!r}; expected e.g. 'sm90', 'sm100'")
    return int(m.group(1)) // 10


# ---------------------------------------------------------------------------
# value conversion (mirrors the engines' argparse ``type=`` callables)
# ---------------------------------------------------------------------------


def _vllm_human_int(value: str) -> int:
    value = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if m:
        number, suffix = m.groups()
        if suffix in "kmgt":
            return int(float(number) * {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[suffix])
        if "." in number:
            raise ValueError(f"Decimals are not allowed with binary suffixes like {suffix}")
        return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
    return int(value)


def _vllm_human_int_or_auto(value: str) -> int:
    v = value.strip()
    if v == "-1" or v.lower() == "auto":
        return -1
    return _vllm_human_int(v)


def _sglang_si_iec_int(value: str) -> int:
    from decimal import Decimal

    value = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if m:
        number, suffix = m.groups()
        iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
        if suffix in iec:
            if "." in number:
                raise ValueError(f"Decimals are not allowed with IEC suffixes like '{suffix}'")
            return int(number) * iec[suffix]
        return int(Decimal(number) * {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[suffix])
    return int(value)


def _json_or_str(value: str) -> Any:
    if not re.match(r"(?s)^\s*{.*}\s*$", value):
        return value
    return json.loads(value)


_CONVERTERS = {
    "int": int,
    "float": float,
    "str": str,
    "json": json.loads,
    "json_or_str": _json_or_str,
    "human_int": _vllm_human_int,
    "human_int_or_auto": _vllm_human_int_or_auto,
    "si_iec_int": _sglang_si_iec_int,
}

_TYPE_WORDS = {
    "int": "int",
    "float": "float",
    "json": "JSON",
    "json_or_str": "JSON",
    "human_int": "human-readable int",
    "human_int_or_auto": "human-readable int",
    "si_iec_int": "human-readable int",
}


def _convert(spec: dict, opt: str, raw: str) -> Any:
    if spec.get("none_allowed") and raw in ("", "None"):
        return None
    typ = spec.get("type", "str")
    conv = _CONVERTERS.get(typ, str)
    try:
        value = conv(raw)
    except (ValueError, TypeError, ArithmeticError):
        raise _ParseError(f"argument {opt}: invalid {_TYPE_WORDS.get(typ, typ)} value: {raw!r}")
    choices = spec.get("choices")
    if choices is not None:
        probe = value
        if spec.get("transform") == "lower_dash_to_underscore" and isinstance(probe, str):
            probe = probe.lower().replace("-", "_")
        if probe not in choices:
            shown = ", ".join(repr(c) for c in choices if c is not None)
            raise _ParseError(f"argument {opt}: invalid choice: {raw!r} (choose from {shown})")
    return value


# ---------------------------------------------------------------------------
# argparse-like tokenizer / parser
# ---------------------------------------------------------------------------


def _vllm_preprocess(args: list[str], problems: list[str]) -> list[str]:
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
                    value = _vllm_human_int(value_str)
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


def _option_tuples(arg: str, table: dict) -> list[tuple[str, str | None]]:
    """argparse._get_option_tuples (CPython 3.11): (option string, explicit arg)."""
    out: list[tuple[str, str | None]] = []
    if len(arg) > 1 and arg[1] == "-":
        prefix, explicit = (arg.split("=", 1) + [None])[:2] if "=" in arg else (arg, None)
        for opt in table:
            if opt.startswith(prefix):
                out.append((opt, explicit))
    else:
        short_prefix, short_explicit = arg[:2], arg[2:]
        for opt in table:
            if opt == short_prefix:
                out.append((opt, short_explicit))
            elif opt.startswith(arg):
                out.append((opt, None))
    return out


def _classify(arg: str, table: dict) -> tuple[str, str | None] | None | str:
    """argparse._parse_optional. Returns None for a positional ('A'),
    (option, explicit_arg) for a known option, or the raw string for an
    unknown option."""
    if not arg or arg[0] != "-":
        return None
    if arg in table:
        return (arg, None)
    if len(arg) == 1:
        return None
    if "=" in arg:
        opt, explicit = arg.split("=", 1)
        if opt in table:
            return (opt, explicit)
    tuples = _option_tuples(arg, table)
    if len(tuples) > 1:
        opts = ", ".join(t[0] for t in tuples)
        raise _ParseError(f"ambiguous option: {arg.split('=', 1)[0]} could match {opts}")
    if len(tuples) == 1:
        return tuples[0]
    if _NEGATIVE_NUMBER.match(arg):
        return None
    if " " in arg:
        return None
    return arg


def _parse(argv: list[str], engine: str) -> tuple[dict[str, Any], set[str], list[str], list[str]]:
    """Returns (values by flag key, keys given explicitly, positionals, problems).
    Raises _ParseError for the first fatal argparse error."""
    fx = load_fixture(engine)
    flags = fx["flags"]
    table = _option_table(engine)
    problems: list[str] = []

    kinds: list[Any] = []
    after_dd = False
    for a in argv:
        if after_dd:
            kinds.append(None)
        elif a == "--":
            after_dd = True
            kinds.append("--")
        else:
            kinds.append(_classify(a, table))

    values: dict[str, Any] = {}
    given: set[str] = set()
    positionals: list[str] = []
    unknown: list[str] = []
    i = 0
    n = len(argv)
    while i < n:
        k = kinds[i]
        if k == "--":
            i += 1
            continue
        if k is None:
            positionals.append(argv[i])
            i += 1
            continue
        if isinstance(k, str):
            unknown.append(argv[i])
            i += 1
            continue
        opt, explicit = k
        key, negated = table[opt]
        spec = flags[key]
        i += 1
        if not spec.get("takes_value", True):
            if explicit is not None:
                raise _ParseError(f"argument {opt}: ignored explicit argument {explicit!r}")
            values[key] = not negated
            given.add(key)
            continue
        nargs = spec.get("nargs")
        if explicit is not None:
            if nargs not in (None, "?", "*", "+", 1):
                raise _ParseError(f"argument {opt}: expected {nargs} arguments")
            raw = [explicit]
        else:
            j = i
            while j < n and kinds[j] is None:
                j += 1
            avail = argv[i:j]
            if nargs is None:
                if not avail:
                    raise _ParseError(f"argument {opt}: expected one argument")
                raw = avail[:1]
            elif nargs == "?":
                raw = avail[:1]
            elif nargs == "*":
                raw = avail
            elif nargs == "+":
                if not avail:
                    raise _ParseError(f"argument {opt}: expected at least one argument")
                raw = avail
            else:
                if len(avail) < int(nargs):
                    raise _ParseError(f"argument {opt}: expected {nargs} arguments")
                raw = avail[: int(nargs)]
            i += len(raw)
        if nargs == "?" and not raw:
            value: Any = True  # const
        elif nargs in (None, "?"):
            value = _convert(spec, opt, raw[0])
        else:
            value = [_convert(spec, opt, r) for r in raw]
        if spec.get("action") == "append":
            values.setdefault(key, []).append(value)
        else:
            values[key] = value
        given.add(key)

    max_pos = sum(1 for _ in fx.get("positionals", []))
    extras = unknown + positionals[max_pos:]
    positionals = positionals[:max_pos]
    if extras:
        raise _ParseError("unrecognized arguments: " + " ".join(extras))
    missing = [
        "/".join([key, *spec.get("aliases", [])])
        for key, spec in flags.items()
        if spec.get("required") and key not in given
    ]
    if missing:
        raise _ParseError("the following arguments are required: " + ", ".join(missing))

    # bounds from the config dataclasses (pydantic Field(gt=/ge=/lt=/le=))
    for key in sorted(given):
        b = flags[key].get("bounds")
        v = values.get(key)
        if not b or not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        for op, lim in b.items():
            ok = {"gt": v > lim, "ge": v >= lim, "lt": v < lim, "le": v <= lim}[op]
            if not ok:
                word = {"gt": "greater than", "ge": "greater than or equal to", "lt": "less than", "le": "less than or equal to"}[op]
                problems.append(f"{key}={v}: must be {word} {lim} ({flags[key].get('config_field', key)} validation)")
    return values, given, positionals, problems


# ---------------------------------------------------------------------------
# vLLM rules
# ---------------------------------------------------------------------------


def _json_obj(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _vllm_rules(
    fx: dict,
    values: dict,
    given: set[str],
    positionals: list[str],
    major: int | None,
    model_max_len: int | None,
    allow_long_max_model_len: bool,
    sparse_attention: bool | None,
    gpus_per_node: int | None,
) -> list[str]:
    rules = fx["rules"]
    out: list[str] = []

    def get(key: str, default: Any = None) -> Any:
        return values[key] if key in given else default

    # model
    if not positionals and "--config" not in given:
        out.append(
            "no model given: `vllm serve` needs the model as the first positional argument "
            f"(it would silently fall back to {rules['default_model']['value']!r}) "
            f"[{rules['default_model']['source']}]"
        )

    cc = _json_obj(get("--compilation-config"))
    ac = _json_obj(get("--attention-config"))

    # kv cache dtype
    kv = get("--kv-cache-dtype", "auto")
    kvr = rules["kv_cache_dtype"]
    if kv not in kvr["valid"]:
        out.append(f"--kv-cache-dtype {kv}: Invalid kv_cache_dtype: {kv!r}. Valid values are: {kvr['valid']} [{kvr['source']}]")

    # attention backend
    abr = rules["attention_backends"]
    backend = get("--attention-backend")
    if backend is None:
        backend = ac.get("backend")
    block = get("--block-size")
    if backend is not None and str(backend).lower() != "auto":
        name = str(backend).upper()
        if name not in abr["names"]:
            out.append(
                f"--attention-backend {backend}: unknown attention backend; valid names: "
                f"{', '.join(abr['names'])} [{abr['source']}]"
            )
        elif name not in abr["backends"]:
            out.append(
                f"--attention-backend {name}: Selected backend is not valid for this configuration. "
                f"Reason: ['MLA not supported'] (not an MLA backend) [{abr['source']}]"
            )
        else:
            reasons = _vllm_backend_reasons(rules, name, major, block, kv, sparse_attention)
            if reasons:
                out.append(
                    f"--attention-backend {name}: Selected backend is not valid for this configuration. "
                    f"Reason: {reasons} [{abr['backends'][name]['source']}]"
                )
    elif major is not None and (block is not None or kv != "auto"):
        prio = rules["attention_backend_auto_priority_mla"]
        cands = prio.get(f"sm{major}x", prio["other"])
        ok = [
            b for b in cands
            if b in abr["backends"]
            and (sparse_attention is None or abr["backends"][b]["sparse"] == sparse_attention)
            and (sparse_attention is not None or not abr["backends"][b]["sparse"])
            and not _vllm_backend_reasons(rules, b, major, block, kv, sparse_attention)
        ]
        if not ok:
            out.append(
                f"no valid MLA attention backend for sm{major}x with block_size={block}, "
                f"kv_cache_dtype={kv} (auto-selection candidates: {', '.join(cands)}) [{prio['source']}]"
            )

    # block size > 0 is covered by the flag bounds

    # TP / DCP
    tp = get("--tensor-parallel-size", 1)
    dcp = get("--decode-context-parallel-size", 1)
    pcp = get("--prefill-context-parallel-size", 1)
    r = rules["tp_divisible_by_dcp"]
    if isinstance(tp, int) and isinstance(dcp, int) and dcp > 0:
        if pcp == 1 and tp % dcp != 0:
            out.append(f"-tp {tp} -dcp {dcp}: tp_size={tp} must be divisible by dcp_size={dcp}. [{r['source']}]")
        elif pcp != 1 and dcp not in (1, pcp, tp * pcp):
            out.append(
                f"-tp {tp} -pcp {pcp} -dcp {dcp}: when PCP is enabled, DCP must be 1, PCP or TP*PCP [{r['source']}]"
            )

    # headless
    r = rules["headless_api_server_count"]
    asc = get("--api-server-count")
    if get("--headless", False) and asc is not None and asc > 0:
        out.append(f"--api-server-count={asc} cannot be used with --headless [{r['source']}]")

    # DP load-balancing modes
    r = rules["dp_lb_modes"]
    external = bool(get("--data-parallel-external-lb", False)) or get("--data-parallel-rank") is not None
    hybrid_flag = bool(get("--data-parallel-hybrid-lb", False))
    multi = bool(get("--data-parallel-multi-port-external-lb", False))
    if not hybrid_flag and not multi:
        hybrid = get("--data-parallel-start-rank") is not None
    else:
        hybrid = hybrid_flag
    if sum([multi, external, hybrid]) > 1:
        out.append(
            "Cannot use more than one data parallel load balancing mode (multi-port external LB, "
            "external LB / --data-parallel-rank, hybrid LB / --data-parallel-start-rank) "
            f"[{r['source']}]"
        )

    # cudagraph capture sizes
    r = rules["cudagraph_capture_sizes_consistency"]
    sizes = get("--cudagraph-capture-sizes", cc.get("cudagraph_capture_sizes"))
    mx = get("--max-cudagraph-capture-size", cc.get("max_cudagraph_capture_size"))
    graphs_off = bool(get("--enforce-eager", False)) or str(cc.get("cudagraph_mode", "")).upper() == "NONE"
    mnbt = get("--max-num-batched-tokens")
    if sizes and mx is not None and not graphs_off:
        kept = [s for s in sizes if mnbt is None or s <= mnbt]
        valid_max = max(kept) if kept else 0
        if mx != valid_max:
            out.append(
                f"customized max_cudagraph_capture_size(={mx}) should be consistent with the max "
                f"value of cudagraph_capture_sizes(={valid_max}) [{r['source']}]"
            )

    # scheduler
    r = rules["scheduler"]
    mml = get("--max-model-len")
    eff_mml = mml if mml not in (None, -1) else model_max_len
    chunked = get("--enable-chunked-prefill", True)
    if chunked is False and mnbt is not None and eff_mml is not None and mnbt < eff_mml:
        out.append(
            f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({eff_mml}) with chunked "
            f"prefill disabled [{r['source']}]"
        )
    mns = get("--max-num-seqs")
    if mnbt is not None and mns is not None and mnbt < mns:
        out.append(
            f"max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({mns}) [{r['source']}]"
        )
    mnas = get("--max-num-active-seqs")
    if mnas is not None and mns is not None and mnas > mns:
        out.append(f"max_num_active_seqs ({mnas}) cannot be greater than max_num_seqs ({mns}) [{r['source']}]")

    # data-parallel launch options (EngineArgs.create_engine_config)
    r = rules["dp_launch"]
    headless = bool(get("--headless", False))
    nnodes = get("--nnodes", 1)
    node_rank = get("--node-rank", 0)
    dp = get("--data-parallel-size", 1)
    pp = get("--pipeline-parallel-size", 1)
    dpl = get("--data-parallel-size-local")
    dp_rank = get("--data-parallel-rank")
    if headless and hybrid_flag:
        out.append(f"data_parallel_hybrid_lb is not applicable in headless mode [{r['source']}]")
    if nnodes > 1:
        if get("--data-parallel-backend", "mp") != "mp":
            out.append(f"--nnodes {nnodes} requires --data-parallel-backend mp [{r['source']}]")
        world = dp * pp * tp * pcp
        if world % nnodes != 0:
            out.append(f"--nnodes {nnodes} must evenly divide the total world size ({world}) [{r['source']}]")
        if not 0 <= node_rank < nnodes:
            out.append(f"--node-rank must be between 0 and {nnodes - 1}; got {node_rank} [{r['source']}]")
    if external:
        inferable = nnodes > 1 and dp > 1 and nnodes % dp == 0
        if dp_rank is None and not inferable:
            out.append(f"--data-parallel-external-lb requires a data-parallel rank (--data-parallel-rank) [{r['source']}]")
        if dpl not in (1, None):
            out.append(
                f"an external data-parallel rank requires --data-parallel-size-local 1; got {dpl} [{r['source']}]"
            )
    elif dpl is None and hybrid_flag and not (nnodes > 1):
        out.append(f"--data-parallel-hybrid-lb requires --data-parallel-size-local [{r['source']}]")

    r = rules["world_size_vs_gpus"]
    world = tp * pp * pcp
    if (
        gpus_per_node is not None
        and get("--distributed-executor-backend") is None
        and nnodes == 1
        and world * dp > 1
        and world > gpus_per_node
    ):
        out.append(
            f"World size ({world}) is larger than the number of available GPUs ({gpus_per_node}) in this node; "
            f"use --nnodes/--node-rank (mp) or --distributed-executor-backend ray [{r['source']}]"
        )

    # max model len vs model
    r = rules["max_model_len"]
    if mml not in (None, -1) and model_max_len is not None and mml > model_max_len and not allow_long_max_model_len:
        out.append(
            f"User-specified max_model_len ({mml}) is greater than the derived max_model_len "
            f"({model_max_len}); needs VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 [{r['source']}]"
        )
    return out


def _vllm_backend_reasons(
    rules: dict,
    name: str,
    major: int | None,
    block: int | None,
    kv: str,
    sparse_attention: bool | None,
) -> list[str]:
    info = rules["attention_backends"]["backends"][name]
    reasons: list[str] = []
    if kv is not None and info.get("kv_cache_dtypes") and kv not in info["kv_cache_dtypes"]:
        reasons.append("kv_cache_dtype not supported")
    bases = info.get("block_size_bases")
    if block is not None and bases and not any(block % b == 0 for b in bases):
        reasons.append("block_size not supported")
    if sparse_attention is not None and bool(info.get("sparse")) != sparse_attention:
        reasons.append("sparse not supported" if sparse_attention else "non-sparse not supported")
    if major is not None:
        cc = info.get("compute_capability_majors")
        if isinstance(cc, list) and major not in cc:
            reasons.append("compute capability not supported")
        elif isinstance(cc, dict) and major < cc.get("min", 0):
            reasons.append("compute capability not supported")
        elif cc == "any":
            prio = rules["attention_backend_auto_priority_mla"]
            cuda_names = {b for k, v in prio.items() if k != "source" for b in v}
            if name not in cuda_names:
                reasons.append("not a CUDA backend (absent from the CUDA platform's MLA backend list)")
        fam = info.get("device_family_majors")
        if fam and not info.get("sparse") and major not in fam and "compute capability not supported" not in reasons:
            reasons.append(
                info.get("device_family_message")
                or f"device family not supported (only sm{'/sm'.join(str(f) + '0' for f in fam)})"
            )
    return reasons


# ---------------------------------------------------------------------------
# SGLang rules
# ---------------------------------------------------------------------------


def _sglang_rules(fx: dict, values: dict, given: set[str], major: int | None, include_overrides: bool) -> list[str]:
    rules = fx["rules"]
    out: list[str] = []

    def get(key: str, default: Any = None) -> Any:
        return values[key] if key in given else default

    attn = get("--attention-backend")
    dec = get("--decode-attention-backend")
    pre = get("--prefill-attention-backend")
    kv = get("--kv-cache-dtype", "auto")
    page = get("--page-size")

    # deprecated aliases
    ar = rules["attention_backend_aliases"]
    aliases = ar["aliases"]
    if "tokenspeed_mla" in (attn, dec) and kv != "fp8_e4m3":
        if "--kv-cache-dtype" in given and include_overrides:
            out.append(
                f"[override] tokenspeed_mla required FP8 KV; --kv-cache-dtype {kv} would be replaced by fp8_e4m3 [{ar['source']}]"
            )
        kv = ar["tokenspeed_mla_forces_kv_cache_dtype"]
    pre_was_alias = pre in aliases
    attn, dec, pre = (aliases.get(x, x) for x in (attn, dec, pre))
    if pre_was_alias and pre == "cutedsl_mla":
        pre = "trtllm_mla"  # cutedsl_mla is decode-only

    mb = rules["mla_backends"]

    def uses(backend: str) -> bool:
        flags = mb[backend]["applies_to"]
        vals = {"--attention-backend": attn, "--decode-attention-backend": dec, "--prefill-attention-backend": pre}
        return any(vals[f] == backend for f in flags)

    # trtllm_mla
    r = mb["trtllm_mla"]
    if uses("trtllm_mla"):
        if major is not None and major not in r["compute_capability_majors"]:
            out.append(f"trtllm_mla on sm{major}x: {r['message']} [{r['source']}]")
        if kv not in r["kv_cache_dtypes"]:
            out.append(
                f"trtllm_mla with --kv-cache-dtype {kv}: TensorRT-LLM MLA backend only supports "
                f"kv-cache-dtype of {', '.join(r['kv_cache_dtypes'])} [{r['source']}]"
            )
        if include_overrides and page is not None and page not in r["page_sizes"]:
            out.append(
                f"[override] trtllm_mla supports --page-size {r['page_sizes']}; {page} would be changed "
                f"to {r['page_size_otherwise']} [{r['source']}]"
            )
    # cutedsl_mla
    r = mb["cutedsl_mla"]
    if uses("cutedsl_mla"):
        if pre == "cutedsl_mla":
            out.append(f"--prefill-attention-backend cutedsl_mla: CuteDSL MLA only supports decoding for now [{r['source']}]")
        if major is not None and major not in r["compute_capability_majors"]:
            out.append(f"cutedsl_mla on sm{major}x: {r['message']} [{r['source']}]")
        if kv not in r["kv_cache_dtypes"]:
            out.append(
                f"cutedsl_mla with --kv-cache-dtype {kv}: CuteDSL MLA backend only supports "
                f"kv-cache-dtype of {', '.join(r['kv_cache_dtypes'])} [{r['source']}]"
            )
        if include_overrides and page is not None and page not in r["page_sizes"]:
            out.append(
                f"[override] cutedsl_mla supports --page-size {r['page_sizes']}; {page} would be changed "
                f"to {r['page_size_otherwise']} [{r['source']}]"
            )
    # flashmla
    r = mb["flashmla"]
    if uses("flashmla") and include_overrides and page is not None and page not in r["page_sizes"]:
        out.append(f"[override] flashmla only supports --page-size 64; {page} would be changed to 64 [{r['source']}]")
    # fa3 with an MLA model: SM90 only
    r = mb["fa3"]
    eff = {dec or attn, pre or attn}
    if "fa3" in eff and major is not None and major not in r["compute_capability_majors"]:
        out.append(f"fa3 on sm{major}x: {r['message']} [{r['source']}]")

    # parallelism
    r = rules["parallel"]
    tp = get("--tp-size", 1)
    dp = get("--dp-size", 1)
    attn_dp = get("--attn-dp-size", 1)
    attn_cp = get("--attn-cp-size", 1)
    if get("--enable-dp-attention", False) and attn_dp == 1:
        attn_dp, dp = dp, 1
    if attn_dp < 1:
        out.append(f"--attn-dp-size must be positive (got {attn_dp}) [{r['source']}]")
    elif attn_dp > 1 and dp > 1:
        out.append(
            f"--dp-size {dp} with --attn-dp-size {attn_dp}: data-parallel replicas combined with "
            f"attention data parallelism are not supported [{r['source']}]"
        )
    elif attn_dp > 1 and tp % attn_dp != 0:
        out.append(f"tp_size {tp} must be divisible by attn_dp_size {attn_dp} (assert tp_size % attn_dp_size == 0) [{r['source']}]")
    if attn_cp > 1:
        if tp % attn_cp != 0:
            out.append(f"tp_size must be divisible by attn_cp_size ({tp} % {attn_cp}) [{r['source']}]")
        elif tp % (max(attn_dp, 1) * attn_cp) != 0:
            out.append(f"tp_size must be divisible by attn_dp_size * attn_cp_size [{r['source']}]")
    return out


# ---------------------------------------------------------------------------
# public entry point
# ---------------------------------------------------------------------------


def check_command(
    argv: list[str],
    engine: str,
    gpu_arch: str | None = None,
    *,
    model_max_len: int | None = None,
    allow_long_max_model_len: bool = False,
    sparse_attention: bool | None = None,
    gpus_per_node: int | None = None,
    include_overrides: bool = True,
) -> list[str]:
    """Check an engine command line; return a list of problems (empty = accepted).

    argv: for vLLM everything after ``vllm serve`` (``[MODEL, "-tp", "8", ...]``),
        for SGLang everything after ``python -m sglang.launch_server``.
    engine: ``"vllm"`` or ``"sglang"``.
    gpu_arch: ``"sm90"`` (Hopper), ``"sm100"`` (Blackwell), ``"sm80"``,
        ``"sm89"``, ... or None to skip compute-capability checks.
    model_max_len: the model's maximum context (e.g. 163840 for DeepSeek-V3);
        enables the vLLM ``--max-model-len`` / chunked-prefill checks that
        need it.
    allow_long_max_model_len: as if VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 were set.
    sparse_attention: True for sparse-attention MLA models (DeepSeek-V3.2),
        False for dense MLA models, None to not check backend sparsity.
    gpus_per_node: GPUs on one node; enables vLLM's "World size (N) is larger
        than the number of available GPUs" check.
    include_overrides: also report settings the engine silently replaces
        (SGLang page sizes forced by MLA backends); those messages start
        with ``[override]``.
    """
    key = _ENGINE_ALIASES.get(engine.lower())
    if key is None:
        raise ValueError(f"unknown engine {engine!r}; expected 'vllm' or 'sglang'")
    argv = [str(a) for a in argv]
    major = _gpu_major(gpu_arch)
    fx = load_fixture(key)
    problems: list[str] = []
    if key == "vllm":
        argv = _vllm_preprocess(argv, problems)
    try:
        values, given, positionals, parse_problems = _parse(argv, key)
    except _ParseError as e:
        return problems + [f"{fx['program']}: error: {e}"]
    problems += parse_problems
    if key == "vllm":
        problems += _vllm_rules(
            fx, values, given, positionals, major, model_max_len, allow_long_max_model_len, sparse_attention,
            gpus_per_node,
        )
    else:
        problems += _sglang_rules(fx, values, given, major, include_overrides)
    return problems
