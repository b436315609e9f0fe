"""`mla-plan models`: the built-in model specs, one row each (cli/show.py shows one in full)."""

from __future__ import annotations

import click

from mla_planner.cli.common import JsonOpt, columns, guard, human_count, print_json, weight_dtypes
from mla_planner.specs import sizing
from mla_planner.specs.builtin import builtin_names, builtin_spec


@guard
def models_cmd(as_json: JsonOpt = False) -> None:
    """List the built-in model specs."""
    rows = []
    for name in builtin_names():
        spec = builtin_spec(name)
        rows.append({"name": name, "hf_id": spec.hf_id, "attention": spec.attention,
                     "params": sizing.param_breakdown(spec)["total"], "layers": spec.num_hidden_layers,
                     "heads": spec.num_attention_heads, "weight_dtype": spec.weight_dtype,
                     "expert_weight_dtype": spec.expert_dtype,
                     "kv_bytes_per_token_bf16": sizing.kv_bytes_per_token(spec, "bf16")})
    if as_json:
        return print_json({"models": rows})
    click.echo(columns(["model", "HF id", "attention", "params", "layers", "heads", "weights", "KV/token (bf16)"],
                       [[r["name"], r["hf_id"] or "", r["attention"], human_count(r["params"]), r["layers"],
                         r["heads"], weight_dtypes(r), f"{r['kv_bytes_per_token_bf16']:,.0f} B"] for r in rows],
                       title="Built-in models (`mla-plan show NAME` for one in full):\n"))
