"""The backend table agrees with the engines' own code (fixtures read out of the real wheels)."""

import json

import pytest

from mla_planner.engines import backends
from mla_planner.specs.gpu import gpu_table

VLLM = json.load(open("mla_planner/data/engines/vllm-0.33.0.json"))["rules"]["attention_backends"]
SGLANG = json.load(open("mla_planner/data/engines/sglang-0.5.23.json"))["rules"]["mla_backends"]
ARCH_MAJOR = {"ampere": 8, "ada": 8, "hopper": 9, "blackwell": 10}


@pytest.mark.parametrize("name", ["FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA", "FLASHINFER_MLA", "CUTLASS_MLA"])
def test_vllm_backends_match_the_wheel(name):
    ours, wheel = backends.backend("vllm", name), VLLM["backends"][name]
    majors = wheel.get("device_family_majors") or wheel["compute_capability_majors"]
    if majors != "any":
        assert {ARCH_MAJOR[a] for a in ours.archs} == set(majors)
    assert ours.multiple_of == min(wheel["block_size_bases"])
    assert ours.fp8_kv == ("fp8" in wheel["kv_cache_dtypes"])


@pytest.mark.parametrize("name", ["trtllm_mla", "flashmla"])
def test_sglang_page_sizes_match_the_wheel(name):
    ours = backends.backend("sglang", name)
    assert sorted(ours.legal_block_sizes()) == sorted(SGLANG[name]["page_sizes"])


def test_block_size_follows_the_backend():
    gpus = gpu_table()
    fp8_h100 = backends.usable_backends("vllm", gpus["H100-SXM-80G"], "fp8")
    assert fp8_h100[0].name == "FLASHMLA"                     # FLASH_ATTN_MLA has no FP8 KV
    assert backends.choose_block_size(fp8_h100[0], True)[0] == 64
    cutlass = backends.backend("vllm", "CUTLASS_MLA")
    size, why = backends.choose_block_size(cutlass, True)
    assert size == 128 and "128" in why
    assert backends.choose_block_size(backends.backend("sglang", "fa3"), True)[0] == 1
    assert backends.usable_backends("vllm", gpus["A100-SXM-80G"], "fp8") == []   # no FP8 on Ampere
    assert [b.name for b in backends.usable_backends("vllm", gpus["B200-180G"], "bf16")][0] == "FLASHINFER_MLA"
    assert backends.backend_problems(backends.backend("vllm", "FLASHMLA"), gpus["H100-SXM-80G"], "bf16", 1, 16)
