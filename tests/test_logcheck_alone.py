"""`mla-plan check-log` without --plan: the log of a server the user launched themselves, read by itself
(mla_planner/audit/logcheck_read.py, logcheck_alone.py), and with --plan the same facts beside the checks.

The log excerpts are written from the format strings in the engines' own source, not captured from a run:
vLLM 0.33.0 (logger.py _FORMAT "(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s
[%(fileinfo)s:%(lineno)d] %(message)s"; entrypoints/common/startup.py:log_version_and_model and
log_non_default_args; v1/engine/core.py:EngineCore.__init__ with config/vllm.py:VllmConfig.__str__;
platforms/cuda.py:get_attn_backend_cls; fused_moe/fused_moe.py:get_moe_configs; v1/core/kv_cache_utils.py:
update_kv_cache_capacity; v1/core/kv_cache_planning.py:_check_enough_kv_cache_memory) and SGLang 0.5.23
(utils/common.py:configure_logger "[%(asctime)s{prefix}] %(message)s"; entrypoints/engine.py:Engine.__init__
server_args=ServerArgs.resolved_dict(); mem_cache/memory_pool.py:KVCache._finalize_allocation_log;
managers/scheduler.py:init_model_worker; fused_moe_triton_config.py:get_moe_configs; managers/tp_worker.py:
get_worker_info; check_env.py:BaseEnv.check_env), and NCCL's transport lines (src/transport/p2p.cc, shm.cc,
net.cc)."""

from __future__ import annotations

import json

import pytest

VLLM_033 = [
    "(APIServer pid=4100) INFO 12-01 10:00:00 [startup.py:38] vLLM server version 0.33.0, serving model "
    "deepseek-ai/DeepSeek-V3",
    "(APIServer pid=4100) INFO 12-01 10:00:00 [startup.py:96] non-default args: {'model_tag': "
    "'deepseek-ai/DeepSeek-V3', 'model': 'deepseek-ai/DeepSeek-V3', 'trust_remote_code': True, 'max_model_len': "
    "32768, 'block_size': 64, 'kv_cache_dtype': 'fp8', 'gpu_memory_utilization': 0.92, 'tensor_parallel_size': 8}",
    "(EngineCore_DP0 pid=4200) INFO 12-01 10:00:05 [core.py:140] Initializing a V1 LLM engine (v0.33.0) with config: "
    "model='deepseek-ai/DeepSeek-V3', speculative_config=None, tokenizer='deepseek-ai/DeepSeek-V3', "
    "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=True, "
    "dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, load_format=auto, tensor_parallel_size=8, "
    "pipeline_parallel_size=1, data_parallel_size=1, decode_context_parallel_size=1, dcp_comm_backend=ag_rs, "
    "disable_custom_all_reduce=False, quantization=fp8, quantization_config=None, enforce_eager=False, "
    "aux_output_config=None, kv_cache_dtype=fp8, device_config=cuda, seed=0, served_model_name=deepseek-ai/"
    "DeepSeek-V3, enable_prefix_caching=True, enable_chunked_prefill=True, pooler_config=None, "
    "compilation_config={'level': 3}, kernel_config=None",
    "(Worker_TP0 pid=4300) INFO 12-01 10:00:20 [cuda.py:509] Using FLASHMLA attention backend out of potential "
    "backends: ['FLASHMLA', 'FLASHINFER_MLA', 'TRITON_MLA'].",
    "node0:4300:4300 [0] NCCL INFO NCCL version 2.27.3+cuda12.9",
    "node0:4300:4400 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "node0:4300:4400 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "(Worker_TP0 pid=4300) WARNING 12-01 10:01:00 [fused_moe.py:1166] Using default MoE config. Performance might be "
    "sub-optimal! Config file not found at /usr/lib/python3/dist-packages/vllm/model_executor/layers/fused_moe/"
    "configs/E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
    "(EngineCore_DP0 pid=4200) INFO 12-01 10:02:00 [kv_cache_utils.py:1148] GPU KV cache size: 1,044,992 tokens, "
    "Maximum concurrency for 32,768 tokens per request: 31.89x"]

SGLANG_0523 = [
    "[2026-12-01 10:00:00] server_args={'model_path': 'deepseek-ai/DeepSeek-V3', 'tokenizer_path': "
    "'deepseek-ai/DeepSeek-V3', 'context_length': None, 'quantization': None, 'kv_cache_dtype': 'fp8_e4m3', "
    "'speculative_draft_kv_cache_dtype': None, 'mem_fraction_static': 0.83, 'max_running_requests': None, "
    "'chunked_prefill_size': 8192, 'page_size': 64, 'tp_size': 16, 'dcp_size': 1, 'pp_size': 1, 'dp_size': 1, "
    "'ep_size': 16, 'attention_backend': 'flashmla', 'decode_attention_backend': None, 'disable_cuda_graph': False, "
    "'disable_radix_cache': False, 'enable_dp_attention': False}",
    "[2026-12-01 10:00:40 TP0] Using default MoE kernel config. Performance might be sub-optimal! Config file not "
    "found at /sgl-workspace/sglang/python/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_5_1/"
    "E=257,N=128,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128, 128].json, you can create them "
    "with https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton",
    "node1:900:900 [0] NCCL INFO NET/IB : No device found.",
    "node1:900:900 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>",
    "node1:900:950 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [send] via NET/Socket/0",
    "[2026-12-01 10:01:00 TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 712400, KV size: 31.35 GB",
    "[2026-12-01 10:01:10 TP0] max_total_num_tokens=712400, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=2048, context_len=163840, available_gpu_mem=12.34 GB"]


def _log(tmp_path, lines, name="server.log"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _run(cli, *args):
    r = cli("check-log", *args, "--json")
    data = json.loads(r.stdout) if r.stdout.strip() else {}
    return r.exit_code, data, {c["name"]: c for c in data.get("checks", [])}


def test_a_vllm_033_log_read_by_itself(cli, tmp_path):
    code, data, checks = _run(cli, _log(tmp_path, VLLM_033))
    assert code == 0 and data["against_plan"] is False and data["ok"] is True and "candidate" not in data
    assert next(iter(data)) == "schema_version"
    facts = data["facts"]
    assert facts["engine"] == "vllm" and facts["engine_version"] == "0.33.0" and facts["kv_cache_tokens"] == [1044992]
    assert facts["settings"] == {"tp": 8, "pp": 1, "dp": 1, "dcp": 1, "max_model_len": 32768, "kv_cache_dtype": "fp8",
                                 "block_size": 64, "memory_fraction": 0.92, "attention_backend": "FLASHMLA",
                                 "cuda_graphs": True, "prefix_caching": True, "quantization": "fp8"}
    assert facts["max_concurrency"] == 31.89
    assert facts["untuned_moe_configs"] == ["E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]"
                                            ".json"]
    assert facts["nccl"] == {"version": "2.27.3+cuda12.9", "network": None, "transports": {"P2P/CUMEM/read": 2}}
    assert [(c["name"], c["status"]) for c in data["checks"]] == [
        ("engine_version", "ok"), ("startup", "ok"), ("kv_cache", "ok"), ("engine_config", "ok"),
        ("moe_kernels", "warn"), ("network", "ok"), ("benchmark", "absent")]
    assert "benchmark_moe.py" in checks["moe_kernels"]["text"] and "within a node" in checks["network"]["text"]
    text = cli("check-log", _log(tmp_path, VLLM_033)).stdout
    assert text.startswith("vLLM 0.33.0 log, read by itself")
    assert "tensor_parallel_size 8" in text and "gpu_memory_utilization 0.92" in text and "WARN moe_kernels" in text


def test_an_sglang_0523_log_read_by_itself(cli, tmp_path):
    code, data, checks = _run(cli, _log(tmp_path, SGLANG_0523))
    facts = data["facts"]
    assert code == 0 and facts["engine"] == "sglang" and facts["kv_cache_tokens"] == [712400]
    assert facts["settings"] == {"tp": 16, "pp": 1, "dp": 1, "dcp": 1, "ep": 16, "max_model_len": 163840,
                                 "kv_cache_dtype": "fp8_e4m3", "block_size": 64, "memory_fraction": 0.83,
                                 "attention_backend": "flashmla", "cuda_graphs": True, "prefix_caching": True,
                                 "max_num_seqs": 2048}
    assert facts["untuned_moe_configs"] == ["E=257,N=128,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,"
                                            "block_shape=[128, 128].json"]
    assert facts["nccl"]["network"] == "Socket" and facts["nccl"]["transports"] == {"NET/Socket": 1}
    assert checks["network"]["status"] == "warn" and "TCP sockets" in checks["network"]["text"]
    assert checks["moe_kernels"]["status"] == "warn" and "tuning_fused_moe_triton.py" in checks["moe_kernels"]["text"]
    assert checks["engine_version"]["status"] == "absent" and "sglang.check_env" in checks["engine_version"]["text"]
    env = ["Python: 3.12.3", "CUDA available: True", "sglang: 0.5.23", "sgl_kernel: 0.3.21"]
    code, data, checks = _run(cli, _log(tmp_path, env + SGLANG_0523))
    assert checks["engine_version"] == {"name": "engine_version", "status": "ok", "text": "SGLang 0.5.23"}
    only_pool = [ln for ln in SGLANG_0523 if "max_total_num_tokens" not in ln]   # the pool line alone
    assert _run(cli, _log(tmp_path, only_pool))[1]["facts"]["kv_cache_tokens"] == [712400]
    older = ["[2025-03-01 10:01:00 TP0] KV Cache is allocated. #tokens: 650000, K size: 15.67 GB, V size: 15.67 GB"]
    assert _run(cli, _log(tmp_path, older))[1]["facts"]["kv_cache_tokens"] == [650000]   # before the dtype field


def test_the_engine_refusing_to_start_fails_without_a_plan(cli, tmp_path):
    """vLLM's and SGLang's own refusals for want of KV memory are exit 1; SGLang's warning that the pool is
    shorter than one full-length request is a warning."""
    vllm = VLLM_033[:3] + ["(EngineCore_DP0 pid=4200) ERROR 12-01 10:02:00 [core.py:1] ValueError: To serve at least "
                           "one request with the model's max seq len (163840), (10.50 GiB KV cache is needed, which is "
                           "larger than the available KV cache memory (4.20 GiB). Based on the available memory, the "
                           "estimated maximum model length is 65536. Try increasing `gpu_memory_utilization`"]
    code, data, checks = _run(cli, _log(tmp_path, vllm))
    assert code == 1 and data["ok"] is False and checks["startup"]["status"] == "fail"
    assert "KV cache is needed" in checks["startup"]["text"] and checks["kv_cache"]["status"] == "absent"
    sglang = SGLANG_0523[:1] + ["[2026-12-01 10:01:00 TP0] ValueError: Loaded weights leave no GPU memory for the KV "
                                "cache under --mem-fraction-static=0.5. Raise --mem-fraction-static above 0.712"]
    assert _run(cli, _log(tmp_path, sglang))[0] == 1
    short = SGLANG_0523 + ["[2026-12-01 10:01:10 TP0] KV pool holds 100000 tokens, fewer than --context-length "
                           "163840. One full-length request cannot fit, so long requests will be refused"]
    code, data, checks = _run(cli, _log(tmp_path, short))
    assert code == 0 and checks["startup"]["status"] == "warn" and "100,000" in checks["startup"]["text"]


def test_an_older_release_and_the_older_version_line_warn(cli, tmp_path):
    old = ["INFO 04-16 10:31:00 [api_server.py:1] vLLM API server version 0.8.4",
           "INFO 04-16 10:31:19 [kv_cache_utils.py:634] GPU KV cache size: 1,616,640 tokens"]
    code, data, checks = _run(cli, _log(tmp_path, old))
    assert code == 0 and data["facts"]["engine_version"] == "0.8.4"
    assert checks["engine_version"]["status"] == "warn" and "mla-plan models 0.33" in checks["engine_version"]["text"]
    assert checks["engine_config"]["status"] == "absent"
    logo = ["(APIServer pid=1) INFO 12-01 10:00:00 [startup.py:38] ",
            "        █     █     █▄   ▄█",
            " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0",
            "  █▄█▀ █     █     █     █  model   deepseek-ai/DeepSeek-V3", old[1]]
    assert _run(cli, _log(tmp_path, logo))[1]["facts"]["engine_version"] == "0.33.0"


def test_bench_and_nccl_tests_output_without_a_plan(cli, tmp_path):
    bench = ["============ Serving Benchmark Result ============",
             f"{'Output token throughput (tok/s):':<40} {4000.12:<10.2f}", f"{'Mean TPOT (ms):':<40} {48.2:<10.2f}"]
    code, data, checks = _run(cli, _log(tmp_path, VLLM_033[-1:] + bench))
    assert code == 0 and data["facts"]["benchmark"] == {"output_tokens_per_s": 4000.12, "mean_tpot_ms": 48.2,
                                                         "replicas": None, "concurrency": None}
    assert checks["benchmark"]["text"].startswith("bench.sh: 4,000 output tok/s, mean TPOT 48.2 ms")
    code, data, checks = _run(cli, _log(tmp_path, VLLM_033[-1:] + ["mla-plan bench: REPLICAS=3 CONCURRENCY=96"] + bench))
    assert data["facts"]["benchmark"]["replicas"] == 3 and "over 3 replicas" in checks["benchmark"]["text"]
    for odd in ("REPLICAS=1.5 CONCURRENCY=96", "REPLICAS=0 CONCURRENCY=96", "REPLICAS=abc CONCURRENCY=96"):
        code, data, checks = _run(cli, _log(tmp_path, VLLM_033[-1:] + [f"mla-plan bench: {odd}"] + bench))
        assert data["facts"]["benchmark"]["replicas"] is None and "over" not in checks["benchmark"]["text"]
        assert any("ignored bench.sh's line" in n for n in data["notes"]), odd
    table = ["# Collective test starting: all_reduce_perf",
             "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw",
             "     1048576        262144     float     sum      -1    71.93   14.58   27.34      0    71.50   14.66",
             "    16777216       4194304     float     sum      -1   185.40   90.49  169.67      0   185.00   90.69"]
    code, data, checks = _run(cli, _log(tmp_path, table))
    assert code == 0 and [c["name"] for c in data["checks"]] == ["nccl_tests"]
    assert "2 size(s), 1,048,576 B to 16,777,216 B (185.4 us" in checks["nccl_tests"]["text"]


def test_nccl_s_transport_by_the_channels_it_logged(cli, tmp_path):
    """A one-node run names its network plugin (NET/Socket where no IB device is found) but sends nothing over
    it: by the channels, that is within a node; a NET/ channel crosses nodes; the plugin alone is a warning."""
    p2p = ["node0:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read"]
    plugin = ["node0:1:1 [0] NCCL INFO NET/IB : No device found.", "node0:1:1 [0] NCCL INFO NET/Socket : Using "
              "[0]eth0:10.0.0.1<0>", "node0:1:1 [0] NCCL INFO Using network Socket"]
    ib = ["node0:1:2 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA",
          "node0:1:2 [0] NCCL INFO Channel 01/0 : 7[7] -> 8[0] [send] via NET/IB/1/GDRDMA/Shared"]
    for lines, status, words in ((p2p + plugin, "ok", "within a node only (its network plugin is sockets"),
                                 (plugin, "warn", "if the instance spans nodes"),
                                 (p2p + ib, "ok", "between nodes over NET/IB/GDRDMA; NCCL channels: NET/IB/GDRDMA "
                                                  "(2), P2P/IPC/read (1)")):
        code, data, checks = _run(cli, _log(tmp_path, VLLM_033[-1:] + lines))
        assert code == 0 and checks["network"]["status"] == status and words in checks["network"]["text"], checks


def test_bad_input_without_a_plan(cli, tmp_path):
    log = _log(tmp_path, VLLM_033)
    for args, words in (((log, "--candidate", "2"), "give --plan too"),
                        ((_log(tmp_path, ["INFO: nothing useful"], "x.log"),), "no vLLM, SGLang, NCCL"),
                        ((str(tmp_path / "missing.log"),), "no such file")):
        r = cli("check-log", *args)
        assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr


@pytest.fixture(scope="module")
def vllm_plan(tmp_path_factory):
    from click.testing import CliRunner

    from mla_planner.cli.app import app
    r = CliRunner().invoke(app, ["plan", "-m", "deepseek-v3", "-t", "8xh200", "-e", "vllm", "-l", "tp=8", "--json"])
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(r.stdout)
    return path


def test_with_a_plan_the_same_facts_beside_the_checks(cli, tmp_path, vllm_plan):
    code, data, checks = _run(cli, _log(tmp_path, VLLM_033), "--plan", str(vllm_plan))
    assert data["against_plan"] is True and data["candidate"] == 1 and data["engine"] == "vllm"
    assert data["facts"]["settings"]["tp"] == 8 and data["notes"] == []
    assert [c["name"] for c in data["checks"]] == ["kv_cache", "launch_settings", "network", "moe_kernels",
                                                   "engine_config", "engine_version", "benchmark"]
    refused = VLLM_033[:3] + ["(EngineCore_DP0 pid=4200) ERROR 12-01 10:02:00 [core.py:1] ValueError: No available "
                              "memory for the cache blocks. Try increasing `gpu_memory_utilization`"]
    code, data, checks = _run(cli, _log(tmp_path, refused), "--plan", str(vllm_plan))
    assert code == 1 and data["checks"][-1]["name"] == "startup" and data["checks"][-1]["status"] == "fail"


@pytest.mark.parametrize("release, default", [("0.33.0", "0.92"), ("0.19.1", "0.9")])
def test_an_unlogged_fraction_is_the_releases_default(cli, tmp_path, release, default):
    """vLLM logs gpu_memory_utilization only when set; its default is 0.9 up to 0.19.1 and 0.92 from 0.20.0
    (engines/memory_rules.default_memory_fraction), so the note names the logged release's."""
    lines = [VLLM_033[0].replace("0.33.0", release),
             VLLM_033[1].replace(", 'gpu_memory_utilization': 0.92", "").replace(", 'block_size': 64", "")]
    (tmp_path / "server.log").write_text("\n".join(lines) + "\n")
    r = cli("check-log", str(tmp_path / "server.log"), "--json")
    check = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "engine_config")
    assert f"the defaults are {default} and the backend's" in check["text"]


def test_a_start_up_refusal_is_quoted_from_its_message(cli, tmp_path):
    """The quote starts where the engine's message does, so it keeps the figures that say what to change."""
    (tmp_path / "server.log").write_text(VLLM_033[0] + "\n(EngineCore_DP0 pid=4200) ERROR 12-01 10:02:00 [core.py:700] "
                                         "ValueError: To serve at least one request with the models's max seq len "
                                         "(163840), (10.72 GiB KV cache is needed, which is larger than the available "
                                         "KV cache memory (3.10 GiB).\n")
    r = cli("check-log", str(tmp_path / "server.log"), "--json")
    startup = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "startup")
    assert r.exit_code == 1 and "max seq len (163840), (10.72 GiB KV cache is needed" in startup["text"]


def test_a_benchmark_that_produced_nothing_warns(cli, tmp_path):
    """Found by QA: 0 successful requests and 0 tok/s read as an ok benchmark."""
    log = tmp_path / "bench.log"
    log.write_text("============ Serving Benchmark Result ============\nSuccessful requests:                     0\n"
                   "Output token throughput (tok/s):         0.00\n")
    result = cli("check-log", str(log))
    assert "WARN benchmark: bench.sh: 0 output tok/s: no output was produced" in result.stdout
