"""The layer's dense GEMMs at planned shapes, timed and compared with the step model's roofline.

One check per op of perf.layer_work (the step model's names), each the sum of its GEMMs on this rank, for
the micro-batch of n rows one stage runs (docs/step-model.md section 2, attn.proj):
  attn.proj    wq_a [n, d] x [d, r_q] and wq_b [n, r_q] x [r_q, H_t 192] (or one wq), wkv_a [n, d] x
               [d, 576], the absorbed W_UK bmm [H_t, n, d_n] x [H_t, d_n, d_c] and W_UV bmm
               [H_t, n, d_c] x [H_t, d_c, d_v], wo [n, H_t d_v] x [H_t d_v, d]
  moe.gate     [n, d] x [d, E]
  moe.shared   w1|w3 [n', d] x [d, 2 I_s / tp'] and w2 [n', I_s / tp'] x [I_s / tp', d]
  moe.experts  the experts this EP rank actually hits, perf.layer_work.experts_hit, as one bmm over them:
               [e, m, d] x [e, d, 2 I / moe_tp] and [e, m, I / moe_tp] x [e, I / moe_tp, d]
  ffn.dense    the dense layers' SwiGLU, like moe.shared
Bytes count the weights only, as the step model does (perf.layer_work: an op's bytes are its weight bytes),
so the efficiency a measurement implies is the one the model applies. bf16 on the GPU (fp32 on a CPU);
when the checkpoint is fp8 and the GPU has fp8 tensor cores, the 2-D GEMMs run again through
torch._scaled_mm (per-tensor scales), which is what the step model prices.

Before an op is timed, each of its GEMMs' outputs is checked on a slice (the first SLICE_ROWS rows, SLICE_COLS
columns, the first matrix of a bmm) against the fp64 product of the same inputs; a mismatch fails the op with
the max error, and nothing is timed (GEMM_TOLERANCE: the output's rounding, and the accumulation's over k).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import Callable, Optional

import torch

from mla_planner.engines.parallel import dense_tp
from mla_planner.perf.layer_work import Op, experts_hit, ffn_rows
from mla_planner.specs.attention.kinds import attention_of
from mla_planner.verify.bench import time_fn
from mla_planner.verify.check import GEMM_BAND, Check, Timing, one_line, rates, ratio_check, roofline, skipped
from mla_planner.verify.compare import Comparison, compare
from mla_planner.verify.env import DeviceInfo
from mla_planner.verify.target import Caps, Target


SLICE_ROWS, SLICE_COLS = 4, 64
GEMM_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2.0 ** -7}   # rel; abs = rel x sqrt(k); cos_diff below
Runner = tuple[Callable[[], torch.Tensor], Callable[[torch.Tensor], Comparison]]   # (the call, its output's check)


@dataclass(frozen=True)
class Gemm:
    name: str
    batch: int     # bmm batch; 1 = a plain matrix product
    m: int         # rows (tokens)
    k: int
    n: int

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.k * self.n

    @property
    def weight_elems(self) -> int:
        return self.batch * self.k * self.n


def _swiglu(prefix: str, rows: int, d: int, inter: int) -> list[Gemm]:
    return [Gemm(f"{prefix}.w13", 1, rows, d, 2 * inter), Gemm(f"{prefix}.w2", 1, rows, inter, d)]


def attention_gemms(t: Target, rows: int) -> list[Gemm]:
    s, H = t.chosen.spec, t.chosen.spec.num_attention_heads // t.chosen.layout.tp
    if not attention_of(s).latent:
        return projection_gemms(t, rows)
    d, dc = s.hidden_size, s.kv_lora_rank
    q = ([Gemm("wq_a", 1, rows, d, s.q_lora_rank), Gemm("wq_b", 1, rows, s.q_lora_rank, H * s.qk_head_dim)]
         if s.q_lora_rank else [Gemm("wq", 1, rows, d, H * s.qk_head_dim)])
    return q + [Gemm("wkv_a", 1, rows, d, dc + s.qk_rope_head_dim),
                Gemm("w_uk", H, rows, s.qk_nope_head_dim, dc), Gemm("w_uv", H, rows, dc, s.v_head_dim),
                Gemm("wo", 1, rows, H * s.v_head_dim, d)]


def projection_gemms(t: Target, rows: int) -> list[Gemm]:
    """A kind's attention weights as GEMMs of `rows` tokens on one rank, split as the inventory splits them (column:
    the outputs over TP, row: the inputs): GQA's q/k/v/o, DeepSeek-V4's fused wq_a/wkv, wq_b, grouped wo_a (as one
    GEMM of the same FLOPs), wo_b and the compressor and indexer projections its layers carry."""
    s, tp = t.chosen.spec, t.chosen.layout.tp
    out = []
    for p in attention_of(s).projections(s):
        if len(p.shape) != 2 or p.name.endswith(".ape"):     # V4's compressor position bias is added, not multiplied
            continue
        rows_out, cols_in = p.shape
        rows_out = ceil(rows_out / tp) if p.split == "column" else rows_out
        cols_in = ceil(cols_in / tp) if p.split == "row" else cols_in
        out.append(Gemm(p.name.removeprefix("attn."), 1, rows, cols_in, rows_out))
    return out


def layer_gemms(t: Target, caps: Optional[Caps]) -> dict[str, list[Gemm]]:
    """The GEMMs of each perf.layer_work op at the planned micro-batch (capped on a CPU)."""
    c = t.chosen
    s, layout, engine, per_rank = c.spec, c.layout, c.knobs.engine, c.knobs.dense_per_rank
    rows = min(t.micro_batch, caps.rows) if caps else t.micro_batch
    ops = {"attn.proj": attention_gemms(t, rows)}
    if s.num_dense_layers:
        wide = ceil(ffn_rows(layout, engine, "dense_ffn", rows, per_rank))
        ops["ffn.dense"] = _swiglu("ffn", wide, s.hidden_size,
                                   ceil(s.intermediate_size / dense_tp(layout, engine, "dense_ffn", per_rank)))
    if not s.is_moe:
        return ops
    ops["moe.gate"] = [Gemm("gate", 1, rows, s.hidden_size, s.n_routed_experts)]
    if s.n_shared_experts:
        inter = ceil(s.moe_intermediate_size * s.n_shared_experts / dense_tp(layout, engine, "shared_experts"))
        ops["moe.shared"] = _swiglu("shared", ceil(ffn_rows(layout, engine, "shared_experts", rows)), s.hidden_size,
                                    inter)
    tokens = rows * layout.dp
    hit = experts_hit(s.n_routed_experts / layout.ep, s.n_routed_experts, s.num_experts_per_tok, tokens)
    e = max(1, round(hit))
    m = ceil(tokens * s.num_experts_per_tok / layout.ep / e)
    e = min(e, caps.experts) if caps else e
    inter = ceil(s.moe_intermediate_size / layout.moe_tp)
    ops["moe.experts"] = [Gemm("experts.w13", e, m, s.hidden_size, 2 * inter),
                          Gemm("experts.w2", e, m, inter, s.hidden_size)]
    return ops


def _checker(g: Gemm, x: torch.Tensor, w: torch.Tensor, out_dtype: torch.dtype) -> Callable:
    """The output check of x @ W^T (W [n, k]) or of a bmm x [b, m, k] x w [b, k, n] on the slice."""
    r, c = min(g.m, SLICE_ROWS), min(g.n, SLICE_COLS)
    if g.batch == 1:
        ref = x[:r].double() @ w[:c].double().T
    else:
        ref = x[0, :r].double() @ w[0, :, :c].double()
    rel = GEMM_TOLERANCE[torch.float32 if out_dtype == torch.float32 else torch.bfloat16]
    cos = 1e-10 if out_dtype == torch.float32 else 1e-5

    def check(out: torch.Tensor) -> Comparison:
        part = out[:r, :c] if g.batch == 1 else out[0, :r, :c]
        return compare(g.name, part, ref, rel * g.k ** 0.5, rel, cos)
    return check


def _runner(g: Gemm, dtype: torch.dtype, device: torch.device) -> Runner:
    """x [m, k] @ W^T with W [n, k] (nn.Linear), or a bmm [b, m, k] x [b, k, n]; and its output check."""
    gen = torch.Generator(device).manual_seed(0)
    if g.batch == 1:
        x = torch.randn(g.m, g.k, generator=gen, device=device).to(dtype)
        w = torch.randn(g.n, g.k, generator=gen, device=device).to(dtype)
        return (lambda: torch.nn.functional.linear(x, w)), _checker(g, x, w, dtype)
    x = torch.randn(g.batch, g.m, g.k, generator=gen, device=device).to(dtype)
    w = torch.randn(g.batch, g.k, g.n, generator=gen, device=device).to(dtype)
    return (lambda: torch.bmm(x, w)), _checker(g, x, w, dtype)


def fp8_runner(g: Gemm, device: torch.device) -> Runner:
    """torch._scaled_mm of e4m3 x [m, k] and W^T (W [n, k], so column-major as cuBLASLt wants) with
    per-tensor scales, bf16 out; rows padded to 16 (the fp8 GEMM's alignment); and its output check."""
    if g.batch != 1:
        raise ValueError("fp8 runner takes plain matrix products")
    fp8 = torch.float8_e4m3fn
    x = torch.randn(ceil(g.m / 16) * 16, g.k, device=device).to(fp8)
    w = torch.randn(g.n, g.k, device=device).to(fp8)
    one = torch.ones((), device=device)
    return ((lambda: torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)),
            _checker(g, x, w, torch.bfloat16))


def _time_op(gemms: list[Gemm], make: Callable, dev: DeviceInfo, timing: Timing
             ) -> tuple[Optional[float], dict, list[Comparison]]:
    """Each GEMM's output checked on its slice, then (all matching) the sum of the median times of each GEMM
    (each timed alone, L2 flushed between runs on CUDA); (None, {}, the mismatches) when one does not match."""
    times, bad = {}, []
    for g in gemms:
        fn, check = make(g)
        checked = check(fn())
        if not checked.ok:
            bad.append(checked)
            continue
        times[g.name] = time_fn(fn, dev.torch_device, timing.warmup, timing.repeats)
        del fn
    return (None, {}, bad) if bad else (sum(times.values()), times, [])


def _op_check(t: Target, name: str, gemms: list[Gemm], dev: DeviceInfo, timing: Timing, fp8: bool) -> Check:
    elem = 1 if fp8 else (2 if dev.type == "cuda" else 4)
    kind = "moe" if name == "moe.experts" else "gemm"     # the step model's kind: moe_hbm_efficiency for experts
    op = Op(name, sum(g.weight_elems for g in gemms) * elem, sum(g.flops for g in gemms), kind,
            "fp8" if fp8 else "bf16")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    make = (lambda g: fp8_runner(g, dev.torch_device)) if fp8 else (lambda g: _runner(g, dtype, dev.torch_device))
    measured_s, per_gemm, bad = _time_op(gemms, make, dev, timing)
    predicted_s, evidence = roofline(op, t)
    planned = t.step.layers[t.layer_kind if name != "ffn.dense" else "dense"].terms_s.get(name)
    shapes = ", ".join(f"{g.name} {'%dx' % g.batch if g.batch > 1 else ''}[{g.m}x{g.k}x{g.n}]" for g in gemms)
    detail = (f"{'fp8 _scaled_mm' if fp8 else str(dtype).removeprefix('torch.')}: {shapes}; {evidence['bound']}-bound"
              + (f"; step model {planned * 1e6:,.1f} us for the planned weights" if planned else ""))
    label = f"gemm.{name}" + ("[fp8]" if fp8 else "")
    if measured_s is None:
        wrong = "; ".join(f"{c.name}: max abs error {c.max_abs_err:.3g}, cos_diff {c.cos_diff:.3g}" for c in bad)
        return Check(label, predicted_s, None, "s", None, "output = fp64 product", False,
                     f"{detail}; output does NOT match the fp64 product on a slice ({wrong}); not timed")
    extra = rates(op, predicted_s, measured_s) | {"evidence": evidence | {"seconds": measured_s},
                                                  "per_gemm_s": per_gemm}
    return ratio_check(label, predicted_s, measured_s, "s", GEMM_BAND, dev.type == "cuda",
                       f"{detail}; each output checked against the fp64 product on a slice", extra)


def _fp8_wanted(t: Target, dev: DeviceInfo, name: str) -> bool:
    s = t.chosen.spec
    dtype = s.expert_dtype if name == "moe.experts" else s.weight_dtype
    return dev.has_fp8 and dtype == "fp8" and name != "moe.gate" and hasattr(torch, "_scaled_mm")


def gemm_checks(t: Target, dev: DeviceInfo, timing: Timing, caps: Optional[Caps]) -> list[Check]:
    """One check per op in the working dtype, plus an fp8 twin of each 2-D op when the weights are fp8."""
    out = []
    for name, gemms in layer_gemms(t, caps).items():
        out.append(_op_check(t, name, gemms, dev, timing, fp8=False))
        flat = [g for g in gemms if g.batch == 1]
        if _fp8_wanted(t, dev, name) and flat:
            try:
                out.append(_op_check(t, name, flat, dev, timing, fp8=True))
            except (RuntimeError, TypeError, ValueError) as exc:
                out.append(skipped(f"gemm.{name}[fp8]", f"torch._scaled_mm unavailable here: {one_line(exc)}"))
    return out
