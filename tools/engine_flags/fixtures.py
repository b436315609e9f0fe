"""Assembling the two fixture documents and writing them as JSON.

Output is deterministic: JSON with sorted keys, indent 1, UTF-8, one
trailing newline.  Each fixture records the wheel's file name and sha256.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .environment import sglang_environment, vllm_environment
from .flag import flags_to_json
from .sglang_cli import SglangExtractor
from .sglang_fields import SERVER_ARGS
from .sglang_rules import sglang_rules
from .symbols import SourceIndex
from .vllm_cli import VllmExtractor
from .vllm_rules import vllm_rules
from .wheel import sha256_of, wheel_version

VLLM_ARGPARSE_UTILS = "vllm.utils.argparse_utils"


def build_vllm(wheel: Path) -> dict:
    idx = SourceIndex(wheel)
    ex = VllmExtractor(idx)
    ex.extract()
    flags = flags_to_json(ex.flags)
    return {
        "engine": "vllm",
        "version": wheel_version(idx, "vllm"),
        "wheel": wheel.name,
        "wheel_sha256": sha256_of(wheel),
        "program": "vllm serve",
        "parser": {
            "class": "FlexibleArgumentParser (argparse.ArgumentParser subclass)",
            "source": idx.source_of(VLLM_ARGPARSE_UTILS),
            "allow_abbrev": "allow_abbrev=False" not in idx.source_text(VLLM_ARGPARSE_UTILS),
            "underscore_to_dash": True,
            "dotted_json_args": True,
            "O_shorthand": "-O<n> / -O=<n> / -O <0-3> -> --optimization-level <n>",
            "model_option_moved_to_positional": True,
        },
        "positionals": ex.positionals,
        "flags": flags,
        "rules": vllm_rules(idx, ex.ta),
        "environment": vllm_environment(idx),
    }


def build_sglang(wheel: Path) -> dict:
    idx = SourceIndex(wheel)
    ex = SglangExtractor(idx)
    ex.extract()
    flags = flags_to_json(ex.flags)
    m = re.search(r"parser = argparse\.ArgumentParser\(([^)]*)\)", idx.source_text(SERVER_ARGS))
    if not m:
        raise SystemExit("prepare_server_args parser construction changed")
    return {
        "engine": "sglang",
        "version": wheel_version(idx, "sglang"),
        "wheel": wheel.name,
        "wheel_sha256": sha256_of(wheel),
        "program": "python -m sglang.launch_server",
        "parser": {
            "class": "argparse.ArgumentParser(" + m.group(1) + ")",
            "source": idx.source_of(SERVER_ARGS),
            "allow_abbrev": "allow_abbrev" not in m.group(1),
        },
        "positionals": [],
        "flags": flags,
        "rules": sglang_rules(idx),
        "environment": sglang_environment(idx),
    }


def write_json(obj: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, sort_keys=True, indent=1, ensure_ascii=False)
        f.write("\n")
