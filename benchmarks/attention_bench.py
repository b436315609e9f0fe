"""Benchmark the MLA decode attention core against the device's copy bandwidth.

Runs the fast path (Triton split-K on CUDA), the plain torch path and FlashMLA (when
installed) over paged bf16 latent caches, block size 64, and prints achieved GB/s and
TFLOP/s from `mla_planner.specs.attention.cost`. Headline: fast-path GB/s / copy GB/s at
B >= 64, context >= 4096, 16 heads (target >= 0.8; the core is memory-bound there,
FlashMLA docs/20250422-new-kernel-deep-dive.md).

    python benchmarks/attention_bench.py --json attention.json          # CUDA defaults
    python benchmarks/attention_bench.py --sweep                        # + Triton tile sweep
    python benchmarks/attention_bench.py --device cpu                   # tiny smoke run
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch

from mla_planner.verify.bench import IMPLS, attention_benchmark, measure_copy_bandwidth
from mla_planner.verify.fast import TritonConfig, fast_path_name, flash_mla_available


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument("--batch", type=int, nargs="+", help="default: 64 128 (cuda), 2 (cpu)")
    parser.add_argument("--context", type=int, nargs="+",
                        help="tokens per sequence; default 4096 8192 (cuda), 256 (cpu)")
    parser.add_argument("--heads", type=int, nargs="+", help="heads per rank; default 16 128 (cuda), 16 (cpu)")
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"],
                        help="default bfloat16 (cuda), float32 (cpu)")
    parser.add_argument("--impls", nargs="+", choices=IMPLS, help="default: fast torch [flash_mla if installed]")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, help="timed runs per point; default 20 (cuda), 3 (cpu)")
    parser.add_argument("--sweep", action="store_true", help="also sweep Triton tile configs at the first shape")
    parser.add_argument("--json", metavar="FILE", help="write all results as JSON")
    args = parser.parse_args(argv)
    on_cuda = torch.device(args.device).type == "cuda"
    args.batch = args.batch or ([64, 128] if on_cuda else [2])
    args.context = args.context or ([4096, 8192] if on_cuda else [256])
    args.heads = args.heads or ([16, 128] if on_cuda else [16])
    args.dtype = getattr(torch, args.dtype or ("bfloat16" if on_cuda else "float32"))
    args.repeats = args.repeats or (20 if on_cuda else 3)
    args.impls = args.impls or ["fast", "torch"] + (["flash_mla"] if on_cuda and flash_mla_available() else [])
    return args


def run_point(args: argparse.Namespace, batch: int, context: int, heads: int, impl: str,
              config: TritonConfig | None = None) -> dict:
    """One benchmark row; failures (out of memory, unsupported shape) become an `error` entry."""
    try:
        return attention_benchmark(batch, context, heads, args.block_size, args.dtype, args.device, impl,
                                   args.warmup, args.repeats, config)
    except Exception as exc:  # noqa: BLE001 - a benchmark row must not kill the whole table
        return {"impl": impl, "batch": batch, "context": context, "heads": heads,
                "error": f"{type(exc).__name__}: {exc}"}
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def sweep_configs(args: argparse.Namespace) -> list[dict]:
    """Fast path at the first shape for block_n x num_warps x num_stages.

    num_stages - 1 KV tiles of block_n x 576 x 2 B are buffered in shared memory (plus ~18 KiB
    for q); two programs per SM are targeted only when two fit in the SM's 228 KiB.
    """
    rows = []
    for block_n, warps, stages in itertools.product([16, 32, 64], [4, 8], [2, 3, 4]):
        shared_bytes = max(stages - 1, 1) * block_n * 1152 + 18432
        config = TritonConfig(block_n=block_n, num_warps=warps, num_stages=stages,
                              programs_per_sm=2 if shared_bytes <= 110_000 else 1)
        row = run_point(args, args.batch[0], args.context[0], args.heads[0], "fast", config)
        rows.append({"block_n": block_n, "num_warps": warps, "num_stages": stages, **row})
    return rows


def format_table(rows: list[dict], copy_bytes_per_s: float) -> str:
    """One line per row: time, achieved GB/s and TFLOP/s, and GB/s as % of copy bandwidth."""
    header = (f"{'impl':<10} {'path':<16} {'B':>4} {'ctx':>6} {'H':>4} "
              f"{'time_us':>9} {'GB/s':>8} {'TFLOP/s':>8} {'%copy':>6}")
    lines = [header]
    for r in rows:
        shape = f"{r['batch']:>4} {r['context']:>6} {r['heads']:>4}"
        if "error" in r:
            lines.append(f"{r['impl']:<10} {'-':<16} {shape}  {r['error'][:60]}")
            continue
        copy_pct = 100 * r["achieved_gb_per_s"] * 1e9 / copy_bytes_per_s
        lines.append(f"{r['impl']:<10} {r['path']:<16} {shape} {r['time_s'] * 1e6:>9.1f} "
                     f"{r['achieved_gb_per_s']:>8.0f} {r['achieved_tflop_per_s']:>8.1f} {copy_pct:>6.1f}")
    return "\n".join(lines)


def headline(rows: list[dict], copy_bytes_per_s: float) -> dict | None:
    """Worst fast-path / copy-bandwidth ratio over the memory-bound shapes (B >= 64, ctx >= 4096, H = 16)."""
    ratios = [r["achieved_gb_per_s"] * 1e9 / copy_bytes_per_s for r in rows
              if r["impl"] == "fast" and "error" not in r
              and r["batch"] >= 64 and r["context"] >= 4096 and r["heads"] == 16]
    return {"min_fast_over_copy": min(ratios), "points": len(ratios), "target": 0.8} if ratios else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    copy_bytes_per_s = measure_copy_bandwidth(device, size_bytes=2**30 if device.type == "cuda" else 2**26)
    print(f"device {name}; fast path {fast_path_name(device)}; copy bandwidth {copy_bytes_per_s / 1e9:.0f} GB/s")
    rows = [run_point(args, b, t, h, impl)
            for b, t, h, impl in itertools.product(args.batch, args.context, args.heads, args.impls)]
    print(format_table(rows, copy_bytes_per_s))
    sweep = sweep_configs(args) if args.sweep and fast_path_name(device) == "triton-splitk" else []
    if sweep:
        print(f"\nTriton sweep at B={args.batch[0]} ctx={args.context[0]} H={args.heads[0]}:")
        for r in sweep:
            rate = r.get("achieved_gb_per_s")
            print(f"  block_n={r['block_n']:<3} warps={r['num_warps']} stages={r['num_stages']}: "
                  + (f"{rate:.0f} GB/s" if rate else r["error"][:80]))
    head = headline(rows, copy_bytes_per_s)
    if head:
        print(f"\nheadline: fast path >= {100 * head['min_fast_over_copy']:.1f}% of copy bandwidth "
              f"over {head['points']} memory-bound points (target {100 * head['target']:.0f}%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "fast_path": fast_path_name(device), "copy_bytes_per_s": copy_bytes_per_s,
                       "results": rows, "sweep": sweep, "headline": head}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
