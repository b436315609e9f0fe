"""The naive references every timed attention kernel is checked against before it is timed, and the check.

Each reference reads one sequence at a time, token by token through its block table, dequantises the rows it
read to fp64 (kv_storage: exact, power-of-two scales) and computes softmax(q k^T x scale) v in fp64 with plain
torch ops: no paging helper, no split, no fp32 softmax shared with the kernels under test (verify/kernel.py,
sparse_kernel.py, compressed_kernel.py, the engines' kernels). The kernel runs on a slice (its first few
sequences, their whole context) and its output and log-sum-exp are compared with FlashMLA's rule
(compare.compare: every element within an absolute OR a relative tolerance, and the global cos_diff bounded),
at tolerances for the precision it computes in (TOLERANCES; the absolute one a fraction of the reference output's
RMS). Sparse kernels choose tokens (DSA's top-k, V4's
CSA top-k): the reference attends to the tokens the kernel chose, and separately checks that choice: as many as
it should be, inside the sequence, and no chosen token scoring below the reference's k-th best by more than
the scores' rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from mla_planner.verify.compare import Comparison, compare
from mla_planner.verify.kv_storage import StoredKV

SLICE_SEQUENCES = 2      # sequences of the timed problem each kernel is checked on
# (abs as a fraction of the reference output's RMS, rel, cos_diff) for the output; the lse's (absolute: a log)
# in LSE_TOLERANCES. Relative to the output's magnitude, so an output of small values (a long context averages
# the latents) is held to the same standard as a large one. Measured on the check's own inputs (bench.decode_inputs:
# scores spread by bench.SCORE_STD, DeepSeek-V3's scale, 64-4096 tokens, 16 heads; the emulated kernels of
# tests/test_verify_fp8.py): a kernel computing in fp32 (the CPU rehearsal) is within 1e-5 x RMS; one rounding P
# to bf16 gives cos_diff <= 2e-6 and max error <= 0.021 x RMS (bf16: FlashMLA's rel 2.01/128 and cos_diff 1e-5);
# one that rounds P to e4m3 (the engines' fp8 kernels; the query and cache are e4m3 already) cos_diff <= 2.1e-4 and
# max error <= 0.11 x RMS. A wrong kernel is far outside: a halved softmax scale gives cos_diff >= 0.26, the RoPE
# part of the query dropped >= 0.076, the query ignored >= 0.77, each with errors above 2 x RMS.
TOLERANCES = {"fp32": (1e-3, 1e-4, 1e-9), "bf16": (0.05, 2.01 / 128, 1e-5), "fp8": (0.25, 0.125, 2e-3)}
LSE_TOLERANCES = {"fp32": (1e-5, 1e-5, 1e-10), "bf16": (1e-3, 1e-3, 1e-6), "fp8": (1e-2, 1e-2, 1e-5)}


@dataclass(frozen=True)
class OutputCheck:
    ok: bool
    sequences: int
    max_abs_err: float
    cos_diff: float
    text: str


def precision_of(out: Tensor, fp8_query: bool = False) -> str:
    """The tolerance class of a kernel's output: fp32, bf16 (any 16-bit float) or fp8 (it quantises the query)."""
    if fp8_query:
        return "fp8"
    return "fp32" if out.dtype in (torch.float32, torch.float64) else "bf16"


def rows_of(kv: StoredKV, table_row: Tensor, positions: Tensor) -> Tensor:
    """fp64 rows [n, D] at token `positions` of one sequence, read one by one through its block-table row."""
    bs = kv.cache.shape[1]
    pos = positions.long().cpu()
    blocks = table_row.cpu().long()[pos // bs]
    raw = kv.cache[blocks.to(kv.cache.device), (pos % bs).to(kv.cache.device)]
    return StoredKV(kv.kind, raw, kv.k_scale).dequantized(torch.float64).cpu()


def attend(q: Tensor, rows: Tensor, scale: float, value_dim: int, sink: Optional[Tensor] = None
           ) -> tuple[Tensor, Tensor]:
    """fp64 softmax attention of q [H, D] over rows [n, D] (V = the first value_dim columns): out [H, value_dim]
    and lse [H]; an attention sink [H] joins the denominator only. No rows: out 0 and lse +inf (FlashMLA)."""
    q = q.double().cpu()
    if rows.shape[0] == 0 and sink is None:
        return torch.zeros(q.shape[0], value_dim, dtype=torch.float64), torch.full((q.shape[0],), float("inf"),
                                                                                   dtype=torch.float64)
    s = q @ rows.T * scale                                                   # [H, n]
    lse = torch.logsumexp(s, -1)
    if sink is not None:
        lse = torch.logaddexp(lse, sink.double().cpu())
    return torch.exp(s - lse[:, None]) @ rows[:, :value_dim], lse


def dense(q: Tensor, kv: StoredKV, block_table: Tensor, seqlens: Tensor, scale: float, n: int,
          value_dim: int = 512) -> tuple[Tensor, Tensor]:
    """MLA decode of the first n sequences over their whole context: out [n, H, value_dim], lse [n, H] (fp64)."""
    outs = [attend(q[b], rows_of(kv, block_table[b], torch.arange(int(seqlens[b]))), scale, value_dim)
            for b in range(n)]
    return torch.stack([o for o, _ in outs]), torch.stack([lse for _, lse in outs])


def index_scores(q_index: Tensor, weights: Tensor, keys: Tensor) -> Tensor:
    """DSA's indexer score per key, fp64: sum over index heads of weight x relu(q . k); keys [n, e]."""
    return (torch.relu(q_index.double().cpu() @ keys.double().cpu().T) * weights.double().cpu()[:, None]).sum(0)


def choice_problem(chosen: Tensor, scores: Tensor, k: int, rounding: float) -> str:
    """'' when `chosen` (the kernel's positions, -1 = none) is a valid top-k of `scores` up to `rounding`."""
    picked = chosen[chosen >= 0].long().cpu()
    want = min(k, scores.shape[0])
    if picked.numel() != want or picked.unique().numel() != want or (picked >= scores.shape[0]).any():
        return f"chose {picked.numel()} distinct in-range token(s) of {picked.unique().numel()}, expected {want}"
    if want == 0:
        return ""
    kth = torch.topk(scores, want).values[-1]
    worst = scores[picked].min()
    if worst < kth - rounding:
        return f"chose a token scoring {float(worst):.4g} where the k-th best scores {float(kth):.4g}"
    return ""


def check_output(name: str, out: Tensor, lse: Optional[Tensor], ref_out: Tensor, ref_lse: Tensor,
                 precision: str, problems: tuple = ()) -> OutputCheck:
    """Compare a kernel's output (and lse, when it returns one) on the slice with the reference."""
    rel_abs, rel, cos = TOLERANCES[precision]
    finite = ref_out[torch.isfinite(ref_out)].double()
    rms = float(finite.pow(2).mean().sqrt()) if finite.numel() else 0.0
    tol = (rel_abs * rms if rms > 0 else rel_abs, rel, cos)
    o = compare(f"{name} output", out.detach().double().cpu(), ref_out, *tol)
    parts: list[tuple[Comparison, tuple]] = [(o, tol)]
    if lse is not None:
        tol = LSE_TOLERANCES[precision]
        parts.append((compare(f"{name} lse", lse.detach().double().cpu().reshape(ref_lse.shape), ref_lse, *tol), tol))
    words = [f"{p.name}: max abs error {p.max_abs_err:.3g} (tolerance {t[0]:.3g} abs or {t[1]:.3g} rel per "
             f"element), cos_diff {p.cos_diff:.3g} (at most {t[2]:g}), {p.bad_elements} element(s) out"
             for p, t in parts if not p.ok]
    words += list(problems)
    ok = not words
    summary = (f"output checked against the naive fp64 reference on {ref_out.shape[0]} sequence(s): max abs error "
               f"{o.max_abs_err:.3g} (output RMS {rms:.3g}), cos_diff {o.cos_diff:.3g} ({precision} tolerances)")
    text = summary if ok else f"output does NOT match the naive fp64 reference on {ref_out.shape[0]} " \
                              f"sequence(s): {'; '.join(words)}"
    return OutputCheck(ok, ref_out.shape[0], o.max_abs_err, o.cos_diff, text)
