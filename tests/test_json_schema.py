"""Every command's `--json` is one object that leads with `schema_version` (core.jsonout), and docs/json.md
documents every command."""

import json
import re
from pathlib import Path

import pytest

from mla_planner.cli.app import COMMANDS
from mla_planner.core.jsonout import SCHEMA_VERSION

DOC = Path(__file__).resolve().parent.parent / "docs" / "json.md"
VERIFY = ("--device", "cpu", "--model", "deepseek-v2-lite", "--topology", "8xh200", "--layout", "tp=8", "--quick",
          "--only", "env")


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    from click.testing import CliRunner

    from mla_planner.cli.app import app
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(CliRunner().invoke(app, ["plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "--json"]).stdout)
    return path


def commands(plan: Path, tmp: Path) -> dict[str, list[str]]:
    log = tmp / "node-0.log"
    log.write_text("INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: 1,000 tokens\n")
    return {"plan": ["plan", "-m", "deepseek-v2-lite", "-t", "8xh100"],
            "models": ["models"], "topologies": ["topologies"], "show": ["show", "deepseek-v3"],
            "compare": ["compare", "--layout", "tp=8,pp=2"], "memory": ["memory", "--tp", "8", "--pp", "2"],
            "emit": ["emit", "--plan", str(plan), "--out", str(tmp / "out")],
            "verify": ["verify", *VERIFY],
            "check-log": ["check-log", str(log), "--plan", str(plan)],
            "lint": ["lint", "--", "vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "8"],
            "validate": ["validate", "--category", "kv_capacity"]}


def test_every_command_is_tried():
    assert set(commands(Path("p"), Path("/tmp"))) == set(COMMANDS)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_json_leads_with_the_schema_version(cli, plan_file, tmp_path, name):
    words = commands(plan_file, tmp_path)[name]
    if name == "lint":
        words = ["lint", "--json", *words[1:]]
    else:
        words = [*words, "--json"]
    if name == "verify":
        pytest.importorskip("torch")
    r = cli(*words)
    data = json.loads(r.stdout)
    assert isinstance(data, dict) and next(iter(data)) == "schema_version" and data["schema_version"] == SCHEMA_VERSION


def test_docs_json_has_a_section_per_command():
    headings = re.findall(r"^## (.*)$", DOC.read_text(), flags=re.M)
    for name in COMMANDS:
        assert any(f"`{name}" in h for h in headings), name
