"""What SGLang's decode CUDA graphs keep beside the graph pool (engines/cuda_graphs.py sglang_graph_buffer_bytes):
one shared fp32 logits buffer and the backend's page index for the largest size from 0.5.0, every captured size's own
logits (and on FA3 its own page table) before it. The two published capture logs are validate's held-out
`cuda_graph_memory` rows (tests/test_validate.py); here the rule's structure."""

from dataclasses import replace

from mla_planner.core.units import GiB
from mla_planner.engines.cuda_graphs import capture_plan, sglang_graph_buffer_bytes
from mla_planner.engines.memory_rules import engine_default_knobs, engine_rules
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

V3 = load_model("deepseek-v3").spec


def buffers(topology: str, version: str, last: bool = True, **knobs) -> tuple[float, list[int]]:
    topo, layout = load_topology(topology), Layout(tp=8)
    k = engine_default_knobs("sglang", V3, topo, **knobs)
    rules = engine_rules("sglang", version)
    sizes, _ = capture_plan(rules, k, topo.gpu, layout)
    return sglang_graph_buffer_bytes(rules, V3, k, topo.gpu, 1, sizes, last), sizes


def test_from_0_5_one_logits_buffer_and_one_page_index_for_the_largest_size():
    got, sizes = buffers("8xh200", "0.5.23", cuda_graph_max_bs=512, block_size=1)
    assert max(sizes) == 512 and len(sizes) > 40
    logits, index = 4 * V3.vocab_size * 512, 4 * 163840 * 512     # 0.25 GiB + 0.31 GiB
    assert got == logits + index
    # every pipeline stage's graph runner holds the shared logits buffer (graph_shared_output.py); 0.4.x kept the
    # per-size outputs on the last stage only
    assert buffers("8xh200", "0.5.23", last=False, cuda_graph_max_bs=512, block_size=1)[0] == logits + index
    old, sizes = buffers("8xh200", "0.4.6", last=False, cuda_graph_max_bs=512, block_size=1)
    assert old == 4 * 163840 * (512 + sum(sizes))                                   # FA3's tables alone


def test_before_0_5_every_captured_size_keeps_its_logits_and_fa3_its_page_table():
    new, sizes = buffers("8xh200", "0.5.23", cuda_graph_max_bs=256, block_size=1)
    old, same = buffers("8xh200", "0.4.6", cuda_graph_max_bs=256, block_size=1)
    assert same == sizes
    rows = sum(sizes)
    assert old == 4 * V3.vocab_size * rows + 4 * 163840 * (256 + rows)      # FA3: SGLang's default on Hopper
    assert 4.0 < old / GiB < 5.0 and old > 10 * new                          # the 4-5 GiB the 0.4.x logs show
    pinned, _ = buffers("8xh200", "0.4.6", cuda_graph_max_bs=256, block_size=1, attention_backend="flashinfer")
    assert pinned == 4 * V3.vocab_size * rows + 4 * 163840 * 256             # FlashInfer MLA kept no copies


def test_each_backend_keeps_its_own_tables():
    """FlashInfer MLA indexes tokens whatever the page (flashinfer_mla_backend.py), Triton int64 per query token,
    AITER its indices and a uint8 mask; with MTP FA3 keeps three more page tables; DeepSeek Sparse Attention keeps a
    page-size-1 [tokens, context] table on ROCm or with MTP (dsa_backend.py), else only its page table."""
    tokens = 4 * 163840 * 512
    base, _ = buffers("8xh200", "0.5.23", cuda_graph_max_bs=512, block_size=1)
    logits = 4 * V3.vocab_size * 512
    assert buffers("8xh200", "0.5.23", cuda_graph_max_bs=512, block_size=64, attention_backend="flashinfer")[0] == \
        logits + tokens
    assert buffers("8xh200", "0.5.23", cuda_graph_max_bs=512, block_size=1, attention_backend="triton")[0] == \
        logits + 2 * tokens
    assert buffers("8xmi355x", "0.5.23", cuda_graph_max_bs=512, block_size=1, attention_backend="aiter")[0] == \
        logits + tokens + tokens // 4
    mtp, _ = buffers("8xh200", "0.5.23", cuda_graph_max_bs=256, block_size=1, mtp=True)
    assert mtp == 4 * V3.vocab_size * 512 + 4 * 163840 * 256 * 4      # 256 requests of 2 tokens; 4 page tables
    v32 = load_model("deepseek-v3.2").spec
    for topology, mtp_on, wide in (("8xh200", False, 0), ("8xh200", True, 1), ("8xmi355x", False, 1)):
        topo = load_topology(topology)
        k = engine_default_knobs("sglang", v32, topo, cuda_graph_max_bs=256, mtp=mtp_on)
        sizes, _ = capture_plan(engine_rules("sglang"), k, topo.gpu, Layout(tp=8))
        got = sglang_graph_buffer_bytes(engine_rules("sglang"), v32, k, topo.gpu, 1, sizes, True)
        pages, ctx = -(-k.max_model_len // k.block_size), k.max_model_len
        assert got == 4 * v32.vocab_size * max(sizes) + 4 * pages * 256 + wide * 4 * ctx * max(sizes), topology


def test_larger_pages_shrink_the_index_and_vllm_is_not_charged():
    page1, _ = buffers("8xb200", "0.5.23", cuda_graph_max_bs=512, block_size=1)
    page64, _ = buffers("8xb200", "0.5.23", cuda_graph_max_bs=512, block_size=64)    # trtllm_mla's pages
    assert page1 - page64 == 4 * 512 * (163840 - 163840 // 64)
    topo = load_topology("8xh200")
    k = engine_default_knobs("vllm", V3, topo)
    rules = engine_rules("vllm")
    sizes, _ = capture_plan(rules, k, topo.gpu, Layout(tp=8))
    assert sizes and sglang_graph_buffer_bytes(rules, V3, k, topo.gpu, 1, sizes, True) == 0.0
    assert sglang_graph_buffer_bytes(engine_rules("sglang"), V3, replace(k, engine="sglang"), topo.gpu, 1, [], True) == 0
