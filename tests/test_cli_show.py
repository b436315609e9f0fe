"""The catalogue commands as a user runs them."""

import json

import pytest

from mla_planner import __version__


def test_version_and_help(cli):
    r = cli("--version")
    assert r.exit_code == 0 and __version__ in r.stdout
    r = cli("-h")
    assert r.exit_code == 0 and "show" in r.stdout and "models" in r.stdout


def test_models_lists_builtins(cli):
    r = cli("models", "--json")
    assert r.exit_code == 0
    names = {m["name"] for m in json.loads(r.stdout)["models"]}
    assert {"deepseek-v3", "deepseek-r1", "deepseek-v2", "deepseek-v2-lite", "kimi-k2", "llama-3.1-70b"} <= names
    assert "deepseek-v3" in cli("models").stdout


def test_topologies_lists_builtins(cli):
    r = cli("topologies", "--json")
    assert r.exit_code == 0
    names = {t["name"] for t in json.loads(r.stdout)["topologies"]}
    assert {"8xh100", "2x8xh100-ib", "8xh200", "4x8xh800-roce", "2x8xh20-roce", "4x8xa100-ib", "8xb200",
            "2x8xl40s-eth", "2x8xh100-ib-1nic"} <= names
    rows = {t["name"]: t for t in json.loads(r.stdout)["topologies"]}
    assert (rows["2x8xh100-ib"]["inter_node"], rows["2x8xh100-ib"]["nic_gbit_per_s_per_gpu"]) == (
        "8x400 Gb/s infiniband", 400)                                                 # a NIC per GPU
    assert rows["2x8xh100-ib-1nic"]["nic_gbit_per_s_per_gpu"] == 50                    # 8 GPUs share one
    assert (rows["8xh100"]["inter_node"], rows["8xh100"]["nic_gbit_per_s_per_gpu"]) == ("-", 0)


def test_show_model_table_and_json(cli):
    r = cli("show", "deepseek-v3")
    assert r.exit_code == 0
    assert "671,026,419,200" in r.stdout and "70,272" in r.stdout
    data = json.loads(cli("show", "deepseek-v3", "--json").stdout)
    assert data["params"]["total"] == 671_026_419_200
    assert data["kv_cache"]["fp8"]["bytes_per_token"] == 35_136
    assert data["model_path"] == "deepseek-ai/DeepSeek-V3"


def test_show_hf_snapshot_folder_serves_the_folder(cli):
    data = json.loads(cli("show", "tests/fixtures/hf/DeepSeek-V2-Lite", "--json").stdout)
    assert data["params"]["total"] == 15_706_484_224
    assert data["model_path"].endswith("DeepSeek-V2-Lite")


def test_show_topology(cli):
    r = cli("show", "--topology", "2x8xh100-ib")
    assert r.exit_code == 0 and "infiniband" in r.stdout
    data = json.loads(cli("show", "--topology", "topologies/2x8xl40s-eth.yaml", "--json").stdout)
    assert data["total_gpus"] == 16 and data["nvls"] is False


@pytest.mark.parametrize("command", ["models", "topologies", "show", "memory", "compare", "plan", "emit", "verify"])
def test_help_shows_no_value_for_flags(cli, command):
    """A flag (--json, --enforce-eager, --help) takes no value, so its help row shows no "<bool>" type."""
    r = cli(command, "--help")
    assert r.exit_code == 0 and "--json" in r.stdout and "<bool>" not in r.stdout


def test_show_names_the_experts_storage_when_it_differs(cli, tmp_path):
    spec = (open("mla_planner/data/models/kimi-k2.yaml").read().replace("name: kimi-k2", "name: kimi-int4")
            + "\nexpert_weight_dtype: int4\n")
    (tmp_path / "k.yaml").write_text(spec)
    r = cli("show", str(tmp_path / "k.yaml"))
    assert r.exit_code == 0 and "weights fp8, experts int4" in r.stdout


def test_a_hugging_face_cache_snapshot_is_named_by_its_repository(cli, tmp_path):
    snap = tmp_path / "models--deepseek-ai--DeepSeek-V3" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(open("tests/fixtures/hf/DeepSeek-V3/config.json").read())
    r = cli("show", str(snap))
    assert r.exit_code == 0 and r.stdout.startswith("deepseek-ai/DeepSeek-V3 ") and str(snap) in r.stdout


def test_a_json_not_named_config_json_plans_but_serves_nothing(cli, tmp_path):
    """Engines load a folder holding config.json: a copy under another name is read (named after the file, not
    the folder) but names no servable path, so emit asks for --model-path instead of writing the folder."""
    import json
    cfg = tmp_path / "v2lite-config.json"
    cfg.write_text(open("tests/fixtures/hf/DeepSeek-V2-Lite/config.json").read())
    shown = cli("show", "-m", str(cfg), "--json")
    facts = json.loads(shown.stdout)
    assert facts["spec"]["name"] == "v2lite-config" and facts["model_path"] == ""
    plan = tmp_path / "p.json"
    plan.write_text(cli("plan", "-m", str(cfg), "-t", "8xh100", "--json").stdout)
    r = cli("emit", "--plan", str(plan), "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "--model-path" in r.output and not (tmp_path / "o").exists()
    ok = cli("emit", "--plan", str(plan), "--out", str(tmp_path / "o"), "--model-path", "/models/v2lite")
    assert ok.exit_code == 0 and "/models/v2lite" in (tmp_path / "o" / "node-0.sh").read_text()


def test_a_builtins_hugging_face_id_names_the_builtin(cli):
    """Found by QA: `-m deepseek-ai/DeepSeek-V3` (what lint reads off a command) was refused as no such file."""
    by_id = cli("show", "-m", "deepseek-ai/DeepSeek-V3", "--json")
    assert by_id.exit_code == 0 and by_id.stdout == cli("show", "-m", "deepseek-v3", "--json").stdout
    assert cli("show", "-m", "deepseek-ai/No-Such-Model").exit_code == 2
