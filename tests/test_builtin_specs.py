"""Every built-in model spec, built directly as `mla-plan models` builds it (specs/builtin.py, no pydantic),
is the spec a user's file with the same fields validates into (core/validation.py): same fields, same values,
same types. A typo in a built-in file (a string count, an unknown key) fails here, not in a user's run."""

import json

import pytest

from mla_planner.core.errors import InputError
from mla_planner.core.validation import validate
from mla_planner.specs.builtin import builtin_fields, builtin_names, builtin_spec
from mla_planner.specs.model import ModelSpec


@pytest.mark.parametrize("name", builtin_names())
def test_a_builtin_is_its_validated_self(name):
    built, checked = builtin_spec(name), validate(ModelSpec, builtin_fields(name), f"built-in:{name}")
    assert json.dumps(built.to_dict()) == json.dumps(checked.to_dict())
    assert built == checked and hash(built) == hash(checked)


def test_validation_catches_what_the_direct_build_would_take():
    """The direct build checks only that the fields agree; the types are held by validation, above."""
    fields = {**builtin_fields("deepseek-v3"), "num_hidden_layers": "61"}
    with pytest.raises(InputError, match="num_hidden_layers: Input should be a valid integer"):
        validate(ModelSpec, fields, "x.yaml")
    with pytest.raises(InputError, match="unknown field .did you mean 'num_hidden_layers'"):
        validate(ModelSpec, {**builtin_fields("deepseek-v3"), "num_hiden_layers": 61}, "x.yaml")
    with pytest.raises(InputError, match="x.yaml: attention: Input should be 'mla', 'mla-dsa', 'csa-hca' or 'gqa'"):
        validate(ModelSpec, {**builtin_fields("deepseek-v3"), "attention": "sparse"}, "x.yaml")
