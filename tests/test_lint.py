"""`mla-plan lint -- <engine command>`: a user's own launch command checked (sgl-project/sglang#3283, #2794)."""

import json

import pytest

from mla_planner.audit.lint_command import parse_command


# a two-node group as the engines start it, node 0 (vLLM refuses a world size above the node's GPUs without
# --nnodes: vllm/config/parallel.py; SGLang would ask for GPU ids the node lacks: audit/lint_nodes.py)
NODE0 = ("--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1")
SGLANG_NODE0 = ("--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000")


def lint(cli, *words, topology="8xh200", model=None):
    args = ["lint", "-t", topology, "--json"] + (["-m", model] if model else []) + ["--", *words]
    r = cli(*args)
    return r.exit_code, (json.loads(r.stdout) if r.stdout.strip().startswith("{") else r.output)


def test_parsing_both_engines_forms():
    v = parse_command(["vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "8", "--kv-cache-dtype=fp8",
                       "--enforce-eager", "--max-model-len", "4096"])
    assert (v.engine, v.model, v.values["tp"], v.values["kv"], v.values["max_len"]) == (
        "vllm", "deepseek-ai/DeepSeek-V3", "8", "fp8", "4096")
    assert "--enforce-eager" in v.flags
    s = parse_command(["python3", "-m", "sglang.launch_server", "--model-path", "/models/r1", "--tp", "16",
                       "--trust-remote-code", "--dp", "2"])
    assert (s.engine, s.model, s.values["tp"], s.values["dp_size"]) == ("sglang", "/models/r1", "16", "2")
    from mla_planner.audit.lint import layout_of
    from mla_planner.specs.catalogue import load_model
    v3 = load_model("deepseek-v3").spec
    assert layout_of(s, v3).label == "2x(tp16)"       # --dp-size alone: replicas, not DP attention
    dp_attention = parse_command(["python", "-m", "sglang.launch_server", "--tp-size", "16", "--attn-dp-size", "16",
                                  "--ep-size", "16"])
    assert layout_of(dp_attention, v3).label == "tp1·dp16·ep16"     # --tp-size is the whole group


def test_eager_mode_is_priced_not_refused(cli):
    code, out = lint(cli, "vllm", "serve", "deepseek-ai/DeepSeek-V3", "--tensor-parallel-size", "8", "--enforce-eager")
    assert code == 0 and out["ok"] and out["model"] == "deepseek-v3"
    (f,) = out["findings"]
    assert f["level"] == "warn" and f["flag"] == "--enforce-eager" and "ms per token instead of" in f["text"]


def test_flags_that_break_an_fp8_deepseek(cli):
    """sgl-project/sglang#3283's command: --quantization fp8 on the block-FP8 checkpoint, an e5m2 KV cache."""
    code, out = lint(cli, "python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-R1",
                     "--tp", "16", "--quantization", "fp8", "--kv-cache-dtype", "fp8_e5m2", *SGLANG_NODE0,
                     topology="2x8xh100-ib")
    assert code == 1 and not out["ok"]
    flags = {f["flag"]: f for f in out["findings"]}
    assert flags["--quantization"]["level"] == "warn" and "redundant" in flags["--quantization"]["text"]
    assert "fp8_e4m3" in flags["--kv-cache-dtype"]["text"]


def test_backend_block_size_and_layout(cli):
    code, out = lint(cli, "vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "8", "--attention-backend", "FLASHMLA",
                     "--block-size", "32")
    assert code == 1 and "FLASHMLA does not take block size 32" in out["findings"][0]["text"]
    code, out = lint(cli, "vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "8", "--kv-cache-dtype", "fp8",
                     "--block-size", "16")
    assert code == 0 and "so TRITON_MLA runs instead" in out["findings"][0]["text"]    # it starts, on a slower kernel
    code, out = lint(cli, "vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "8", "-dp", "2",
                     "--data-parallel-size-local", "1",        # one DP rank per node (on one node both would start)
                     "--enable-expert-parallel", "--max-model-len", "300000", topology="2x8xh100-ib")
    # tp8 x dp2 with EP16 is legal; vLLM's own rule refuses the length (the engine check, lint_engine)
    assert code == 1 and [f["flag"] for f in out["findings"]] == ["engine", "--all2all-backend"]
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in out["findings"][0]["text"]
    code, out = lint(cli, "vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "6")
    assert code == 1 and any("not divisible by tp=6" in f["text"] for f in out["findings"])
    code, clean = lint(cli, "vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "8", "--kv-cache-dtype", "fp8")
    assert code == 0 and clean["findings"] == []


@pytest.mark.parametrize("words, needle", [(("ls", "-la"), "vLLM or SGLang launch command"),
                                           (("vllm", "serve", "someone/Other-Model", "-tp", "8"), "give --model"),
                                           ((), "after --")])
def test_what_it_cannot_read_is_one_line(cli, words, needle):
    r = cli("lint", "--", *words) if words else cli("lint")
    assert r.exit_code == 2 and needle in r.output and len(r.output.strip().splitlines()) == 1


def test_a_model_given_explicitly(cli):
    code, out = lint(cli, "vllm", "serve", "/models/my-v2", "-tp", "8", model="deepseek-v2", topology="8xh100")
    assert code == 0 and out["model"] == "deepseek-v2"


@pytest.mark.parametrize("model, topology, engine, layout", [
    ("deepseek-v3", "2x8xh200-ib", "sglang", "tp=1,dp=16,ep=16"), ("deepseek-v3", "2x8xh100-ib", "vllm", "tp=8,pp=2"),
    ("deepseek-v3", "8xh200", "vllm", "tp=8"), ("deepseek-v2", "2x8xh100-ib", "sglang", "tp=16")])
def test_what_emit_writes_lints_clean(cli, tmp_path, model, topology, engine, layout):
    """The planner's own launch commands pass its lint: the two read the engines' flags the same way."""
    import shlex
    r = cli("plan", "-m", model, "-t", topology, "-e", engine, "-l", layout, "--emit", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    script = (tmp_path / "out" / "node-0.sh").read_text().replace("\\\n", " ")
    words = shlex.split(next(line for line in script.splitlines() if line.startswith("exec ")))[1:]
    code, out = lint(cli, *words, topology=topology, model=model)
    assert code == 0 and out["ok"], out
    assert not [f for f in out["findings"] if f["level"] == "error"]


def test_reasonable_commands_are_not_refused(cli):
    """From a review: the large-scale EP recipe (DeepEP spreads the experts over the whole group, dense parts
    per rank), aliases and spellings the engines accept, and a fixed-page backend SGLang adjusts itself."""
    code, out = lint(cli, "python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp",
                     "32", "--dp", "32", "--enable-dp-attention", "--moe-dense-tp-size", "1", "--enable-dp-lm-head",
                     "--moe-a2a-backend", "deepep", "--mem-fraction-static", "0.85", "--nnodes", "4", "--node-rank", "0",
                     "--dist-init-addr", "10.0.0.1:5000", topology="4x8xh800-roce")
    assert code == 0 and not [f for f in out["findings"] if f["level"] == "error"], out
    code, out = lint(cli, "vllm", "serve", "deepseek-ai/DeepSeek-V3", "--enable-chunked-prefill", "-tp", "6")
    assert code == 1 and any("tp=6" in f["text"] for f in out["findings"])        # -tp not swallowed
    code, out = lint(cli, "vllm", "serve", "deepseek-ai/DeepSeek-V3", "--tensor_parallel_size", "8",
                     "--max-model-len", "128k", "--attention-backend", "flashmla", "--block-size", "64",
                     "--enforce-eager", "--no-enforce-eager")
    assert code == 0 and out["findings"] == [], out
    code, out = lint(cli, "python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3",
                     "--tp", "8", "--attention-backend", "flashmla", "--page-size", "16")
    assert code == 0 and out["findings"][0]["level"] == "warn" and "resets it to 64" in out["findings"][0]["text"]


def test_engine_from_the_program_not_from_paths(cli):
    cmd = parse_command(["sglang", "serve", "--model-path", "/models/vllm-dsv3", "--tp", "8"])
    assert cmd.engine == "sglang" and cmd.model == "/models/vllm-dsv3"
    code, out = lint(cli, "python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3",
                     "--tp-size", "16", "--attn-dp-size", "16", "--dp-size", "2", topology="2x8xh200-ib")
    assert code == 1 and "data-parallel replicas combined with attention data parallelism are not supported" \
        in out["findings"][0]["text"]         # SGLang's own rule (arg_groups/parallel_hook.py), by the engine check
    code, out = lint(cli, "python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3",
                     "--tp-size", "12", "--attn-dp-size", "8", topology="2x8xh200-ib")
    assert code == 1 and "tp_size 12 must be divisible by attn_dp_size 8" in out["findings"][0]["text"]


def test_tp_across_nodes_is_warned_as_plan_warns(cli):
    code, out = lint(cli, "vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "16", *NODE0, topology="2x8xh100-ib")
    assert code == 0 and out["findings"][0]["level"] == "warn" and "spans 2 nodes" in out["findings"][0]["text"]


def test_environment_before_the_program_is_read(cli):
    """Hand-written launch lines often start with `VAR=value` words or `env` (QA found them refused as "not a
    launch command"). NCCL_IB_HCA is held to the topology's NICs for an instance that spans nodes, by the
    topology file's own rule; inside one node it does not matter."""
    assert parse_command(["env", "A=1", "B=x=y", "vllm", "serve", "m"]).env == {"A": "1", "B": "x=y"}
    for prefix in (["env", "-i", "A=1"], ["/usr/bin/env", "-u", "X", "A=1"], ["sudo", "-E", "A=1"],
                   ["nohup", "env", "-C", "/tmp", "A=1"], ["sudo", "-u", "root", "-E", "A=1"]):
        cmd = parse_command(prefix + ["vllm", "serve", "m", "-tp", "8"])
        assert (cmd.engine, cmd.model, cmd.env) == ("vllm", "m", {"A": "1"})
    code, out = lint(cli, "NCCL_IB_HCA=mlx5_0,mlx5_1", "vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "8", "-pp",
                     "2", *NODE0, topology="2x8xh100-ib-1nic")
    assert code == 0 and [f["flag"] for f in out["findings"] if f["flag"] != "memory"] == ["NCCL_IB_HCA"]
    assert "names 2 HCA(s)" in out["findings"][0]["text"] and "priced with 1 per node" in out["findings"][0]["text"]
    code, out = lint(cli, "env", "NCCL_IB_HCA=mlx5_0", "vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "8", "-pp",
                     "2", *NODE0, topology="2x8xh100-ib-1nic")
    assert code == 0 and [f for f in out["findings"] if f["flag"] != "memory"] == []
    code, out = lint(cli, "NCCL_IB_HCA=mlx5_3", "vllm", "serve", "deepseek-ai/DeepSeek-V3", "-tp", "8",
                     topology="2x8xh200-ib")
    assert code == 0 and out["findings"] == []           # one node: no NIC carries its collectives


def test_deepep_over_shared_nics_is_warned_as_plan_warns(cli):
    code, out = lint(cli, "python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp",
                     "16", "--attn-dp-size", "16", "--moe-a2a-backend", "deepep", *SGLANG_NODE0,
                     topology="2x8xh100-ib-1nic")
    assert any("sharing 1 RDMA NIC per node" in f["text"] for f in out["findings"]), out
    # and at SGLang's own fraction for DP16 (0.335) V3's 55 GiB of weights per GPU leave no KV: `memory` says so too
    assert code == 1 and [f["flag"] for f in out["findings"] if f["level"] == "error"] == ["memory"]
    code, out = lint(cli, "python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp",
                     "16", "--attn-dp-size", "16", "--moe-a2a-backend", "deepep", *SGLANG_NODE0, topology="2x8xh100-ib")
    assert not any("RDMA NIC" in f["text"] for f in out["findings"])


@pytest.mark.parametrize("argv, flag", [
    (["vllm", "serve", "deepseek-ai/DeepSeek-R1", "-tp", "1", "-dp", "8", "--enable-expert-parallel"],
     "--all2all-backend"),
    (["python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-R1", "--tp", "8", "--attn-dp-size",
      "8", "--ep-size", "8"], "--moe-a2a-backend")])
def test_dp_attention_with_ep_over_the_engines_default_dispatch_is_named(cli, argv, flag):
    """vLLM 0.33's default all2all backend is allgather_reducescatter (config/parallel.py), SGLang 0.5.23's
    moe-a2a-backend `none` (arg_groups/fields/exec_.py): both gather every rank's tokens for the experts, where the
    planner plans and prices DeepEP's low-latency all-to-all (launch/a2a.py); naming it silences the warning."""
    code, out = lint(cli, *argv, topology="8xh200")
    found = [f for f in out["findings"] if f["flag"] == flag]
    assert code == 0 and len(found) == 1 and found[0]["level"] == "warn" and "deepep" in found[0]["text"]
    named = argv + [flag, "deepep_low_latency" if flag == "--all2all-backend" else "deepep"]
    assert not [f for f in lint(cli, *named, topology="8xh200")[1]["findings"] if f["flag"] == flag]
    # the memory model prices DeepEP's buffers this command does not allocate: its "no room" is a warning here
    memory = [f for f in out["findings"] if f["flag"] == "memory"]
    assert all(f["level"] == "warn" for f in memory)
    assert all("default dispatch does not allocate" in f["text"] for f in memory if "fit at" in f["text"])


def test_an_explicit_default_dispatch_reads_as_the_absent_flag_and_weights_over_the_budget_stay_an_error(cli):
    """`--moe-a2a-backend none` is SGLang's default: the same warning as no flag; and weights (93.3 GiB a GPU) above
    the budget a 0.6 fraction leaves are an error whichever dispatch runs (review: exit 0 without the flag)."""
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3", "--tp", "8",
            "--attn-dp-size", "8", "--ep-size", "8", "--mem-fraction-static", "0.6"]
    for extra in ([], ["--moe-a2a-backend", "none"]):
        code, out = lint(cli, *argv, *extra)
        levels = {f["flag"]: f["level"] for f in out["findings"]}
        assert code == 1 and levels == {"memory": "error", "--moe-a2a-backend": "warn"}, out
