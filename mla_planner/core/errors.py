"""The one family of user-facing errors. Only the CLI turns them into a red line and exit 2."""

from __future__ import annotations

import difflib


class PlanError(Exception):
    """Bad input or an impossible request: shown to the user as one line, exit status 2."""


class InputError(PlanError):
    """A problem in a user-supplied file or flag, naming where (file, field) and what was expected."""

    def __init__(self, where: str, message: str, field: str | None = None):
        self.where, self.field, self.message = where, field, message
        loc = f"{where}: {field}" if field else where
        super().__init__(f"{loc}: {message}")


class FieldError(ValueError):
    """A record's check on one of its fields (raised in `__post_init__`): validating a user's file, the field
    joins the location of the InputError line (core/validation.py); built in code, a plain ValueError."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def did_you_mean(word: str, choices) -> str:
    """A ' (did you mean X?)' suffix when `word` begins one or more of `choices` (up to three named: 'deepseek-v4'
    for its two sizes) or is close to one of them, else ''."""
    names, low = [str(c) for c in choices], str(word).lower()
    started = [c for c in names if low and c.lower().startswith(low) and c.lower() != low][:3]
    close = started or difflib.get_close_matches(str(word), names, n=1, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
