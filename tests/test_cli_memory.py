"""`mla-plan memory` as a user runs it."""

import json

import pytest


def one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:") and "Traceback" not in result.output
    for n in needles:
        assert n in lines[0], lines[0]


def test_default_is_v3_on_the_seed_cluster(cli):
    r = cli("memory")
    assert r.exit_code == 1, r.output  # DOES NOT FIT exits 1, like `plan` when nothing fits
    assert "deepseek-v3 on 2x8xh100-ib" in r.stdout and "tp8" in r.stdout
    assert "DOES NOT FIT" in r.stdout and "way out" in r.stdout  # FP8 V3 does not fit 8 x 80 GB


def test_does_not_fit_exits_1_after_the_full_json(cli):
    r = cli("memory", "--json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["fits"] is False and data["per_gpu"] and data["ways_out"]


def test_no_safe_fraction_is_printed_when_the_weights_alone_do_not_fit(cli):
    r = cli("memory")
    assert "safe --gpu-memory-utilization" not in r.stdout
    assert "no fraction fits: the weights alone" in r.stdout
    data = json.loads(cli("memory", "--json").stdout)
    assert data["safe_memory_fraction"] is None and data["no_safe_fraction"].startswith("no fraction fits")


def test_kv_capacity_has_one_name_and_the_holding_reads_once(cli):
    out = cli("memory", "-t", "8xh200", "--kv-layout", "latent-sharded").stdout
    assert "KV capacity (tokens per engine instance / DP rank, as the engine logs it)" in out
    assert "KV tokens per GPU" not in out and "latent latent" not in out
    ways = cli("memory").stdout
    assert "KV tokens per GPU" not in ways and "KV capacity" in ways


def test_block_size_no_backend_takes_is_warned(cli):
    r = cli("memory", "-t", "8xh200", "--block-size", "17")
    assert r.exit_code == 0, r.output
    assert "risk: block size 17 is accepted by no vllm MLA attention backend" in r.stdout
    assert "multiples of 16" in r.stdout


def test_seed_layout_tp8_pp2_table(cli):
    r = cli("memory", "--tp", "8", "--pp", "2")
    assert r.exit_code == 0, r.output
    out = r.stdout
    for needle in ("stage 0 (31 layers)", "stage 1 (30 layers)", "weights/routed_experts", "kv_pool",
                   "activation_peak", "cuda_graph", "nccl_buffers", "runtime_overhead", "free",
                   "replicated on every TP rank", "max concurrency at --max-model-len", "largest max-model-len",
                   "binding stage 1", "FITS"):
        assert needle in out, needle


def test_json_carries_the_contract(cli):
    r = cli("memory", "--topology", "8xh200", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["fits"] is True and data["kv_capacity_tokens"] > 163840
    assert data["kv_tokens_per_replica"] == data["kv_capacity_tokens"]
    assert data["knobs"]["memory_fraction"] == 0.92
    for g in data["per_gpu"]:
        assert {"pp_stage", "weights_bytes", "kv_pool_bytes", "kv_bytes_per_token", "kv_tokens", "terms"} <= set(g)
        assert sum(g["terms"].values()) == pytest.approx(g["total_bytes"])


def test_sglang_uses_its_computed_default_fraction(cli):
    data = json.loads(cli("memory", "-t", "8xh200", "--engine", "sglang", "--json").stdout)
    assert data["knobs"]["memory_fraction"] == 0.886
    assert data["memory_fraction_flag"] == "--mem-fraction-static"
    assert "req_to_token" in data["per_gpu"][0]["terms"]


def test_flags_reach_the_model(cli):
    base = json.loads(cli("memory", "-t", "8xh200", "--json").stdout)
    fp8 = json.loads(cli("memory", "-t", "8xh200", "--kv-cache-dtype", "fp8", "--json").stdout)
    assert fp8["per_gpu"][0]["kv_bytes_per_token"] == base["per_gpu"][0]["kv_bytes_per_token"] / 2
    dcp = json.loads(cli("memory", "-t", "8xh200", "--dcp", "8", "--block-size", "64", "--json").stdout)
    assert dcp["kv_capacity_tokens"] > 7 * base["kv_capacity_tokens"]
    dp = json.loads(cli("memory", "-t", "8xh200", "--tp", "1", "--dp", "8", "--json").stdout)
    assert dp["layout"]["ep"] == 8 and dp["kv_tokens_per_replica"] == 8 * dp["kv_capacity_tokens"]
    mtp = json.loads(cli("memory", "-t", "8xh200", "--mtp", "--json").stdout)
    assert "weights/mtp" in mtp["per_gpu"][0]["terms"]
    eager = json.loads(cli("memory", "-t", "8xh200", "--enforce-eager", "--json").stdout)
    assert eager["per_gpu"][0]["terms"]["cuda_graph"] == 0


@pytest.mark.parametrize("args, needle", [
    (("--gpu-memory-utilization", "1.5"), "(0, 1]"),
    (("--gpu-memory-utilization", "0.9", "--mem-fraction-static", "0.9"), "not both"),
    (("--mem-fraction-static", "0.9"), "--gpu-memory-utilization"),
    (("--tp", "3"), "not divisible by tp=3"),
    (("--tp", "8", "--pp", "4"), "needs 32 GPUs"),
    (("--kv-cache-dtype", "fp9"), "--kv-cache-dtype"),
    (("--engine", "trtllm"), "--engine"),
    (("--max-model-len", "0"), "--max-model-len"),
    (("--kv-layout", "sideways"), "--kv-layout"),
    (("--engine-version", "abc"), "--engine-version 'abc'"),
    (("--max-model-len", "99999999999"), "max_position_embeddings 163,840"),
    (("--engine", "sglang", "--max-num-seqs", "100000000000000"), "--max-num-seqs"),
    (("--max-num-batched-tokens", "10000000000"), "--max-num-batched-tokens"),
    (("--block-size", "100000"), "--block-size"),
])
def test_bad_input_is_one_line(cli, args, needle):
    one_line_error(cli("memory", *args), needle)


def test_help_teaches_the_engine_flags(cli):
    r = cli("memory", "--help")
    assert r.exit_code == 0
    for flag in ("--gpu-memory-utilization", "--mem-fraction-static", "--max-running-requests", "--page-size",
                 "--chunked-prefill-size", "--context-length", "NOT divided by TP", "1 DOES NOT FIT"):
        assert flag in r.stdout, flag


def test_vllm_budget_below_max_num_seqs_is_bad_input_and_deepep_defaults_to_256(cli):
    """vLLM 0.33 refuses max_num_batched_tokens < max_num_seqs at start-up; without --max-num-seqs it caps the
    default 1024 at the budget, which is 256 under DP + EP with the DeepEP low-latency all-to-all."""
    r = cli("memory", "--tp", "16", "--max-num-batched-tokens", "1")
    assert r.exit_code == 0                      # max-num-seqs not given: capped at the budget, as vLLM does
    r = cli("memory", "--tp", "16", "--max-num-batched-tokens", "100", "--max-num-seqs", "200")
    assert r.exit_code == 2 and "refuses to start" in r.stderr and "Traceback" not in r.output
    data = json.loads(cli("memory", "--tp", "1", "--dp", "16", "--ep", "16", "--json").stdout)
    assert data["knobs"]["max_num_batched_tokens"] == 256 and data["knobs"]["max_num_seqs"] == 256
    sg = json.loads(cli("memory", "--engine", "sglang", "--tp", "16", "--max-num-batched-tokens", "100",
                        "--max-num-seqs", "200", "--json").stdout)   # SGLang's chunk and running cap are separate
    assert sg["knobs"]["max_num_seqs"] == 200


def test_a_kv_format_no_backend_runs_does_not_fit_and_says_so(cli):
    """fp8_ds_mla is FlashMLA's sparse-attention format: no dense MLA backend of vLLM 0.33 lists it and SGLang
    0.5.23 has no such choice; FP8 KV on Ampere has no backend either. The engine would refuse to start."""
    r = cli("memory", "--engine", "sglang", "--tp", "16", "--kv-cache-dtype", "fp8_ds_mla")
    assert r.exit_code == 1 and "no sglang MLA backend runs a fp8_ds_mla KV cache" in r.stdout
    assert "--kv-cache-dtype auto" in r.stdout                       # the way out
    r = cli("memory", "-t", "4x8xa100-ib", "--tp", "8", "--pp", "4", "--kv-cache-dtype", "fp8")
    assert r.exit_code == 1 and "no vllm MLA backend runs a fp8 KV cache on A100" in r.stdout


def test_an_fp8_checkpoint_sglang_cannot_run_does_not_fit_anywhere(cli):
    """SGLang 0.5.23 has no FP8 MoE kernel below sm89: memory and compare say so as plan does, and the
    no-candidate advice of an SGLang-only plan does not offer a layout SGLang still cannot run."""
    r = cli("memory", "-m", "deepseek-v3", "-t", "4x8xa100-ib", "-e", "sglang", "--tp", "8", "--pp", "4")
    assert r.exit_code == 1 and "no FP8 Marlin MoE" in r.stdout
    c = json.loads(cli("compare", "-m", "deepseek-v3", "-t", "4x8xa100-ib", "-e", "sglang", "-l", "tp=8,pp=4",
                       "--json").stdout)
    assert c["layouts"][0]["meets_targets"] is False
    p = json.loads(cli("plan", "-m", "deepseek-v3", "-t", "4x8xa100-ib", "-e", "sglang", "--json").stdout)
    assert p["candidates"] == [] and not any("would fit" in line for line in p["nothing_fits"])
    v = cli("memory", "-m", "deepseek-v3", "-t", "4x8xa100-ib", "--tp", "8", "--pp", "4")   # vLLM: FP8 Marlin
    assert "FP8 Marlin" in v.stdout and "no FP8 Marlin MoE" not in v.stdout


def test_sglang_dp_attention_on_two_h100_nodes_is_explained_not_contradicted(cli):
    """SGLang's own default fraction for DP16 on H100 is 0.297 (its DP-attention graph reserve, and DeepEP's), and the
    weights (55.1 GiB: under DeepEP SGLang runs the shared experts replicated, models/deepseek_v2.py) with a
    block and the DeepEP buffer need more of the static pool than SGLang's own ceiling gives at any fraction. The
    report says that in those words (it once said '76.4 GiB, more than the GPU's 79.1 GiB' beside a fraction),
    and twice the nodes fits."""
    import json
    r = cli("memory", "-m", "deepseek-v3", "-t", "2x8xh100-ib", "-e", "sglang", "--tp", "1", "--dp", "16",
            "--ep", "16", "--json")
    data = json.loads(r.stdout)
    assert r.exit_code == 1 and data["no_safe_fraction"].startswith(
        "no fraction up to SGLang's own ceiling 0.874 fits: on stage 0 the weights (55.1 GiB per GPU)")
    assert any(n.startswith("--mem-fraction-static 0.297 is SGLang's own default here") for n in data["notes"])
    assert any(w.startswith("more nodes: 4 x 8 H100-SXM-80G with pp=2 with --mem-fraction-static")
               for w in data["ways_out"]), data["ways_out"]


def test_engine_names_in_any_case_and_contradictory_graph_flags(cli):
    import json
    assert json.loads(cli("memory", "-e", "SGLang", "--json").stdout)["engine"] == "sglang"
    r = cli("memory", "--enforce-eager", "--cuda-graph-max-bs", "64")
    assert r.exit_code == 2 and "--enforce-eager captures none" in r.output


def test_a_layout_vllm_cannot_launch_is_bad_input(cli):
    """vLLM's expert-parallel group is always tp*dp (--enable-expert-parallel has no size): memory refuses ep=8
    under dp=16 with one line and exit 2, as plan rejects it, while SGLang prices it."""
    args = ("memory", "--tp", "1", "--dp", "16", "--ep", "8", "--kv-cache-dtype", "fp8", "--max-model-len", "4096")
    r = cli(*args)
    assert r.exit_code == 2 and "ep=8 cannot be expressed in vLLM" in r.output and len(r.output.splitlines()) == 1
    assert cli(*args, "-e", "sglang").exit_code in (0, 1)


def test_why_it_does_not_fit_comes_before_the_risks(cli):
    """A missing backend blocks; a thin margin is a risk either way: the verdict says which is which (the
    search quotes the first reason when it rejects a layout)."""
    import json
    args = ("memory", "--tp", "8", "--pp", "2", "--kv-cache-dtype", "fp8_ds_mla")
    safe = json.loads(cli(*args, "--json").stdout)["safe_memory_fraction"]
    thin = f"{safe + 0.01:.3f}"     # above the safe fraction, but not out of memory: under the 2 GiB margin
    r = cli(*args, "--gpu-memory-utilization", thin, "--json")
    d = json.loads(r.stdout)
    assert r.exit_code == 1 and not d["fits"]
    assert d["blocking_reasons"] == d["reasons"][:1] and "fp8_ds_mla" in d["blocking_reasons"][0]
    assert any("left free" in x for x in d["reasons"][1:])
    text = cli(*args, "--gpu-memory-utilization", thin).stdout
    assert "why: no vllm MLA backend" in text and "risk: stage 0: only" in text and "why: stage" not in text


def test_every_command_refuses_what_the_engine_cannot_start(cli):
    """One rule set (engines/layouts.py) for memory, verify, compare and plan: SGLang's FP8 dense MLP split 32 ways
    under DP attention (576 columns a GPU) cannot load; per rank it can."""
    args = ("memory", "-m", "deepseek-v3", "-t", "4x8xh800-roce", "-e", "sglang", "--tp", "1", "--dp", "32",
            "--mem-fraction-static", "0.85")
    r = cli(*args)
    assert r.exit_code == 2 and "576 per GPU" in r.output and "--moe-dense-tp-size 1" in r.output
    assert cli(*args, "--dense-per-rank").exit_code in (0, 1)
    v = cli("verify", "--device", "cpu", "--quick", "-m", "deepseek-v3", "-t", "2x8xh100-ib", "-l", "tp=8,dp=2,ep=4")
    assert v.exit_code == 2 and "ep=4 cannot be expressed in vLLM" in v.output
    import json
    row = json.loads(cli("compare", "-m", "deepseek-v3", "-t", "4x8xh800-roce", "-e", "sglang", "-l",
                         "tp=1,dp=32,ep=32", "--json").stdout)["layouts"][0]
    assert any("will not start as priced here" in n and "576 per GPU" in n for n in row["notes"])
