"""The engine-kernel adapters call each library as the engine calls it (issue 23 review, items 4, 5, 9), shown on a
CPU with stand-ins: each stand-in has the real function's signature (copied from vLLM 0.33.0, SGLang 0.5.23 and
the FlashInfer call vLLM makes; a keyword the library does not take raises TypeError, as the library would) and
computes what the library documents (descales applied, the query split into its latent and RoPE parts, the lse),
so an adapter that passes a wrong scale, a wrong slice or a wrong layout fails the output check. Which build a plan
gets: SGLang's own FlashMLA wrapper first (fp8 too), then sgl_kernel's, then the flash_mla package. The real
libraries run only on a GPU (tests/test_verify_gpu.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from mla_planner.specs.catalogue import load_model
from mla_planner.specs.knobs import Knobs
from mla_planner.verify import engine_fa3, engine_flashinfer, engine_flashmla, engine_triton
from mla_planner.verify.bench import checked_and_timed, decode_inputs
from mla_planner.verify.engine_kernels import engine_kernel
from mla_planner.verify.kernel import softmax_scale
from mla_planner.verify.kv_storage import FP8

SCALE = softmax_scale(128, 64, {"factor": 40, "mscale_all_dim": 1.0})
CPU = torch.device("cpu")


def paged(q, cache, table, seqlens, scale):
    """out [B, H, 512] (bf16) and lse [B, H] (fp32) of q [B, H, 576] over cache [nb, bs, 576] (fp32 values)."""
    outs, lses = [], []
    for b in range(q.shape[0]):
        rows = cache[table[b].long()].reshape(-1, cache.shape[-1])[:int(seqlens[b])]
        s = q[b].float() @ rows.T * scale
        lse = torch.logsumexp(s, -1)
        outs.append((torch.exp(s - lse[:, None]) @ rows[:, :512]).to(torch.bfloat16))
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                           num_splits=None, softmax_scale=None, causal=False, descale_q=None, descale_k=None,
                           is_fp8_kvcache=False, indices=None, attn_sink=None, extra_k_cache=None,
                           extra_indices_in_kvcache=None, topk_length=None, extra_topk_length=None, kv_format=None,
                           *, use_legacy=True):
    """SGLang's wrapper (a superset of vLLM's vendored and the upstream bf16 call)."""
    assert tile_scheduler_metadata == "meta" and head_dim_v == 512 and causal and k_cache.dim() == 4
    if q.dtype == FP8:
        assert descale_q is not None and descale_k is not None, "an fp8 query needs both descales"
    dq = float(descale_q) if descale_q is not None else 1.0
    dk = float(descale_k) if descale_k is not None else 1.0
    out, lse = paged(q.squeeze(1).float() * dq, k_cache.squeeze(2).float() * dk, block_table, cache_seqlens,
                     softmax_scale)
    return out.unsqueeze(1), lse.unsqueeze(-1)


def get_mla_metadata(cache_seqlens=None, num_q_tokens_per_head_k=None, num_heads_k=None, num_heads_q=None,
                     is_fp8_kvcache=False, topk=None):
    CALLS.append({"heads": num_q_tokens_per_head_k, "fp8": is_fp8_kvcache})
    return "meta", "splits"


def get_mla_metadata_dense_fp8(cache_seqlens, num_q_tokens_per_head_k, num_heads_k):
    return "meta", "splits"


def flash_mla_with_kvcache_fp8(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                               num_splits, softmax_scale=None, causal=False, descale_q=None, descale_k=None):
    assert q.dtype == FP8 and k_cache.dtype == FP8
    return flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                                  num_splits, softmax_scale, causal, descale_q, descale_k)


CALLS: list = []
FLASHMLA = SimpleNamespace(get_mla_metadata=get_mla_metadata, flash_mla_with_kvcache=flash_mla_with_kvcache)
VLLM_FLASHMLA = SimpleNamespace(get_mla_metadata=get_mla_metadata, flash_mla_with_kvcache=flash_mla_with_kvcache,
                                get_mla_metadata_dense_fp8=get_mla_metadata_dense_fp8,
                                flash_mla_with_kvcache_fp8=flash_mla_with_kvcache_fp8,
                                is_flashmla_dense_supported=lambda: (True, None))


def decode_attention_fwd(q, k_buffer, v_buffer, o, lse, req_to_token, b_seq_len, attn_logits, num_kv_splits,
                         sm_scale, page_size=1, logit_cap=0.0, k_scale=None, v_scale=None, is_mla=False):
    """vLLM's Triton decode: writes o and lse in place; an fp8 cache dequantised with k_scale."""
    assert is_mla and attn_logits.shape[2] == num_kv_splits and page_size == k_buffer.shape[1]
    assert v_buffer.data_ptr() == k_buffer.data_ptr() and v_buffer.shape[-1] == 512   # V: the latent's first 512
    ks = float(k_scale) if k_buffer.dtype == FP8 else 1.0
    out, l = paged(q, k_buffer.squeeze(2).float() * ks, req_to_token, b_seq_len, sm_scale)
    o.copy_(out)
    lse.copy_(l)


def varlen(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, seqused_k=None, q_v=None,
           dropout_p=0.0, softmax_scale=None, causal=False, window_size=None, softcap=0.0, alibi_slopes=None,
           deterministic=False, return_attn_probs=False, block_table=None, return_softmax_lse=False, out=None,
           scheduler_metadata=None, q_descale=None, k_descale=None, v_descale=None, num_splits=0, output_scale=None,
           fa_version=2, s_aux=None, cp_world_size=1, cp_rank=0, cp_tot_seqused_k=None):
    """vllm.vllm_flash_attn.flash_attn_varlen_func with q_v: scores q.k + q_v.v over the paged k and v."""
    assert fa_version == 3 and scheduler_metadata == "schedule" and max_seqlen_q == 1 and not return_softmax_lse
    cache = torch.cat([v.squeeze(-2), k.squeeze(-2)], -1).float()
    return paged(torch.cat([q_v, q], -1), cache, block_table, seqused_k, softmax_scale)[0]


def get_scheduler_metadata(batch_size, max_seqlen_q, max_seqlen_k, num_heads_q, num_heads_kv, headdim,
                           cache_seqlens, qkv_dtype=torch.bfloat16, headdim_v=None, cu_seqlens_q=None,
                           cu_seqlens_k_new=None, cache_leftpad=None, page_size=None, max_seqlen_k_new=0,
                           causal=False, window_size=(-1, -1), has_softcap=False, num_splits=0, pack_gqa=None,
                           sm_margin=0):
    assert (headdim, headdim_v, num_heads_kv, causal) == (64, 512, 1, True)
    return "schedule"


def with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                 cache_batch_idx=None, cache_leftpad=None, page_table=None, cu_seqlens_q=None, cu_seqlens_k_new=None,
                 max_seqlen_q=None, rotary_seqlens=None, q_descale=None, k_descale=None, v_descale=None,
                 softmax_scale=None, causal=False, window_size=(-1, -1), attention_chunk=None, softcap=0.0,
                 rotary_interleaved=True, scheduler_metadata=None, num_splits=0, pack_gqa=None, only_qv=False,
                 sm_margin=0, return_softmax_lse=False, sinks=None, score_mod=None, aux_tensors=None, sfq=None,
                 sfk=None, sfv=None, rel_bias=None, rel_bias_prep_cache=None, ver=3, out=None, max_seqlen_k=None,
                 mask_mod=None):
    """SGLang's flash_attn_with_kvcache (FA3, MLA: q = the RoPE part, qv = the latent part)."""
    assert ver == 3 and k_cache.dtype == v_cache.dtype == q.dtype, "SGLang casts the cache to the query's dtype"
    cache = torch.cat([v_cache.squeeze(-2), k_cache.squeeze(-2)], -1).float()
    return paged(torch.cat([qv, q], -1), cache, page_table, cache_seqlens, softmax_scale)[0]


def trtllm(query, kv_cache, workspace_buffer, qk_nope_head_dim, kv_lora_rank, qk_rope_head_dim, block_tables,
           seq_lens, max_seq_len, out=None, bmm1_scale=1.0, bmm2_scale=1.0):
    """FlashInfer's trtllm-gen MLA decode as vLLM calls it: softmax(bmm1 x q.k) @ v x bmm2."""
    assert (kv_lora_rank, qk_rope_head_dim) == (512, 64) and kv_cache.dim() == 4
    out_, _ = paged(query.squeeze(1).float(), kv_cache.squeeze(1).float(), block_tables, seq_lens, bmm1_scale)
    return (out_.float() * bmm2_scale).to(torch.bfloat16).unsqueeze(1)


ADAPTERS = {
    "FlashMLA bf16 (any build)": ("bf16", lambda: engine_flashmla.bf16_build(FLASHMLA), False),
    "FlashMLA fp8 (vLLM)": ("fp8", lambda: engine_flashmla.vllm_fp8_build(VLLM_FLASHMLA), True),
    "FlashMLA fp8 (SGLang's wrapper)": ("fp8", lambda: engine_flashmla.sglang_fp8_build(FLASHMLA), True),
    "vLLM TRITON_MLA bf16": ("bf16", lambda: engine_triton.triton_build(decode_attention_fwd), False),
    "vLLM TRITON_MLA fp8": ("fp8", lambda: engine_triton.triton_build(decode_attention_fwd), False),
    "vLLM FLASH_ATTN_MLA": ("bf16", lambda: engine_fa3.vllm_build(varlen, get_scheduler_metadata, True), False),
    "SGLang fa3 bf16": ("bf16", lambda: engine_fa3.sglang_build(with_kvcache), False),
    "SGLang fa3 fp8": ("fp8", lambda: engine_fa3.sglang_build(with_kvcache), False),
    "FlashInfer trtllm-gen bf16": ("bf16", lambda: engine_flashinfer.trtllm_build(128), False),
    "FlashInfer trtllm-gen fp8": ("fp8", lambda: engine_flashinfer.trtllm_build(128), True),
}


@pytest.mark.parametrize("name", ADAPTERS)
def test_each_adapter_passes_the_output_check_against_a_faithful_stand_in(name, monkeypatch):
    kv, make, fp8_query = ADAPTERS[name]
    monkeypatch.setattr(engine_flashinfer, "TRTLLM_MLA", trtllm)
    inp = decode_inputs(2, 300, 16, 64, torch.bfloat16, CPU, SCALE, kv)
    CALLS.clear()
    checked, time_s = checked_and_timed(inp, make(), SCALE, CPU, 0, 1, fp8_query)
    assert checked.ok and time_s > 0, (name, checked.text)
    assert f"({'fp8' if fp8_query else 'bf16'} tolerances)" in checked.text
    if name == "FlashMLA fp8 (SGLang's wrapper)":
        assert CALLS and all(c["fp8"] and c["heads"] == 16 for c in CALLS)    # is_fp8_kvcache=True, as SGLang


def test_sglang_plans_take_sglangs_own_flashmla_wrapper_first(monkeypatch):
    wrapper, sgl_kernel, upstream = object(), object(), object()
    for attr, value in (("VLLM_OPS", None), ("SGL_WRAPPER", wrapper), ("SGL_OPS", sgl_kernel),
                        ("UPSTREAM_OPS", upstream)):
        monkeypatch.setattr(engine_flashmla, attr, value)
    assert engine_flashmla.library("sglang", "bf16")[0] is wrapper
    assert engine_flashmla.library("sglang", "fp8")[:2] == (wrapper, f"{engine_flashmla.SGL_WRAPPER_NAME} (fp8)")
    monkeypatch.setattr(engine_flashmla, "SGL_WRAPPER", None)
    assert engine_flashmla.library("sglang", "bf16")[0] is sgl_kernel
    assert "not importable" in engine_flashmla.library("sglang", "fp8")[2]
    monkeypatch.setattr(engine_flashmla, "SGL_OPS", None)
    assert engine_flashmla.library("sglang", "bf16")[0] is upstream
    assert engine_flashmla.library("vllm", "bf16")[0] is upstream            # vLLM's build absent
    assert "vLLM's own" in engine_flashmla.library("vllm", "fp8")[2]


def test_the_hopper_backends_plans_get_have_adapters(monkeypatch):
    """On a GPU with the libraries importable (stand-ins here), the backends `plan` picks on H100/H200 run the
    engine's kernel: SGLang fa3 (bf16, fp8) and flashmla fp8, vLLM FLASH_ATTN_MLA and TRITON_MLA; fp8_query only
    where the kernel quantises the query (FlashMLA, FlashInfer)."""
    monkeypatch.setattr(engine_fa3, "SGL_WITH_KVCACHE", with_kvcache)
    monkeypatch.setattr(engine_fa3, "VLLM_VARLEN", varlen)
    monkeypatch.setattr(engine_fa3, "VLLM_SCHEDULE", get_scheduler_metadata)
    monkeypatch.setattr(engine_triton, "DECODE_ATTENTION_FWD", decode_attention_fwd)
    monkeypatch.setattr(engine_flashmla, "SGL_WRAPPER", FLASHMLA)
    spec = load_model("deepseek-v2-lite").spec
    for engine, backend, kv, quantised in (("sglang", "fa3", "bf16", False), ("sglang", "fa3", "fp8", False),
                                           ("sglang", "flashmla", "fp8", True), ("vllm", "FLASH_ATTN_MLA", "bf16", False),
                                           ("vllm", "TRITON_MLA", "fp8", False)):
        k = engine_kernel(Knobs(engine=engine, attention_backend=backend, kv_cache_dtype=kv), spec, "cuda")
        assert k.build is not None and k.fp8_query == quantised, (engine, backend, kv, k.why_not)
    flash_attn_fp8 = engine_kernel(Knobs(attention_backend="FLASH_ATTN_MLA", kv_cache_dtype="fp8"), spec, "cuda")
    assert flash_attn_fp8.build is None and "no fp8 cache path" in flash_attn_fp8.why_not
    cutlass = engine_kernel(Knobs(attention_backend="CUTLASS_MLA"), spec, "cuda")
    assert cutlass.build is None and "no adapter for CUTLASS_MLA (vllm)" in cutlass.why_not
