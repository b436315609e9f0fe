"""SGLang runs a GQA model on sm10x Blackwell with trtllm_mha, which takes pages of 16, 32, 64 or 128 tokens only:
the plan emits the page the engine runs."""

import json

import pytest


@pytest.mark.parametrize("topology, pinned, page", [("8xb200", None, 64), ("8xb200", "1", 64), ("8xb200", "32", 32),
                                                    ("8xh100", None, 1)])
def test_sglang_pages_a_gqa_model_on_blackwell_as_trtllm_mha_does(cli, topology, pinned, page):
    """SGLang 0.5.23 runs a GQA model on sm10x Blackwell with trtllm_mha (arg_groups/model_override_base.py), which
    moves any page size but 16, 32, 64 and 128 to 64 (arg_groups/overrides.py): the plan emits the page it runs."""
    args = ["plan", "-m", "llama-3.1-70b", "-t", topology, "-e", "sglang", "--json"]
    data = json.loads(cli(*args, *(["--block-size", pinned] if pinned else [])).stdout)
    assert data["candidates"] and {c["knobs"]["block_size"] for c in data["candidates"]} == {page}
