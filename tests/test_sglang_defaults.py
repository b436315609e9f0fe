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
    """DP8 on 8 x H200 (143,771 MiB): 512 + 8,192 x 1.5 + 1,024 + 512 x 2 + 1,536 + 512 x 8 x 4.5 = 34,816 MiB,
    0.758; the decode graphs run DeepEP (DP attention with EP over the whole node, NVIDIA), so + 2,048: 0.744."""
    reserve = sglang_reserve_mib(H200.gpu, Layout(tp=1, dp=8, ep=8), knobs(8))
    assert reserve["deepep"] == 2048 and reserve["dp_attention_graphs"] == 512 * 8 * 4.5
    assert sum(reserve.values()) == 34_816 + 2048
    assert sglang_default_fraction(H200.gpu, Layout(tp=1, dp=8, ep=8), knobs(8)) == 0.744
    # no EP all-to-all (the experts tensor-parallel), or no decode graphs: no DeepEP reserve
    assert "deepep" not in sglang_reserve_mib(H200.gpu, Layout(tp=1, dp=8, ep=1), knobs(8))
    assert "deepep" not in sglang_reserve_mib(H200.gpu, Layout(tp=1, dp=8, ep=8), knobs(8, cuda_graphs=False))
    assert sglang_default_fraction(H200.gpu, Layout(tp=8), knobs()) == 0.886      # SGLang's own resolved value


def test_the_floor_lifts_a_small_reserve_to_ten_gib_before_deepep_is_added():
    """Eager TP8 with a 2,048-token chunk: 512 + 3,072 + 1,024 = 4,608 MiB, lifted to 10,240 on a GPU over 60 GiB."""
    reserve = sglang_reserve_mib(H200.gpu, Layout(tp=8), knobs(max_num_batched_tokens=2048, cuda_graphs=False))
    assert reserve["floor"] == 10_240 - 4_608 and sum(reserve.values()) == 10_240
    assert sglang_default_fraction(H200.gpu, Layout(tp=8), knobs(max_num_batched_tokens=2048, cuda_graphs=False)) \
        == round((nvidia_smi_mib(H200.gpu) - 10_240) / nvidia_smi_mib(H200.gpu), 3)


def test_a_negative_default_is_explained_by_its_largest_term():
    """16,384 tokens a DP rank at DP8 is SGLang's --chunked-prefill-size 131,072: 192 GiB of activation reserve,
    more than an H200 holds; SGLang does not clamp the fraction it computes."""
    big = knobs(8, max_num_batched_tokens=16_384)
    assert sglang_default_fraction(H200.gpu, Layout(tp=1, dp=8, ep=8), big) < 0
    words = sglang_reserve_words(H200.gpu, Layout(tp=1, dp=8, ep=8), big)
    assert words.startswith("its arg_groups/memory_hook.py reserves 216.0 GiB outside the pool, 192.0 GiB for "
                            "activations (1.5 MiB a token of the server's --chunked-prefill-size 131,072), 18.0 GiB "
                            "for the decode graphs under DP attention"), words


def test_memory_and_lint_name_the_term_that_makes_the_default_negative(cli):
    import json
    r = cli("memory", "-m", "deepseek-r1", "-t", "8xh200", "-e", "sglang", "--tp", "1", "--dp", "8",
            "--max-num-batched-tokens", "16384", "--json")
    note = next(n for n in json.loads(r.stdout)["notes"] if "SGLang's own default" in n)
    assert note.startswith("--mem-fraction-static -0.538 is SGLang's own default here: its arg_groups/memory_hook.py "
                           "reserves 216.0 GiB outside the pool, 192.0 GiB for activations"), note
    lint = cli("lint", "-t", "8xh200", "--", "python", "-m", "sglang.launch_server", "--model-path",
               "deepseek-ai/DeepSeek-R1", "--tp", "8", "--dp", "8", "--enable-dp-attention",
               "--chunked-prefill-size", "131072")
    assert "SGLang's own fraction is not positive: its arg_groups/memory_hook.py reserves" in lint.stdout
    assert "192.0 GiB for activations" in lint.stdout


def test_amd_runs_mori_so_no_deepep_reserve():
    """On AMD the EP all-to-all is MoRI's (engines.parallel.a2a_library); SGLang's reserve names DeepEP only."""
    mi355x = load_topology("8xmi355x")
    k = engine_default_knobs("sglang", R1, mi355x, 8)
    assert "deepep" not in sglang_reserve_mib(mi355x.gpu, Layout(tp=1, dp=8, ep=8), k)
    assert "deepep" in sglang_reserve_mib(load_topology("8xb200").gpu, Layout(tp=1, dp=8, ep=8), k)
