"""The attention output check can tell a wrong engine kernel from a right one at the engines' own precisions
(issue 23 review, item 1). An emulated engine kernel - fp8: the query and cache in e4m3, scores in fp32, P
rounded to e4m3 for the PV product, the output in bf16; bf16: P and the output in bf16 - passes under the
tolerances of its class, and the same kernel with one defect fails: the softmax scale halved, the RoPE part of
the query dropped, the query ignored. With the old inputs (q at randn / 10: scores spread ~0.03) and the old
absolute fp8 tolerance (5e-3, at or above the output's RMS), the first two passed as fp8 kernels. The DSA and
DeepSeek-V4 kernels share the check's inputs: a halved scale fails there too."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.verify import attention, compressed_bench, reference, sparse_bench
from mla_planner.verify.bench import checked_and_timed, decode_inputs
from mla_planner.verify.engine_kernels import EngineKernel
from mla_planner.verify.kernel import softmax_scale
from mla_planner.verify.kv_storage import FP8

SCALE = softmax_scale(128, 64, {"factor": 40, "mscale_all_dim": 1.0})     # DeepSeek-V3's
DEFECTS = ("halved softmax scale", "RoPE part dropped", "query ignored")


def emulated(defect: str = "", p_dtype=FP8):
    """KernelBuild of an engine-like decode kernel: per sequence, scores in fp32 from the stored (fp8 or bf16)
    rows, P rounded to `p_dtype` before the PV product, output in bf16, lse in fp32; `defect` plants a bug."""
    def build(inp, scale):
        def run():
            rows = inp.kv.dequantized(torch.float32)
            outs, lses = [], []
            for b in range(inp.q.shape[0]):
                T = int(inp.seqlens[b])
                kv = rows[inp.block_table[b].long()].reshape(-1, rows.shape[-1])[:T]
                q = inp.q[b].float()
                s = scale / 2 if defect == "halved softmax scale" else scale
                if defect == "RoPE part dropped":
                    q = torch.cat([q[:, :512], torch.zeros_like(q[:, 512:])], -1)
                scores = torch.zeros(q.shape[0], T) if defect == "query ignored" else q @ kv.T * s
                m = scores.amax(-1, keepdim=True)
                p = torch.exp(scores - m)
                total = p.sum(-1, keepdim=True)
                outs.append(((p.to(p_dtype).float() @ kv[:, :512]) / total).to(torch.bfloat16))
                lses.append((m + total.log()).squeeze(-1))
            return torch.stack(outs), torch.stack(lses)
        return run
    return build


@pytest.mark.parametrize("context", [64, 1000, 4096])
@pytest.mark.parametrize("kv, p_dtype", [("fp8", FP8), ("bf16", torch.bfloat16)])
def test_the_emulated_engine_kernel_passes_and_each_planted_defect_fails(kv, p_dtype, context):
    inp = decode_inputs(2, context, 16, 64, torch.bfloat16, torch.device("cpu"), SCALE, kv)
    fp8 = kv == "fp8"
    right, time_s = checked_and_timed(inp, emulated("", p_dtype), SCALE, torch.device("cpu"), 0, 1, fp8)
    assert right.ok and time_s > 0, right.text
    assert f"({kv} tolerances)" in right.text
    for defect in DEFECTS:
        wrong, time_s = checked_and_timed(inp, emulated(defect, p_dtype), SCALE, torch.device("cpu"), 0, 1, fp8)
        assert not wrong.ok and time_s is None, (defect, wrong.text)
        assert wrong.cos_diff > 20 * reference.TOLERANCES[kv][2], (defect, wrong.cos_diff)   # far outside, not near
        # without the lse (FlashInfer returns none) the output alone still fails it
        no_lse = lambda i, s, d=defect: (lambda: (emulated(d, p_dtype)(i, s)()[0], None))  # noqa: E731
        assert not checked_and_timed(inp, no_lse, SCALE, torch.device("cpu"), 0, 1, fp8)[0].ok, defect


def fp8_engine(build):
    return lambda knobs, spec, device_type: EngineKernel("FLASHMLA (vllm)", build, "an emulated fp8 kernel", "",
                                                         fp8_query=True)


@pytest.mark.parametrize("defect", ("",) + DEFECTS)
def test_an_fp8_plans_engine_kernel_is_judged_by_the_fp8_class_end_to_end(cli, monkeypatch, defect):
    """Through `verify`: the engine-kernel seam hands the check an emulated fp8 kernel (fp8_query: the fp8
    tolerance class), on the plan's fp8 cache at the CPU cap (B=2, T=128)."""
    monkeypatch.setattr(attention, "engine_kernel", fp8_engine(emulated(defect)))
    r = cli("verify", "--device", "cpu", "--quick", "-m", "deepseek-v2-lite", "-t", "8xh200", "--layout", "tp=8",
            "--kv-cache-dtype", "fp8", "--only", "attention", "--json")
    data = json.loads(r.stdout)
    att = next(c for c in data["checks"] if c["name"] == "attention")
    assert att["extra"]["kernel"] == "engine" and att["extra"]["kv_cache"].startswith("float8_e4m3fn")
    if not defect:
        assert r.exit_code == 0 and att["extra"]["output_check"]["ok"] and "(fp8 tolerances)" in att["detail"]
        return
    assert r.exit_code == 1 and data["verdict"] == "fail" and att["status"] == "fail", (defect, att["detail"])
    assert "does NOT match the naive fp64 reference" in att["detail"] and att["measured"] is None


def test_the_dsa_and_v4_kernels_with_a_halved_scale_fail_in_bf16():
    """The sparse and V4 kernels draw their queries the same way: a halved softmax scale fails their output check
    at the bf16 class too (the torch kernels in bf16 on a CPU)."""
    dsa = replace(load_model("tests/fixtures/hf/DeepSeek-V3.2").spec, index_topk=16)
    args = (dsa, Layout(tp=8), 2, 100, 64, torch.bfloat16, "cpu", 0, 1, "fp8_ds_mla")
    right = sparse_bench.sparse_attention_benchmark(*args)["output_check"]
    assert right.ok and "(bf16 tolerances)" in right.text
    real = sparse_bench.sparse_decode_core
    halved = lambda q, qi, w, lat, idx, k, scale: real(q, qi, w, lat, idx, k, scale / 2)  # noqa: E731
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sparse_bench, "sparse_decode_core", halved)
        wrong = sparse_bench.sparse_attention_benchmark(*args)["output_check"]
    assert not wrong.ok and wrong.cos_diff > 1e-3
    v4 = replace(load_model("tests/fixtures/hf/DeepSeek-V4-Flash-0731").spec, num_attention_heads=8,
                 index_n_heads=4, index_topk=8, sliding_window=16)
    args = (v4, Layout(tp=1), 2, 300, torch.bfloat16, "cpu", 0, 1)
    assert compressed_bench.compressed_attention_benchmark(*args)["output_check"].ok
    real_v4 = compressed_bench.compressed_decode
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compressed_bench, "compressed_decode",
                   lambda q, cache, ratio, sink, scale, *rest: real_v4(q, cache, ratio, sink, scale / 2, *rest))
        wrong = compressed_bench.compressed_attention_benchmark(*args)
    assert not wrong["output_check"].ok and wrong["time_s"] is None
