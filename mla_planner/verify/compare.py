"""Kernel-output comparison in the style of FlashMLA's `check_is_allclose`.

Rules (deepseek-ai/FlashMLA `tests/kernelkit/compare.py`, commit 9241ae3):
- compute in float64; inf/-inf/NaN must sit at the same places with the same values,
  then they are zeroed;
- an element passes when abs_err < abs_tol OR rel_err = abs_err / (|ref| + 1e-6) < rel_tol;
- globally cos_diff = 1 - 2 sum(a r) / sum(a^2 + r^2) must be <= cos_diff_tol.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Comparison:
    name: str
    ok: bool
    bad_elements: int     # elements failing both the abs and the rel test (or special-value mismatches)
    max_abs_err: float
    max_rel_err: float
    cos_diff: float

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "FAIL"
        return (f"{self.name}: {verdict} bad={self.bad_elements} max_abs={self.max_abs_err:.3g} "
                f"max_rel={self.max_rel_err:.3g} cos_diff={self.cos_diff:.3g}")


def _special_mismatches(out: Tensor, ref: Tensor) -> int:
    """Positions where NaN or +-inf differ between out and ref."""
    nan_diff = torch.isnan(out) != torch.isnan(ref)
    inf_diff = (torch.isposinf(out) != torch.isposinf(ref)) | (torch.isneginf(out) != torch.isneginf(ref))
    return int((nan_diff | inf_diff).sum())


def compare(name: str, out: Tensor, ref: Tensor, abs_tol: float, rel_tol: float,
            cos_diff_tol: float = 1e-7) -> Comparison:
    """Compare `out` with `ref` under FlashMLA's abs-or-rel per element + global cos_diff rule."""
    if out.shape != ref.shape:
        raise ValueError(f"{name}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    mismatched = _special_mismatches(out, ref)
    finite = torch.isfinite(ref) & torch.isfinite(out)
    out, ref = out.where(finite, 0.0), ref.where(finite, 0.0)
    abs_err = (out - ref).abs()
    rel_err = abs_err / (ref.abs() + 1e-6)
    bad = int(((abs_err >= abs_tol) & (rel_err >= rel_tol)).sum()) + mismatched
    denom = float((out * out + ref * ref).sum())
    cos_diff = 1.0 - 2.0 * float((out * ref).sum()) / denom if denom > 0 else 0.0
    return Comparison(name, bad == 0 and cos_diff <= cos_diff_tol, bad,
                      float(abs_err.max()) if abs_err.numel() else 0.0,
                      float(rel_err.max()) if rel_err.numel() else 0.0, cos_diff)


def assert_close(name: str, out: Tensor, ref: Tensor, abs_tol: float, rel_tol: float,
                 cos_diff_tol: float = 1e-7) -> Comparison:
    """`compare`, raising AssertionError with the summary line when it fails."""
    result = compare(name, out, ref, abs_tol, rel_tol, cos_diff_tol)
    if not result.ok:
        raise AssertionError(str(result))
    return result
