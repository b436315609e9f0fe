"""DeepSeek-V4 (issue 19): the published V4-Pro and V4-Flash-0731 config.json files read, their parameters and weight
bytes, their caches per layer kind, and each engine's capacity rules against the figures those engines compute.

Published figures: deepseek-ai/DeepSeek-V4-Pro and DeepSeek-V4-Flash model cards (1.6T / 49B, 284B / 13B; the Pro
checkpoint 805 GiB). Engine figures: vLLM 0.33.0's own KV-cache planner (`v1/core/kv_cache_planning.py`,
`kv_cache_utils.get_kv_cache_capacity`) run on CPU over the per-layer specs the V4 model code builds, and SGLang
0.5.23's `DSV4PoolConfigurator` arithmetic (docs/dsv4-engines.md sections 3 and 4 say how)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mla_planner.core.errors import InputError
from mla_planner.engines import compressed_kv as ck
from mla_planner.specs import sizing
from mla_planner.specs.attention.compressed import layer_caches, layer_ratios
from mla_planner.specs.catalogue import load_model
PRO, FLASH = Path("tests/fixtures/hf/DeepSeek-V4-Pro"), Path("tests/fixtures/hf/DeepSeek-V4-Flash-0731")
GiB = 2 ** 30


@pytest.fixture(scope="module")
def pro():
    return load_model(str(PRO)).spec


@pytest.fixture(scope="module")
def flash():
    return load_model(str(FLASH)).spec


def test_layer_kinds_from_compress_ratios(pro, flash):
    """Entries past num_hidden_layers (the MTP layer, DSpark's three) are not decoder layers."""
    assert len(pro.compress_ratios) == 62 and len(layer_ratios(pro)) == 61
    assert [layer_ratios(pro).count(r) for r in (0, 4, 128)] == [0, 30, 31]
    assert [layer_ratios(flash).count(r) for r in (0, 4, 128)] == [2, 21, 20]
    assert pro.attention == flash.attention == "csa-hca"
    assert (pro.weight_dtype, pro.expert_dtype) == ("fp8", "mxfp4")   # expert_dtype absent means fp4
    assert flash.dspark_block_size == 5 and flash.dspark_target_layer_ids == (40, 41, 42)


def test_parameters_match_the_published_totals(pro, flash):
    """Total = main model without MTP; activated excludes the input embedding (the model cards' convention)."""
    assert sizing.param_breakdown(pro)["total"] / 1e9 == pytest.approx(1573.0, abs=0.1)      # "1.6T"
    assert sizing.activated_param_breakdown(pro)["total_without_embedding"] / 1e9 == pytest.approx(48.85, abs=0.01)
    assert sizing.param_breakdown(flash)["total"] / 1e9 == pytest.approx(284.3, abs=0.1)     # "284B"
    assert sizing.activated_param_breakdown(flash)["total_without_embedding"] / 1e9 == pytest.approx(13.27, abs=0.01)
    assert sizing.param_breakdown(flash)["routed_experts"] / 1e9 == pytest.approx(277.0, abs=0.05)


def test_weight_bytes_reproduce_the_checkpoint(pro):
    """MXFP4 experts (0.5 B + an e8m0 byte per 32), FP8 blocks, bf16 and fp32 remainder; with the MTP layer and
    the hash-routing tables, the Pro checkpoint's 805 GiB."""
    by = sizing.weight_bytes_by_dtype(pro)
    assert by["mxfp4"] / GiB == pytest.approx(765.6, abs=0.1)
    assert by["fp8"] / GiB == pytest.approx(21.1, abs=0.1)
    assert by["total"] / GiB == pytest.approx(792.3, abs=0.1)
    assert sizing.weight_bytes_breakdown(pro, include_mtp=True)["total"] / GiB == pytest.approx(805.3, abs=0.1)


def test_caches_per_layer_kind(flash):
    caches = {c.name: c for c in layer_caches(flash)}
    assert (caches["swa_kv"].row_bytes, caches["swa_kv"].window, len(caches["swa_kv"].layers)) == (584, 128, 43)
    assert (caches["csa_kv"].tokens_per_row, caches["hca_kv"].tokens_per_row) == (4, 128)
    assert caches["csa_index_keys"].row_bytes == 132 and layer_caches(flash, "mxfp4")[2].row_bytes == 68
    assert (caches["csa_state"].row_bytes, caches["csa_state"].window) == (8192, 8)
    assert (caches["hca_state"].row_bytes, caches["hca_state"].window) == (4096, 128)
    # the unpadded per-token marginal: 21 x (584 + 132) / 4 + 20 x 584 / 128
    assert sizing.kv_bytes_per_token(flash, "fp8_ds_mla") == pytest.approx(21 * 716 / 4 + 20 * 584 / 128)


@pytest.mark.parametrize("model, per_block, fp4_block, swa_groups", [
    (PRO, 1_435_968, None, (1_160_640, 1_123_200)),
    (FLASH, 1_002_240, 917_568, (823_680, 786_240))])
def test_vllm_groups_and_bytes_per_block(model, per_block, fp4_block, swa_groups):
    """The window bucket splits in two groups (_approximate_gcd); every block costs the widest group, the full one."""
    spec = load_model(str(model)).spec
    groups = ck.vllm_groups(spec)
    assert max(g.page_bytes for g in groups) == per_block
    assert tuple(g.page_bytes for g in groups if g.name.startswith("window")) == swa_groups
    if fp4_block:
        assert max(g.page_bytes for g in ck.vllm_groups(spec, "mxfp4")) == fp4_block


def test_vllm_blocks_per_request_depend_on_the_batched_tokens(flash):
    groups = ck.vllm_groups(flash)
    for length in (131072, 1048576):   # (below 2 x 8192 + 127 tokens the window terms are capped by the length)
        assert ck.blocks_per_request(groups, length, 8192) == -(-length // 256) + 6682
    assert ck.blocks_per_request(groups, 131072, 2048) == 2202
    assert ck.blocks_per_request(groups, 131072, 16384) == 13850


@pytest.mark.parametrize("model, length, blocks, tokens", [
    (FLASH, 131072, 53_567, 975_970), (FLASH, 1048576, 53_567, 5_211_455),
    (PRO, 131072, 37_387, 681_177), (PRO, 1048576, 37_387, 3_637_327)])
def test_vllm_logged_capacity_at_50_gib(model, length, blocks, tokens):
    """vLLM's own planner at 50 GiB of KV cache, max-num-batched-tokens 8192, async scheduling."""
    cap = ck.vllm_capacity(load_model(str(model)).spec, 50 * GiB, length, 8192)
    assert (cap.num_blocks, cap.logged_tokens) == (blocks, tokens)
    assert cap.concurrency == pytest.approx(tokens / length, abs=1e-4)


def test_sglang_pools(pro, flash):
    assert ck.sglang_capacity(flash, 0).bytes_per_full_token == pytest.approx(7086.75)
    assert ck.sglang_capacity(pro, 0).bytes_per_full_token == pytest.approx(10115.25)
    assert ck.sglang_capacity(flash, 0, speculative=True).bytes_per_full_token == pytest.approx(7758.75 * 44 / 43)
    assert ck.sglang_capacity(flash, 0).fixed_bytes / GiB == pytest.approx(2.53, abs=0.005)
    assert ck.sglang_capacity(pro, 0).fixed_bytes / GiB == pytest.approx(3.92, abs=0.005)
    cap = ck.sglang_capacity(flash, 50 * GiB)
    assert cap.full_tokens % 256 == 0 and cap.full_tokens == (50 * GiB - cap.fixed_bytes) // 7086.75 // 256 * 256
    assert cap.swa_tokens == int(cap.full_tokens * 0.1) // 256 * 256


def _edited(tmp_path, source, **changes):
    cfg = json.loads((source / "config.json").read_text())
    cfg.update(changes)
    folder = tmp_path / "edited"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


def test_a_v4_config_relabelled_as_v3_is_refused_naming_the_field(tmp_path):
    path = _edited(tmp_path, FLASH, architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3")
    with pytest.raises(InputError, match="compress_ratios is a field of csa-hca attention, but the model declares mla"):
        load_model(path)


@pytest.mark.parametrize("changes, message", [
    ({"compress_ratios": [4] * 10}, "compress_ratios has 10 entries, fewer than num_hidden_layers 43"),
    ({"compress_ratios": [0, 0] + [64] * 44}, "ratio 64 is not one the engines implement"),
    ({"num_key_value_heads": 8}, "num_key_value_heads must be 1"),
    ({"expert_dtype": "int4"}, "expert_dtype 'int4': expected fp4 or fp8"),
    ({"index_topk": None}, "index_topk is required"),
    ({"o_groups": 7}, "o_groups 7 must divide num_attention_heads 64")])
def test_bad_v4_configs_are_refused_in_one_line(tmp_path, changes, message):
    with pytest.raises(InputError, match=message):
        load_model(_edited(tmp_path, FLASH, **changes))


def test_fp8_experts_and_nvfp4_experts(tmp_path):
    assert load_model(_edited(tmp_path, FLASH, expert_dtype="fp8")).spec.expert_dtype == "fp8"
    quant = {**json.loads((FLASH / "config.json").read_text())["quantization_config"], "moe_quant_algo": "NVFP4"}
    assert load_model(_edited(tmp_path, FLASH, quantization_config=quant)).spec.expert_dtype == "nvfp4"


@pytest.mark.parametrize("arch, words", [("DeepseekV41ForCausalLM", "shares its KV across layer groups"),
                                         ("KimiK3ForConditionalGeneration", "Kimi Delta Attention")])
def test_v41_and_kimi_k3_are_refused_with_the_reason(tmp_path, arch, words):
    with pytest.raises(InputError, match=f"{arch} is not supported yet: .*{words}"):
        load_model(_edited(tmp_path, FLASH, architectures=[arch]))


def test_show_reports_the_engine_figures(cli):
    result = cli("show", str(FLASH), "--json")
    facts = json.loads(result.stdout)["compressed_kv"]
    assert facts["layer_kinds"] == {"swa": 2, "csa": 21, "hca": 20}
    assert facts["vllm"]["bytes_per_block"] == 1_002_240
    assert {(r["max_model_len"], r["max_num_batched_tokens"], r["blocks"]) for r in facts["vllm"]["blocks_per_request"]} \
        >= {(131072, 8192, 7194), (131072, 16384, 13850)}
    assert facts["sglang"]["bytes_per_full_token"] == pytest.approx(7086.75)
    text = cli("show", str(FLASH)).stdout
    assert "every block id costs 1,002,240 B" in text and "(and the MTP layer)" not in text


def test_verify_runs_v4_and_times_its_compressed_kernel(cli, tmp_path):
    """verify no longer refuses V4: its attention check times verify/compressed_kernel.py (tests/test_dsv4_verify.py
    holds its bytes and FLOPs to the step model's)."""
    plan = tmp_path / "plan.json"
    result = cli("plan", "-m", str(FLASH), "-t", "8xh200", "--json")
    plan.write_text(result.stdout)
    result = cli("verify", "--plan", str(plan), "--device", "cpu", "--quick", "--json")
    assert result.exit_code != 2 and "csa-hca attention" not in result.stderr, result.output
    check = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "attention")
    assert check["status"] == "info" and check["extra"]["impl"] == "compressed"


def test_the_dspark_draft_is_counted_and_no_mtp_layer_where_it_ships_instead(pro, flash):
    """V4-Flash-0731 ships a DSpark draft (3 window-only MoE layers, main_proj from 3 target layers, the Markov
    head) and no MTP layer though its config says 1: main model + draft = its 166.9 GB checkpoint."""
    params, nbytes = sizing.draft_params_and_bytes(flash)
    assert params / 1e9 == pytest.approx(19.85, abs=0.01) and nbytes / GiB == pytest.approx(10.1, abs=0.05)
    assert sizing.mtp_params(flash) == 0 and not flash.has_mtp_head
    assert (sizing.weight_bytes_breakdown(flash)["total"] + nbytes) / 1e9 == pytest.approx(166.9, abs=0.05)
    assert sizing.draft_params_and_bytes(pro) == (0, 0) and pro.has_mtp_head


@pytest.mark.parametrize("name, folder", [("deepseek-v4-pro", PRO), ("deepseek-v4-flash", FLASH)])
def test_the_built_in_v4_specs_are_their_published_configs(name, folder):
    from dataclasses import replace
    builtin, read = load_model(name).spec, load_model(str(folder)).spec
    assert replace(builtin, name=read.name, hf_id=read.hf_id) == read
