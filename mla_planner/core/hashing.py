"""Hashing a frozen pydantic model by its content, computed once: the model functions memoise on the spec
and the topology (`lru_cache`), and pydantic's own field hash cannot take their dict fields (rope_scaling,
efficiency)."""

from __future__ import annotations

from functools import cached_property

from pydantic import BaseModel


class HashedByContent(BaseModel):
    """A base for frozen models: equal content, equal hash; a copy hashes by its own content."""

    @cached_property
    def _content_hash(self) -> int:
        return hash(self.model_dump_json())

    def model_copy(self, *, update=None, deep: bool = False):
        copy = super().model_copy(update=update, deep=deep)
        copy.__dict__.pop("_content_hash", None)
        return copy

    def __hash__(self) -> int:
        return self._content_hash
