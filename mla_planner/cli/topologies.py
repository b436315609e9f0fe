"""`mla-plan topologies`: the built-in cluster topologies, one row each (`mla-plan show -t` shows one)."""

from __future__ import annotations

import click

from mla_planner.cli.common import JsonOpt, columns, guard, print_json
from mla_planner.specs.topology import builtin_topologies, load_topology


@guard
def topologies_cmd(as_json: JsonOpt = False) -> None:
    """List the built-in cluster topologies."""
    rows = []
    for name in builtin_topologies():
        t = load_topology(name)
        fabric = (f"{t.inter_node.nics_per_node}x{t.inter_node.nic_gbit_per_s:g} Gb/s {t.inter_node.fabric}"
                  if t.inter_node else "-")
        rows.append({"name": name, "nodes": t.nodes, "gpus_per_node": t.gpus_per_node, "gpu": t.gpu.name,
                     "intra_node": t.intra_node.kind, "inter_node": fabric,
                     "nic_gbit_per_s_per_gpu": round(t.nic_gbit_per_s_per_gpu, 1), "description": t.description})
    if as_json:
        return print_json({"topologies": rows})
    click.echo(columns(["topology", "nodes x GPUs", "GPU", "inside node", "between nodes", "NIC Gb/s per GPU"],
                       [[r["name"], f"{r['nodes']} x {r['gpus_per_node']}", r["gpu"], r["intra_node"], r["inter_node"],
                         f"{r['nic_gbit_per_s_per_gpu']:g}" if r["inter_node"] != "-" else "-"] for r in rows],
                       title="Built-in topologies (`mla-plan show -t NAME` for one in full):\n"))
