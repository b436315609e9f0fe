"""`memory` for DeepSeek-V4 (issue 19): capacity as each engine counts it, in requests of --max-model-len, moved by
--max-model-len and --max-num-batched-tokens (vLLM) and by the fixed state rings (SGLang); engines/compressed_kv.py
holds the rules, tests/test_dsv4.py their figures against the engines' own."""

from __future__ import annotations

import json

import pytest

FLASH, PRO = "tests/fixtures/hf/DeepSeek-V4-Flash-0731", "tests/fixtures/hf/DeepSeek-V4-Pro"


def memory(cli, *args):
    result = cli("memory", "--json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("topology", ["8xh200", "8xb200"])
def test_vllm_capacity_for_two_lengths_and_two_batched_token_budgets(cli, topology):
    """Blocks per request = cdiv(L, 256) + a fixed part that grows with --max-num-batched-tokens (2 x it in flight);
    the pool holds about as many blocks whatever they are (only the activation peak grows with the budget), so the
    concurrent requests are blocks / blocks per request, and the logged tokens that times L."""
    seen = {}
    for length in (131072, 1048576):
        for budget in (8192, 16384):
            d = memory(cli, "-m", FLASH, "-t", topology, "--tp", "8", "--max-model-len", str(length),
                       "--max-num-batched-tokens", str(budget))
            rule = d["capacity_rule"]
            assert d["fits"] and d["knobs"]["block_size"] == 256 and d["knobs"]["kv_cache_dtype"] == "fp8_ds_mla"
            assert rule["bytes_per_block"] == 1_002_240
            assert rule["blocks_per_request"] == -(-length // 256) + {8192: 6682, 16384: 13338}[budget]
            assert rule["concurrent_requests"] == pytest.approx(rule["num_blocks"] / rule["blocks_per_request"])
            assert d["kv_capacity_tokens"] == int(rule["concurrent_requests"] * length)
            assert d["max_concurrency"] == rule["concurrent_requests"]
            seen[length, budget] = rule["concurrent_requests"]
    assert seen[131072, 8192] > seen[131072, 16384] and seen[1048576, 8192] > seen[1048576, 16384]
    assert seen[131072, 8192] > seen[1048576, 8192]


@pytest.mark.parametrize("topology", ["8xh200", "8xb200"])
def test_sglang_capacity_is_a_full_token_pool_after_the_state_rings(cli, topology):
    for length in (131072, 1048576):
        d = memory(cli, "-m", FLASH, "-t", topology, "--tp", "8", "-e", "sglang", "--max-model-len", str(length))
        rule = d["capacity_rule"]
        assert d["fits"] and d["knobs"]["max_num_seqs"] == 256 and d["knobs"]["block_size"] == 256
        assert rule["bytes_per_full_token"] == pytest.approx(7086.75)
        assert rule["full_tokens"] == d["kv_capacity_tokens"] and rule["full_tokens"] % 256 == 0
        assert rule["concurrent_requests"] == pytest.approx(min(rule["full_tokens"] / length, 256))
        per_gpu = d["per_gpu"][0]
        assert per_gpu["kv_pool_bytes"] == pytest.approx(rule["fixed_state_bytes"] + rule["full_tokens"] * 7086.75)


def test_dp_attention_gives_each_rank_its_own_pool(cli):
    """TP replicates the single KV head, DP attention does not (vLLM #51454: DP8 gives several times TP8's KV)."""
    tp = memory(cli, "-m", FLASH, "-t", "8xb200", "--tp", "8", "--max-model-len", "131072")
    dp = memory(cli, "-m", FLASH, "-t", "8xb200", "--tp", "1", "--dp", "8", "--max-model-len", "131072",
                "--max-num-batched-tokens", "8192", "--max-num-seqs", "256")
    assert dp["fits"] and dp["kv_tokens_per_replica"] > 4 * tp["kv_tokens_per_replica"]


def test_vllm_refuses_a_length_whose_blocks_do_not_fit_and_names_the_longest(cli):
    d = memory(cli, "-m", PRO, "-t", "8xh200", "--tp", "8", "--max-num-batched-tokens", "131072")
    assert not d["fits"]
    assert len(d["blocking_reasons"]) == 1 and "vLLM refuses to start (the longest that fits: " in d["blocking_reasons"][0]
    assert "lower --max-model-len or --max-num-batched-tokens" in d["blocking_reasons"][0]


@pytest.mark.parametrize("args, message", [
    (["--kv-cache-dtype", "bf16"], "bf16 rows (vLLM's FlashInfer plain-row backend) are not modelled"),
    (["--block-size", "64"], "--block-size 64: vLLM's V4 indexer backend accepts only 256"),
    (["--dcp", "2"], "the engines refuse it for V4's sliding-window caches"),
    (["--tp", "16", "-t", "2x8xh200-ib"], "tp=16 must divide o_groups=8")])
def test_what_the_engines_refuse_for_v4_is_refused_in_one_line(cli, args, message):
    result = cli("memory", "-m", FLASH, *(["-t", "8xh200"] if "-t" not in args else []), *args)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and message in result.stderr


def test_the_report_says_what_moves_the_capacity(cli):
    text = cli("memory", "-m", FLASH, "-t", "8xh200", "--tp", "8").stdout
    assert "concurrent requests of 1,048,576 tokens" in text and "6,682 whatever its length" in text
    assert "what moves it: --max-num-batched-tokens" in text


def test_memory_sizes_the_fp4_index_keys_plan_runs_on_blackwell(cli):
    """68-byte index keys: 917,568 B per block instead of 1,002,240 (docs/dsv4-engines.md), about 9 % more requests."""
    fp4 = memory(cli, "-m", FLASH, "-t", "8xb200", "--tp", "8", "--max-model-len", "131072",
                 "--indexer-kv-dtype", "mxfp4")
    fp8 = memory(cli, "-m", FLASH, "-t", "8xb200", "--tp", "8", "--max-model-len", "131072")
    assert (fp4["capacity_rule"]["bytes_per_block"], fp8["capacity_rule"]["bytes_per_block"]) == (917_568, 1_002_240)
    assert 1.05 < fp4["capacity_rule"]["concurrent_requests"] / fp8["capacity_rule"]["concurrent_requests"] < 1.12
    refused = cli("memory", "-m", FLASH, "-t", "8xh200", "--tp", "8", "--indexer-kv-dtype", "mxfp4")
    assert refused.exit_code == 2 and "vLLM's, for DeepSeek-V4 on Blackwell" in refused.stderr


def test_vllm_counts_v4s_model_buffers_with_the_weights(cli):
    """models/deepseek_v4/nvidia/model.py: top-k indices [max-num-batched-tokens, index_topk] int32 on every rank; with
    speculative decoding the drafter's hidden states [max-num-batched-tokens, hc_mult x hidden] bf16 on the last
    stage (docs/dsv4-engines.md: 32 MiB and 448 MiB for V4-Pro at 8,192)."""
    plain = memory(cli, "-m", PRO, "-t", "8xb200", "--tp", "8", "--max-num-batched-tokens", "8192")
    drafting = memory(cli, "-m", PRO, "-t", "8xb200", "--tp", "8", "--max-num-batched-tokens", "8192", "--mtp")
    assert plain["per_gpu"][0]["terms"]["model_buffers"] == 8192 * 1024 * 4 == 32 * 2 ** 20
    assert drafting["per_gpu"][0]["terms"]["model_buffers"] == 32 * 2 ** 20 + 448 * 2 ** 20
    sglang = memory(cli, "-m", PRO, "-t", "8xb200", "--tp", "8", "-e", "sglang")
    assert "model_buffers" not in sglang["per_gpu"][0]["terms"]
