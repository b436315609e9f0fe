"""The argparse-level description of one flag, and its JSON form in a fixture."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .evaluate import Unresolved


@dataclass
class Flag:
    option_strings: list[str]
    dest: str
    kind: str = "value"  # value | flag (no value) | optional_value
    type: str = "str"
    nargs: Any = None
    choices: Any = None
    action: str | None = None
    negated: list[str] = field(default_factory=list)
    optional: bool = False  # vLLM optional_type(): "" and "None" mean None
    required: bool = False
    default: Any = None
    source: str = ""
    origin: str | None = None  # config field this flag came from
    bounds: dict | None = None
    note: str | None = None
    transform: str | None = None  # applied to the value before the choices check

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "aliases": self.option_strings[1:],
            "dest": self.dest,
            "takes_value": self.kind != "flag",
            "source": self.source,
        }
        if self.kind == "flag":
            d["type"] = "bool"
        else:
            d["type"] = self.type
            d["nargs"] = self.nargs
        if self.kind == "optional_value":
            d["nargs"] = "?"
        if self.choices is not None:
            d["choices"] = self.choices
        if self.action:
            d["action"] = self.action
        if self.negated:
            d["negated"] = self.negated
        if self.optional:
            d["none_allowed"] = True
        if self.required:
            d["required"] = True
        return self._add_origin(d)

    def _add_origin(self, d: dict) -> dict:
        """Default, config field, bounds, note and transform, where known."""
        if self.default is not None and self.default is not Unresolved:
            d["default"] = self.default
        if self.origin:
            d["config_field"] = self.origin
        if self.bounds:
            d["bounds"] = self.bounds
        if self.note:
            d["note"] = self.note
        if self.transform:
            d["transform"] = self.transform
        return d


def boolean_optional_strings(opts: list[str], enable_disable: bool) -> tuple[list[str], list[str]]:
    """Option strings created by argparse.BooleanOptionalAction (and vLLM's
    EnableDisableAction, which is what FlexibleArgumentParser registers for
    it); returns (all, negated)."""
    all_opts = list(opts)
    negated: list[str] = []
    for o in opts:
        if o.startswith("--"):
            n = "--no-" + o[2:]
            all_opts.append(n)
            negated.append(n)
    if enable_disable:
        for o in opts:
            for pre, inv in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                if o.startswith(pre):
                    n = inv + o[len(pre):]
                    all_opts.append(n)
                    negated.append(n)
    return all_opts, negated


def flag_json(fl: Flag) -> dict:
    """Flag.to_json without empty aliases, a None nargs or a default dest."""
    key = fl.option_strings[0]
    d = fl.to_json()
    aliases = [o for o in fl.option_strings[1:] if o not in fl.negated]
    if aliases:
        d["aliases"] = aliases
    else:
        d.pop("aliases")
    if d.get("nargs", "x") is None:
        d.pop("nargs")
    if d["dest"] == key.lstrip("-").replace("-", "_"):
        d.pop("dest")
    return d


def flags_to_json(flags: list[Flag]) -> dict:
    """{primary option: flag JSON}; no flag or option string may appear twice."""
    out: dict[str, Any] = {}
    for fl in flags:
        key = fl.option_strings[0]
        if key in out:
            raise SystemExit(f"duplicate flag {key}")
        out[key] = flag_json(fl)
    seen: dict[str, str] = {}
    for key, d in out.items():
        for o in [key, *d.get("aliases", []), *d.get("negated", [])]:
            if o in seen:
                raise SystemExit(f"option string {o} registered by {seen[o]} and {key}")
            seen[o] = key
    return out
