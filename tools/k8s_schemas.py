"""Write the Kubernetes schemas the tests validate emitted manifests against (tests/fixtures/k8s/), offline.

Inputs:
  --wheel    the kubernetes-validate wheel from PyPI (`pip download --no-deps kubernetes-validate==1.37.0`): JSON
             Schema (draft 2020-12) conversions of the Kubernetes OpenAPI; its v1.30.0 "local-strict" set rejects
             unknown fields, as `kubectl apply --validate=strict` does.
  tests/fixtures/k8s/lws-crd-excerpt.yaml
             the LeaderWorkerSet CRD (kubernetes-sigs/lws config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml
             at commit 83ba21e9), its LWS fields verbatim and its three embedded core schemas (two pod specs, one
             PVC) cut out and marked `x-mla-elided: <definition>`, as the file's header says.
Outputs (tests/fixtures/k8s/):
  deployment-apps-v1.json, service-v1.json   copied as the wheel holds them
  leaderworkerset-v1.json   the excerpt's openAPIV3Schema with each elided part a $ref to the same Kubernetes
                            definition, `additionalProperties: false` on every object listing properties (strict like
                            the others), apiVersion and kind pinned
  definitions.json          the wheel's _definitions.json cut to the definitions the three kinds reach

    python -m tools.k8s_schemas --wheel kubernetes_validate-1.37.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "k8s"
SET = "kubernetes_validate/kubernetes-json-schema/v1.30.0-local-strict/"
KINDS = ("deployment-apps-v1.json", "service-v1.json")
DEFS = "https://kubernetes.io/api/_definitions.json#/$defs/"


def _strict(node):
    if isinstance(node, list):
        return [_strict(x) for x in node]
    if not isinstance(node, dict):
        return node
    if "x-mla-elided" in node:
        out = {"$ref": DEFS + node["x-mla-elided"]}
        return out | ({"description": node["description"]} if "description" in node else {})
    out = {k: _strict(v) for k, v in node.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def lws_schema(excerpt: Path) -> dict:
    crd = next(d for d in yaml.safe_load_all(excerpt.read_text()) if d)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = _strict(version["schema"]["openAPIV3Schema"])
    schema["properties"]["apiVersion"]["enum"] = [f"{crd['spec']['group']}/v1"]
    schema["properties"]["kind"]["enum"] = [crd["spec"]["names"]["kind"]]
    schema["properties"]["metadata"] = {"$ref": DEFS + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    schema["required"] = ["apiVersion", "kind", "spec"]
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://kubernetes.io/api/leaderworkerset/leaderworkerset.x-k8s.io/v1"
    return schema


def _refs(node, into: set) -> set:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                into.add(value.split("#/$defs/")[-1])
            else:
                _refs(value, into)
    elif isinstance(node, list):
        for value in node:
            _refs(value, into)
    return into


def reachable(definitions: dict, roots: list[dict]) -> dict:
    todo = sorted(set().union(*(_refs(r, set()) for r in roots)))
    seen: set = set()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += sorted(_refs(definitions["$defs"][name], set()) - seen)
    return {**{k: v for k, v in definitions.items() if k != "$defs"},
            "$defs": {k: definitions["$defs"][k] for k in sorted(seen)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", required=True, type=Path)
    args = parser.parse_args()
    with zipfile.ZipFile(args.wheel) as wheel:
        kinds = {name: json.loads(wheel.read(SET + name)) for name in KINDS}
        definitions = json.loads(wheel.read(SET + "_definitions.json"))
    lws = lws_schema(OUT / "lws-crd-excerpt.yaml")
    for name, schema in kinds.items():
        (OUT / name).write_text(json.dumps(schema, indent=1) + "\n")
    (OUT / "leaderworkerset-v1.json").write_text(json.dumps(lws, indent=1) + "\n")
    (OUT / "definitions.json").write_text(json.dumps(reachable(definitions, [*kinds.values(), lws]), indent=1) + "\n")


if __name__ == "__main__":
    main()
