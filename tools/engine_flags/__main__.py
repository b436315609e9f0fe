"""Command line: ``python -m tools.engine_flags`` (run from the repository root).

    python -m tools.engine_flags --vllm-wheel VLLM.whl --sglang-wheel SGLANG.whl \
        [--out-dir mla_planner/data/engines]

Writes ``<out-dir>/vllm-<version>.json`` and/or ``<out-dir>/sglang-<version>.json``
(the version comes from the wheel's METADATA) and prints the flag count of each.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .fixtures import build_sglang, build_vllm, write_json

DESCRIPTION = "Extract the CLI flag tables of vLLM and SGLang from their published wheels."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.engine_flags", description=DESCRIPTION)
    ap.add_argument("--vllm-wheel", type=Path)
    ap.add_argument("--sglang-wheel", type=Path)
    ap.add_argument("--out-dir", type=Path, default=Path("mla_planner/data/engines"))
    args = ap.parse_args(argv)
    if not args.vllm_wheel and not args.sglang_wheel:
        ap.error("give --vllm-wheel and/or --sglang-wheel")
    for engine, wheel, build in (
        ("vllm", args.vllm_wheel, build_vllm),
        ("sglang", args.sglang_wheel, build_sglang),
    ):
        if wheel:
            obj = build(wheel)
            out = args.out_dir / f"{engine}-{obj['version']}.json"
            write_json(obj, out)
            print(f"{out}: {len(obj['flags'])} flags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
