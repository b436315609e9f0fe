"""DeepSeek-V4 against the engines' own rules where a review found the planner off (issue 19): SGLang's DSpark
without pipeline parallelism, its 256 running requests under speculative decoding, vLLM's pp + 1 batches in flight,
the hyper-connection streams a pipeline stage hands on, the C128 state rings taking SGLang's whole budget, the GPUs
the V4 backends run on, and a drafter the checkpoint does not ship."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mla_planner.engines.compressed_kv import blocks_per_request, in_flight_batches, in_flight_tokens, vllm_groups
from mla_planner.perf.layer_comm import pp_handoff_s
from mla_planner.perf.layer_work import Batch
from mla_planner.specs.calibration import load_calibration
from mla_planner.specs.catalogue import load_model
from mla_planner.specs.layout import Layout
from mla_planner.specs.topology import load_topology

FLASH, PRO = "tests/fixtures/hf/DeepSeek-V4-Flash-0731", "tests/fixtures/hf/DeepSeek-V4-Pro"


def test_sglang_plans_dspark_only_without_pipeline_parallelism(cli):
    """SGLang 0.5.23 arg_groups/speculative_hook.py _handle_dspark: "DSpark pipeline parallelism requires PD prefill"."""
    data = json.loads(cli("plan", "-m", FLASH, "-t", "8xh200", "-e", "sglang", "--mtp", "--json").stdout)
    assert data["candidates"] and all(c["layout"]["pp"] == 1 for c in data["candidates"])


def test_sglang_keeps_v4s_256_running_requests_under_speculative_decoding(cli):
    """Its V4 hook sets 256 before the speculative hook would set 48 (deepseek_v4_hook.py)."""
    d = json.loads(cli("memory", "-m", FLASH, "-t", "8xh200", "-e", "sglang", "--mtp", "--json").stdout)
    assert d["knobs"]["max_num_seqs"] == 256 and d["capacity_rule"]["max_running_requests"] == 256


def test_vllm_keeps_pp_plus_one_batches_in_flight():
    """config/vllm.py max_concurrent_batches: pp + 1 with async scheduling on the V2 model runner (2 at pp 1)."""
    assert in_flight_batches() == 2 and in_flight_batches(pp=2) == 3
    assert in_flight_tokens(8192) == 2 * 8192 and in_flight_tokens(8192, in_flight_batches(pp=2)) == 3 * 8192
    groups = vllm_groups(load_model(FLASH).spec)
    # per sliding group cdiv(W - 1 + F, block) + 1 with F = 3 x 8192: two window groups, C4 and C128 states
    expected = 2 * (-(-(127 + 24576) // 64) + 1) + (-(-(7 + 24576) // 4) + 1) + (-(-(127 + 24576) // 8) + 1)
    assert blocks_per_request(groups, 131072, 8192, batches=3) == 512 + expected


def test_vllm_0_25_reserved_one_batch_per_sliding_group(cli):
    """vLLM 0.25.0's SlidingWindowSpec.max_admission_blocks_per_request reserved W - 1 + max_num_batched_tokens; 0.26
    added max_in_flight_tokens (two batches at pp 1), so the same pool holds fewer requests of the same length."""
    assert in_flight_batches(pp=1, reserves_in_flight=False) == in_flight_batches(pp=4, reserves_in_flight=False) == 1
    args = ("memory", "-m", FLASH, "-t", "8xb200", "--tp", "8", "-e", "vllm", "--max-num-batched-tokens", "8192",
            "--json", "--engine-version")
    old, new = (json.loads(cli(*args, v).stdout)["capacity_rule"] for v in ("0.25.0", "0.26.0"))
    assert (old["in_flight_batches"], new["in_flight_batches"]) == (1, 2)
    groups, length = vllm_groups(load_model(FLASH).spec), 1048576     # V4-Flash's max-model-len by default
    assert old["blocks_per_request"] == blocks_per_request(groups, length, 8192, batches=1)
    assert new["blocks_per_request"] == blocks_per_request(groups, length, 8192, batches=2) > old["blocks_per_request"]


def test_a_pipeline_stage_hands_on_every_hyper_connection_stream():
    """vLLM models/deepseek_v4/nvidia/model.py: intermediate tensors [tokens, hc_mult, hidden]."""
    spec, topo = load_model(FLASH).spec, load_topology("2x8xh200-ib")
    calib, layout, batch = load_calibration(None, topo), Layout(tp=8, pp=2), Batch(8, 4096, prefill=16384)
    four = pp_handoff_s(spec, layout, batch, 0, topo, calib, "vllm")
    two = pp_handoff_s(replace(spec, hc_mult=None), layout, batch, 0, topo, calib, "vllm")
    assert four > 1.5 * two


def test_state_rings_that_take_sglangs_whole_budget_are_named(cli):
    d = json.loads(cli("memory", "-m", PRO, "-t", "8xh200", "-e", "sglang", "--mtp", "--max-num-seqs", "1024",
                       "--max-model-len", "2560", "--json").stdout)
    assert not d["fits"] and d["per_gpu"][0]["kv_pool_bytes"] == 0
    assert any("C128 state rings for 1,024 + 1 request slots" in r and "--max-running-requests" in r
               for r in d["blocking_reasons"])
    assert not any("no room for a KV cache" in r for r in d["blocking_reasons"])


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_engines_refuse_v4_on_a_gpu_their_v4_backend_does_not_run_on(cli, engine):
    d = json.loads(cli("memory", "-m", FLASH, "-t", "2x8xl40s-eth", "-e", engine, "--tp", "8", "--json").stdout)
    assert not d["fits"] and any("needs hopper or blackwell or cdna3 or cdna4 GPUs, not ada" in r
                                 for r in d["blocking_reasons"])


@pytest.mark.parametrize("words, finding", [
    (["vllm", "serve", FLASH, "-tp", "8", "--block-size", "256", "--speculative-config",
      '{"method":"mtp","num_speculative_tokens":1}'], "ships a DSpark draft, not an MTP layer"),
    (["python3", "-m", "sglang.launch_server", "--model-path", FLASH, "--tp-size", "2", "--pp-size", "2",
      "--speculative-algorithm", "DSPARK"], "SGLang refuses DSpark under pipeline parallelism"),
    (["vllm", "serve", PRO, "-tp", "8", "--block-size", "256", "--speculative-config",
      '{"method":"dspark","num_speculative_tokens":5}'], "ships an MTP layer, not a DSpark draft"),
])
def test_lint_holds_the_drafter_to_the_checkpoint(cli, words, finding):
    model = FLASH if FLASH in words else PRO
    r = cli("lint", "-m", model, "-t", "8xb200", "--json", "--", *words)
    assert any(finding in f["text"] and f["level"] == "error" for f in json.loads(r.stdout)["findings"]), r.stdout


@pytest.mark.parametrize("flag", [["--attention_config.use_fp4_indexer_cache=True"],
                                  ["--attention-config", '{"use_fp4_indexer_cache": true}']])
def test_lint_flags_the_old_recipes_fp4_indexer_switch_vllm_no_longer_has(cli, flag):
    """vLLM 0.33's AttentionConfig forbids unknown keys (vllm/config/utils.py @config); the switch is indexer_kv_dtype."""
    r = cli("lint", "-m", PRO, "-t", "8xb200", "--json", "--", "vllm", "serve", PRO, "-tp", "8", "--block-size", "256",
            *flag)
    found = [f for f in json.loads(r.stdout)["findings"] if f["flag"] == "--attention-config"]
    assert found and found[0]["level"] == "error" and "indexer_kv_dtype" in found[0]["text"]
    ok = cli("lint", "-m", PRO, "-t", "8xb200", "--json", "--", "vllm", "serve", PRO, "-tp", "8", "--block-size", "256",
             "--attention-config", '{"indexer_kv_dtype": "mxfp4"}')
    assert not [f for f in json.loads(ok.stdout)["findings"] if f["flag"] == "--attention-config"]
