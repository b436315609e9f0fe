"""The serving flags a model's published recipe passes beside its sizing (data/recipes.yaml): tokenizer mode,
tool-call and reasoning parsers, by the checkpoint's model_type."""

from __future__ import annotations

from functools import lru_cache

from mla_planner.core.resources import data_dir, read_data
from mla_planner.specs.model import ModelSpec


@lru_cache(maxsize=1)
def _table() -> dict:
    return read_data(data_dir("recipes.yaml"))


def recipe_key(spec: ModelSpec) -> str:
    """The recipe a checkpoint follows: its model_type, or mistral_large_3 for Mistral's params.json format."""
    return "mistral_large_3" if spec.config_format == "mistral" else (spec.model_type or "")


def recipe_flags(spec: ModelSpec, engine: str) -> list[tuple[str, object]]:
    """(flag, value) pairs for `flag_words`, in the recipe's order; none for a model without a recipe here."""
    return [tuple(pair) for pair in _table().get(recipe_key(spec), {}).get(engine, [])]
