"""SGLang 0.5.23's computed --mem-fraction-static, term by term (sglang/srt/arg_groups/memory_hook.py:
handle_gpu_memory_settings, reserve_for_graph_mb, reserve_for_deepep_a2a_mb), and the words that explain a low or
negative one."""

from mla_planner.engines.memory_rules import engine_default_knobs
from mla_planner.engines.sglang_defaults import (nvidia_smi_mib, sglang_default_fraction, sglang_reserve_mib,
                                                 sglang_reserve_words)
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

R1 = load_model("deepseek-r1").spec
H200 = load_topology("8xh200")


def knobs(dp: int = 1, **given):
    return engine_default_knobs("sglang", R1, H200, dp, **given)


def test_dp_attention_over_deepep_reserves_its_two_gib_on_top():
    """DP8 on 8 x H200 (143,771 MiB): 512 + 8,192 x 1.5 + 1,024 + 512 x 2 + 1,536 + 512 x 8 x 4.5 = 34,816 MiB, 0.758
    with the experts tensor-parallel; over DeepEP (DP attention with EP over the whole node, NVIDIA) + 1,024 for the
    breakable prefill graphs' DeepEP (reserve_for_graph_mb) and + 2,048 for the decode graphs' (on top of the floor):
    37,888 MiB, 0.736."""
    reserve = sglang_reserve_mib(H200.gpu, Layout(tp=1, dp=8, ep=8), knobs(8), R1)
    assert reserve["deepep"] == 2048 and reserve["prefill_graph_deepep"] == 1024
    assert reserve["dp_attention_graphs"] == 512 * 8 * 4.5 and sum(reserve.values()) == 34_816 + 1024 + 2048
    assert sglang_default_fraction(H200.gpu, Layout(tp=1, dp=8, ep=8), knobs(8), R1) == 0.736
    assert sglang_default_fraction(H200.gpu, Layout(tp=1, dp=8, ep=1), knobs(8), R1) == 0.758
    assert sglang_default_fraction(H200.gpu, Layout(tp=8), knobs(), R1) == 0.886      # SGLang's own resolved value


def test_the_dp_attention_reserve_does_not_need_graphs_and_prefill_graphs_run_where_sglang_captures_them():
    """reserve_for_graph_mb adds the DP-attention term whether or not decode graphs are captured; the prefill graphs'
    1.5 GiB only where SGLang captures them (CUDA, no PP, no DCP, not DeepSeek-V4: cuda_graph_hook.py)."""
    eager = knobs(8, cuda_graphs=False, max_model_len=8192)
    reserve = sglang_reserve_mib(H200.gpu, Layout(tp=1, dp=8, ep=8), eager, R1)
    assert reserve["dp_attention_graphs"] == 512 * 8 * 4.5 and "decode_graphs" not in reserve
    assert not {"prefill_graph", "deepep", "prefill_graph_deepep"} & set(reserve)
    assert sglang_default_fraction(H200.gpu, Layout(tp=1, dp=8, ep=8), eager, R1) == 0.776
    assert "prefill_graph" not in sglang_reserve_mib(H200.gpu, Layout(tp=4, pp=2), knobs(), R1)
    assert sglang_default_fraction(H200.gpu, Layout(tp=4, pp=2), knobs(), R1) == 0.897
    mi355x = load_topology("8xmi355x")
    assert "prefill_graph" not in sglang_reserve_mib(mi355x.gpu, Layout(tp=8), knobs(), R1)


def test_the_floor_lifts_a_small_reserve_to_ten_gib_before_deepep_is_added():
    """Eager TP8 with a 2,048-token chunk: 512 + 3,072 + 1,024 = 4,608 MiB, lifted to 10,240 on a GPU over 60 GiB."""
    eager = knobs(max_num_batched_tokens=2048, cuda_graphs=False)
    reserve = sglang_reserve_mib(H200.gpu, Layout(tp=8), eager, R1)
    assert reserve["floor"] == 10_240 - 4_608 and sum(reserve.values()) == 10_240
    assert sglang_default_fraction(H200.gpu, Layout(tp=8), eager, R1) \
        == round((nvidia_smi_mib(H200.gpu) - 10_240) / nvidia_smi_mib(H200.gpu), 3)


def test_a_negative_default_is_explained_by_its_largest_term():
    """16,384 tokens a DP rank at DP8 is SGLang's --chunked-prefill-size 131,072: 192 GiB of activation reserve,
    more than an H200 holds; SGLang does not clamp the fraction it computes."""
    big = knobs(8, max_num_batched_tokens=16_384)
    assert sglang_default_fraction(H200.gpu, Layout(tp=1, dp=8, ep=8), big, R1) < 0
    words = sglang_reserve_words(H200.gpu, Layout(tp=1, dp=8, ep=8), big, R1)
    assert words.startswith("its arg_groups/memory_hook.py reserves 217.0 GiB outside the pool, 192.0 GiB for "
                            "activations (1.5 MiB a token of the server's --chunked-prefill-size 131,072), 18.0 GiB "
                            "for the decode graphs under DP attention"), words


def test_memory_and_lint_name_the_term_that_makes_the_default_negative(cli):
    import json
    r = cli("memory", "-m", "deepseek-r1", "-t", "8xh200", "-e", "sglang", "--tp", "1", "--dp", "8",
            "--max-num-batched-tokens", "16384", "--json")
    note = next(n for n in json.loads(r.stdout)["notes"] if "SGLang's own default" in n)
    assert note.startswith("--mem-fraction-static -0.546 is SGLang's own default here: its arg_groups/memory_hook.py "
                           "reserves 217.0 GiB outside the pool, 192.0 GiB for activations"), note
    lint = cli("lint", "-t", "8xh200", "--", "python", "-m", "sglang.launch_server", "--model-path",
               "deepseek-ai/DeepSeek-R1", "--tp", "8", "--dp", "8", "--enable-dp-attention",
               "--chunked-prefill-size", "131072")
    assert "SGLang's own fraction is not positive: its arg_groups/memory_hook.py reserves" in lint.stdout
    assert "192.0 GiB for activations" in lint.stdout


def test_amd_runs_mori_so_no_deepep_reserve():
    """On AMD the EP all-to-all is MoRI's (engines.parallel.a2a_library); SGLang's reserve names DeepEP only."""
    for topology, deepep in (("8xmi355x", False), ("8xb200", True)):
        topo = load_topology(topology)
        reserve = sglang_reserve_mib(topo.gpu, Layout(tp=1, dp=8, ep=8), engine_default_knobs("sglang", R1, topo, 8),
                                     R1)
        assert ("deepep" in reserve) is deepep, topology
