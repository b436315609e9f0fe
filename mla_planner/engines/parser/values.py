"""Value conversion: what the engines' argparse ``type=`` callables and ``choices`` accept."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any


class ParseError(Exception):
    pass


def vllm_human_int(value: str) -> int:
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
    return vllm_human_int(v)


def _sglang_si_iec_int(value: str) -> int:
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
    "human_int": vllm_human_int,
    "human_int_or_auto": _vllm_human_int_or_auto,
    "si_iec_int": _sglang_si_iec_int,
}

def to_number(type_name: str, raw: str):
    """RAW converted as the engine's parser converts a flag of TYPE_NAME (vLLM's '8k', SGLang's '8Ki'); ValueError
    where it would refuse it."""
    return _CONVERTERS.get(type_name, int)(raw)


_TYPE_WORDS = {
    "int": "int",
    "float": "float",
    "json": "JSON",
    "json_or_str": "JSON",
    "human_int": "human-readable int",
    "human_int_or_auto": "human-readable int",
    "si_iec_int": "human-readable int",
}


def convert(spec: dict, opt: str, raw: str) -> Any:
    if spec.get("none_allowed") and raw in ("", "None"):
        return None
    typ = spec.get("type", "str")
    conv = _CONVERTERS.get(typ, str)
    try:
        value = conv(raw)
    except (ValueError, TypeError, ArithmeticError):
        raise ParseError(f"argument {opt}: invalid {_TYPE_WORDS.get(typ, typ)} value: {raw!r}")
    choices = spec.get("choices")
    if choices is not None:
        probe = value
        if spec.get("transform") == "lower_dash_to_underscore" and isinstance(probe, str):
            probe = probe.lower().replace("-", "_")
        if probe not in choices:
            shown = ", ".join(repr(c) for c in choices if c is not None)
            raise ParseError(f"argument {opt}: invalid choice: {raw!r} (choose from {shown})")
    return value
