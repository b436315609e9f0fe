"""Every user error: one line naming the file and field, exit status 2, never a traceback."""

import json
import os
import resource
import subprocess
import sys

import pytest
import yaml

GOOD_SPEC = yaml.safe_load(open("mla_planner/data/models/deepseek-v2-lite.yaml"))
GOOD_TOPO = yaml.safe_load(open("topologies/2x8xh100-ib.yaml"))


def one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    assert "Traceback" not in result.output
    for n in needles:
        assert n in lines[0], lines[0]


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(p)


def test_missing_file(cli, tmp_path):
    one_line_error(cli("show", str(tmp_path / "nope.yaml")), "nope.yaml")


def test_unknown_model_name_suggests(cli):
    one_line_error(cli("show", "deepseek-v33"), "did you mean 'deepseek-v3'")
    one_line_error(cli("show", "deepseek-v4"), "did you mean 'deepseek-v4-flash' or 'deepseek-v4-pro'")


@pytest.mark.parametrize("name, words", [("deepseek-v4.1", "kv_source_layer_ids"),
                                         ("deepseek-ai/DeepSeek-V4.1-Flash", "DeepseekV41ForCausalLM"),
                                         ("moonshotai/Kimi-K3", "Kimi Delta Attention")])
def test_a_family_the_planner_cannot_size_is_named_with_why(cli, name, words):
    """A name of an architecture the engines serve but the planner does not model is refused with the reason, not
    pointed at a different model ('deepseek-v4.1' used to suggest deepseek-v3.2)."""
    one_line_error(cli("show", name), "not modelled", words)


def test_empty_file(cli, tmp_path):
    one_line_error(cli("show", write(tmp_path, "m.yaml", "")), "m.yaml", "empty")


def test_not_yaml(cli, tmp_path):
    one_line_error(cli("show", write(tmp_path, "m.yaml", "name: [unclosed\n  x: :")), "m.yaml", "not valid YAML")


def test_not_a_mapping(cli, tmp_path):
    one_line_error(cli("show", write(tmp_path, "m.yaml", "- a\n- b\n")), "expected a mapping")


def test_wrong_type(cli, tmp_path):
    one_line_error(cli("show", write(tmp_path, "m.yaml", {**GOOD_SPEC, "hidden_size": "big"})), "hidden_size")


@pytest.mark.parametrize("field, value", [("hidden_size", True), ("kv_lora_rank", "512"), ("num_hidden_layers", 27.0),
                                          ("tie_word_embeddings", "yes")])
def test_counts_and_flags_are_not_coerced(cli, tmp_path, field, value):
    """`true` is not 1 and "512" is not 512: a count or flag of the wrong type is an error, in a YAML spec
    and in a config.json alike (pydantic's lax mode would take them)."""
    one_line_error(cli("show", write(tmp_path, "m.yaml", {**GOOD_SPEC, field: value})), field)
    cfg = json.load(open("tests/fixtures/hf/DeepSeek-V3/config.json")) | {"kv_lora_rank": "512"}
    (tmp_path / "snap").mkdir(exist_ok=True)
    (tmp_path / "snap" / "config.json").write_text(json.dumps(cfg))
    one_line_error(cli("show", str(tmp_path / "snap")), "kv_lora_rank")
    one_line_error(cli("show", "-t", write(tmp_path, "t.yaml", {**GOOD_TOPO, "nodes": True})), "nodes")


@pytest.mark.parametrize("value", [0, -5])
def test_zero_or_negative_size(cli, tmp_path, value):
    one_line_error(cli("show", write(tmp_path, "m.yaml", {**GOOD_SPEC, "num_hidden_layers": value})),
                   "num_hidden_layers", "greater than 0")


def test_unknown_key_did_you_mean(cli, tmp_path):
    one_line_error(cli("show", write(tmp_path, "m.yaml", {**GOOD_SPEC, "kv_lora_rnak": 512})),
                   "kv_lora_rnak", "did you mean 'kv_lora_rank'")


def test_heads_not_matching_dims(cli, tmp_path):
    bad = {**GOOD_SPEC, "num_key_value_heads": 8}          # MLA: the HF field must equal the query heads
    one_line_error(cli("show", write(tmp_path, "m.yaml", bad)), "num_key_value_heads")
    gqa = yaml.safe_load(open("mla_planner/data/models/llama-3.1-70b.yaml"))
    one_line_error(cli("show", write(tmp_path, "g.yaml", {**gqa, "num_key_value_heads": 7})), "num_key_value_heads")


def test_unsupported_architecture(cli, tmp_path):
    cfg = json.load(open("tests/fixtures/hf/DeepSeek-V3/config.json"))
    cfg["architectures"] = ["MixtralForCausalLM"]
    one_line_error(cli("show", write(tmp_path, "config.json", json.dumps(cfg))), "architectures", "unsupported")


def test_config_json_not_json(cli, tmp_path):
    one_line_error(cli("show", write(tmp_path, "config.json", "{nope")), "config.json", "not valid JSON")


def test_folder_without_config(cli, tmp_path):
    one_line_error(cli("show", str(tmp_path)), "no config.json")


def test_topology_errors(cli, tmp_path):
    one_line_error(cli("show", "--topology", write(tmp_path, "t.yaml", {**GOOD_TOPO, "gpu": "H1000"})),
                   "gpu", "unknown GPU")
    one_line_error(cli("show", "--topology", write(tmp_path, "t.yaml", {**GOOD_TOPO, "nodes": -1})), "nodes")
    one_line_error(cli("show", "--topology", write(tmp_path, "t.yaml", {**GOOD_TOPO, "inter_node": None})),
                   "inter_node is required")
    nic = {**GOOD_TOPO, "inter_node": {**GOOD_TOPO["inter_node"], "nic_gbps": 400}}
    one_line_error(cli("show", "--topology", write(tmp_path, "t.yaml", nic)), "inter_node.nic_gbps",
                   "did you mean 'nic_gbit_per_s'")
    one_line_error(cli("show", "--topology", "no-such-cluster"), "no-such-cluster")
    bits = {**GOOD_TOPO, "inter_node": {**GOOD_TOPO["inter_node"], "nic_gbit_per_s": 400e9}}
    one_line_error(cli("show", "--topology", write(tmp_path, "t.yaml", bits)), "inter_node.nic_gbit_per_s",
                   "Gb/s per NIC", "(bits/s?)")
    two = {**GOOD_TOPO, "inter_node": {**GOOD_TOPO["inter_node"], "ib_hca": "mlx5_0,mlx5_1"}}
    one_line_error(cli("show", "--topology", write(tmp_path, "t.yaml", two)), "inter_node",
                   "ib_hca names 2 HCA(s)", "nics_per_node is 8")
    nine = {**GOOD_TOPO, "inter_node": {**GOOD_TOPO["inter_node"], "ib_hca": ",".join(f"mlx5_{i}" for i in range(9))}}
    one_line_error(cli("show", "--topology", write(tmp_path, "t.yaml", nine)), "inter_node",
                   "ib_hca names 9 HCA(s)", "nics_per_node is 8", "use all of them")
    ports = ",".join(f"mlx5_{i}:{p}" for i in range(8) for p in (1, 2))           # two ports of each of the 8
    for fine in ("mlx5", "^mlx5_8", ",".join(f"mlx5_{i}" for i in range(8)), ports):   # prefix, exclusion, all 8
        ok = {**GOOD_TOPO, "inter_node": {**GOOD_TOPO["inter_node"], "ib_hca": fine}}
        assert cli("show", "--topology", write(tmp_path, "t.yaml", ok)).exit_code == 0


def test_experts_per_token_without_experts(cli, tmp_path):
    dense = {**GOOD_SPEC, "n_routed_experts": 0}
    one_line_error(cli("show", write(tmp_path, "m.yaml", dense)), "n_routed_experts")


def test_misleading_paths_are_named_for_what_they_are(cli, tmp_path):
    """A folder named config.json, a model and a topology at once, an output under a file: each says what
    is wrong with that path."""
    (tmp_path / "snap" / "config.json").mkdir(parents=True)
    one_line_error(cli("show", str(tmp_path / "snap" / "config.json")), "is a folder, expected the config.json")
    one_line_error(cli("show", "deepseek-v3", "-t", "8xh100"), "not both")
    (tmp_path / "afile").write_text("x")
    plan = tmp_path / "plan.json"
    plan.write_text(cli("plan", "-t", "8xh200", "--json").stdout)
    one_line_error(cli("emit", "--plan", str(plan), "--out", str(tmp_path / "afile" / "sub")), "is a file, not a folder")


def test_an_inline_gpu_missing_what_its_kind_implies(cli, tmp_path):
    """No silent defaults that change the answer: an NVSwitch node needs the GPU's NVLink rate (else the model
    would price PCIe-like 25 GB/s), and an sm89+ GPU its FP8 rate (else FP8 paths would be refused as if the
    hardware lacked them)."""
    gpu = {"name": "MyGPU", "memory_bytes": 10**11, "hbm_bytes_per_s": 4e12, "bf16_flops_per_s": 1e15,
           "compute_capability": "9.0"}
    one_line_error(cli("show", "--topology", write(tmp_path, "t.yaml", {**GOOD_TOPO, "gpu": gpu})),
                   "gpu", "fp8_flops_per_s")
    gpu["fp8_flops_per_s"] = 2e15
    one_line_error(cli("show", "--topology", write(tmp_path, "t.yaml", {**GOOD_TOPO, "gpu": gpu})),
                   "nvlink_bytes_per_s", "intra_node.gbytes_per_s")
    given = {**GOOD_TOPO, "gpu": gpu, "intra_node": {"kind": "nvswitch", "gbytes_per_s": 300}}
    assert cli("show", "--topology", write(tmp_path, "t.yaml", given)).exit_code == 0


def test_verify_device_is_checked_first_and_an_empty_plan_says_why(cli, tmp_path):
    one_line_error(cli("verify", "--device", "tpu"), "--device must be cuda or cpu")
    failed = tmp_path / "fail.json"
    failed.write_text(cli("plan", "--tpot-ms", "1", "--json").stdout)
    one_line_error(cli("emit", "--plan", str(failed), "--out", str(tmp_path / "o")), "no candidates",
                   "misses the TPOT target of 1 ms")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="Linux's /dev/full")
@pytest.mark.parametrize("args", [["models"], ["plan", "--json"], ["--help"]])
def test_output_to_a_full_disk_is_one_error_line_not_a_traceback(args):
    """Found by QA: `> /dev/full` ended every command in an OSError traceback, and a cut-off --json could exit 0."""
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "mla_planner.cli", *args], stdout=full, stderr=subprocess.PIPE,
                             text=True)
    assert out.returncode == 2
    assert out.stderr == "error: cannot write the output (No space left on device); what was written is incomplete\n"


@pytest.mark.parametrize("address, words", [("10.0.0.1:80", "without a port"), ("::1", "IPv6"),
                                            ("host name", "expected the head node's host name"),
                                            ("$(id)", "expected the head node's host name"),
                                            ("010.0.0.1", "expected the head node's host name"),   # inet_aton: 8.0.0.1
                                            ("10.0.0", "expected the head node's host name")])
def test_a_head_address_that_is_not_a_host_is_one_line(cli, tmp_path, address, words):
    """Found by QA: `10.0.0.1:80` was written as HEAD_IP and became `--dist-init-addr 10.0.0.1:80:5000`."""
    plan = tmp_path / "plan.json"
    plan.write_text(cli("plan", "-m", "deepseek-v2-lite", "-t", "2x8xh100-ib", "-l", "tp=16", "--no-disagg",
                        "--json").stdout)
    result = cli("emit", "--plan", str(plan), "--out", str(tmp_path / "out"), "--head-address", address)
    assert result.exit_code == 2 and words in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()
    assert cli("emit", "--plan", str(plan), "--out", str(tmp_path / "ok"), "--head-address", "node-0.cluster.local"
               ).exit_code == 0


def test_output_folders_expand_the_home_folder_as_inputs_do(cli, tmp_path, monkeypatch):
    """Found by QA: `--out '~nonexistentuser/x'` made a folder named `~nonexistentuser` (inputs expanded `~`)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    plan = tmp_path / "plan.json"
    plan.write_text(cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "--json").stdout)
    assert cli("emit", "--plan", str(plan), "--out", "~/launch").exit_code == 0
    assert (tmp_path / "launch" / "README.md").is_file()
    for args in (["emit", "--plan", str(plan), "--out", "~nonexistentuser/x"],
                 ["plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "--emit", "~nonexistentuser/x"]):
        result = cli(*args)
        assert result.exit_code == 2 and "no such user" in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("name, text, words", [
    ("topo.yaml", "name: x\nnodes: 1\nnodes: 2\n", "'nodes' is given twice in one mapping (line 3)"),
    ("topo.yaml", "name: x\n1: a\n01: b\n", "'01' is given twice in one mapping (line 3)"),   # as they load
    ("config.json", '{"model_type": "deepseek_v3", "hidden_size": 1, "hidden_size": 7168}',
     "'hidden_size' is given twice in one object")])
def test_a_key_given_twice_in_a_users_file_is_refused(cli, tmp_path, name, text, words):
    """Found by QA: safe_load and json.loads both keep the last of two equal keys without a word."""
    path = tmp_path / name
    path.write_text(text)
    result = cli("show", "-t" if name.endswith(".yaml") else "-m", str(path))
    assert result.exit_code == 2 and words in result.stderr and result.stderr.count("\n") == 1


def test_a_utf16_log_and_a_utf8_bom_config_are_read(cli, tmp_path):
    """Found by QA: a UTF-16 log (PowerShell's `>`) read as 'no line this command reads'; a JSON file saved with
    a UTF-8 byte-order mark was not valid JSON."""
    log = tmp_path / "u16.log"
    log.write_bytes("INFO 12-02 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 1,000 tokens\n".encode("utf-16"))
    assert "kv_cache" in cli("check-log", str(log), "--json").stdout
    plan = tmp_path / "plan.json"
    plan.write_bytes(b"\xef\xbb\xbf" + cli("plan", "-m", "deepseek-v2-lite", "-t", "8xh100", "--json").stdout.encode())
    assert cli("compare", "--plan", str(plan), "-c", "1").exit_code == 0
    topo = tmp_path / "t.yaml"
    topo.write_bytes(b"\xef\xbb\xbf" + b"name: x\nnodes: 1\ngpus_per_node: 8\ngpu: H100-SXM-80G\n"
                     b"intra_node: {kind: nvswitch}\n")
    assert cli("show", "-t", str(topo)).exit_code == 0


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_output_over_a_file_size_limit_is_one_error_line(tmp_path, unbuffered):
    """Found in review: with PYTHONUNBUFFERED (containers set it) a short write under a file-size limit left a
    cut-off --json and exit 0; a buffered writer writes it all or raises, as without the variable."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | (
        {"PYTHONUNBUFFERED": unbuffered} if unbuffered else {})
    with open(tmp_path / "plan.json", "w") as out:
        run = subprocess.run([sys.executable, "-m", "mla_planner.cli", "plan", "--json"], stdout=out,
                             stderr=subprocess.PIPE, text=True, env=env,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)))
    assert run.returncode == 2 and "cannot write the output (File too large)" in run.stderr


def test_builtin_names_are_taken_case_aside(cli):
    """-t 8xH200 is the built-in 8xh200, as -m DeepSeek-V3 is deepseek-v3 (QA: the topology was refused)."""
    r = cli("memory", "-m", "DeepSeek-R1", "-t", "8xH200", "--tp", "8", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["topology"] == "8xh200"
