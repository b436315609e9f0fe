"""The config fixtures that claim to be the published files are byte for byte those files: each one's git blob id
equals the ETag Hugging Face served it with (tests/fixtures/hf/README.md), and the figures the model tests hold
come from them."""

import hashlib
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
PUBLISHED = {   # file -> the git blob SHA-1 Hugging Face's ETag gave for it at the revision in the README
    "hf/GLM-5/config.json": "a34ad26ab36785f99d45866c1e9fe145003638ef",
    "hf/Kimi-K2.5/config.json": "2a9983f30584b7fb293b5a334dff3a585a1e9206",
    "mistral/Mistral-Large-3/params.json": "2d087fdf366c200db83c0516fa0361660f9ea15b",
}


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("path", sorted(PUBLISHED))
def test_the_fixture_is_the_published_file(path):
    assert git_blob_id((FIXTURES / path).read_bytes()) == PUBLISHED[path]


def test_the_built_ins_are_what_the_published_files_give():
    """`-m glm-5` etc. plan what the published files say (the fields MLA does not use, GLM's head_dim, aside)."""
    from dataclasses import asdict

    from mla_planner.specs.catalogue import load_model

    for name, path in (("glm-5", "hf/GLM-5"), ("glm-5.2", "hf/GLM-5.2-FP8"), ("kimi-k2.5", "hf/Kimi-K2.5"),
                       ("mistral-large-3", "mistral/Mistral-Large-3")):
        built_in, published = asdict(load_model(name).spec), asdict(load_model(str(FIXTURES / path)).spec)
        differ = {k for k in published if published[k] != built_in[k]} - {"name", "hf_id", "head_dim"}
        assert differ == set(), name
