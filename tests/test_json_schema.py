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
            "validate": ["validate", "--category", "kv_capacity"],
            "calibrate": ["calibrate", "--plan", str(plan), *_bench_files(plan, tmp)]}


def _bench_files(plan: Path, tmp: Path) -> list[str]:
    """Two bench.sh results for the plan's first candidate, in its engine's result format."""
    if not plan.exists():
        return []
    from mla_planner.search.planfile_read import read_plan
    loaded = read_plan(plan)
    files = []
    vllm, gpu = loaded.candidates[0].knobs.engine == "vllm", loaded.topology.gpu.name
    for c, ms in ((4, 12.0), (32, 30.0)):
        path = tmp / f"bench-c{c}.json{'' if vllm else 'l'}"
        record = {"max_concurrency": c, "completed": 4 * c, "total_input_tokens": 8192 * c,
                  "total_output_tokens": 2048 * c, "mean_tpot_ms": ms}
        record |= ({"endpoint_type": "openai", "model_id": loaded.model_path, "mla_plan_gpu": gpu} if vllm else
                   {"backend": "sglang", "tag": f"mla_plan_gpu={gpu}", "server_info": {"model_path": loaded.model_path}})
        path.write_text(json.dumps(record))
        files.append(str(path))
    return files


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
