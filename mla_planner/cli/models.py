"""`mla-plan models`: the built-in model specs, one row each (cli/show.py shows one in full)."""

from __future__ import annotations

from rich.table import Table

from mla_planner.cli.common import JsonOpt, console, guard, human_count, print_json, weight_dtypes
from mla_planner.specs import sizing
from mla_planner.specs.catalogue import builtin_names, load_model


@guard
def models_cmd(as_json: JsonOpt = False) -> None:
    """List the built-in model specs."""
    rows = []
    for name in builtin_names():
        spec = load_model(name).spec
        rows.append({"name": name, "hf_id": spec.hf_id, "attention": spec.attention,
                     "params": sizing.param_breakdown(spec)["total"], "layers": spec.num_hidden_layers,
                     "heads": spec.num_attention_heads, "weight_dtype": spec.weight_dtype,
                     "expert_weight_dtype": spec.expert_dtype,
                     "kv_bytes_per_token_bf16": sizing.kv_bytes_per_token(spec, "bf16")})
    if as_json:
        return print_json({"models": rows})
    table = Table("model", "HF id", "attention", "params", "layers", "heads", "weights", "KV/token (bf16)",
                  title="Built-in models")
    for r in rows:
        table.add_row(r["name"], r["hf_id"] or "", r["attention"], human_count(r["params"]), str(r["layers"]),
                      str(r["heads"]), weight_dtypes(r), f"{r['kv_bytes_per_token_bf16']:,.0f} B")
    console().print(table)


