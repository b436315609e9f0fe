"""The behaviour corpus: command lines whose `--json` output (and the folders `emit` writes) were recorded
before the package restructure (issue 17) and must stay identical after it, but for `schema_version` (the
2026 MLA family and rack-scale NVLink scenarios, recorded after issues 18-20, guard those the same way).

Each scenario is a name and the words after `mla-plan`. A `plan` scenario that finds a candidate is also
emitted (candidate 1, and the extra emits listed with it), and its plan file feeds the `compare --plan`
scenarios that name it. Paths are relative to the repository root; the inputs live in `inputs/`.
"""

from __future__ import annotations

INPUTS = "tests/corpus/inputs"
AWQ = f"{INPUTS}/DeepSeek-V3-AWQ/config.json"
INT8_BLOCK = f"{INPUTS}/DeepSeek-R1-Block-INT8"
INT8_CHANNEL = f"{INPUTS}/DeepSeek-R1-Channel-INT8"
CALIBRATION = f"{INPUTS}/calibration-h100.yaml"
USER_TOPOLOGY = f"{INPUTS}/4x8xh200-roce.yaml"
V2_LITE_CONFIG = "tests/fixtures/hf/DeepSeek-V2-Lite/config.json"
V3_SNAPSHOT = "tests/fixtures/hf/DeepSeek-V3"

# name -> (plan arguments, extra emit argument lists beyond the default `--candidate 1`)
PLANS: dict[str, tuple[list[str], list[list[str]]]] = {
    "plan-default": ([], [["--candidate", "2"], ["--engine", "sglang"], ["--mode", "ray"]]),
    "plan-v3-h200-vllm": (["-m", "deepseek-v3", "-t", "8xh200", "-e", "vllm"], []),
    "plan-v3-h200-sglang": (["-m", "deepseek-v3", "-t", "8xh200", "-e", "sglang"], []),
    "plan-r1-2xh200-mtp": (["-m", "deepseek-r1", "-t", "2x8xh200-ib", "--mtp"], [["--engine", "sglang"]]),
    "plan-kimi-h800-roce": (["-m", "kimi-k2", "-t", "4x8xh800-roce"], [["--candidate", "3"]]),
    "plan-v2-h100": (["-m", "deepseek-v2", "-t", "8xh100"], []),
    "plan-v2lite-percentiles": (["-m", "deepseek-v2-lite", "-t", "8xh100", "--input-len", "p50=1024,p99=8192",
                                 "--output-len", "p50=256,p99=2048"], []),
    "plan-llama-gqa": (["-m", "llama-3.1-70b", "-t", "8xh100"], []),
    "plan-v3-b200-rate": (["-m", "deepseek-v3", "-t", "8xb200", "--request-rate", "5"], []),
    "plan-v3-h20-dp-ep": (["-m", "deepseek-v3", "-t", "2x8xh20-roce", "-e", "sglang"], []),
    "plan-awq-h100": (["-m", AWQ, "-t", "8xh100"], []),
    "plan-int8-block-a100": (["-m", INT8_BLOCK, "-t", "4x8xa100-ib"], []),
    "plan-int8-channel-a100": (["-m", INT8_CHANNEL, "-t", "4x8xa100-ib"], []),
    "plan-calibrated": (["--calibration", CALIBRATION], []),
    "plan-layouts-sglang": (["-e", "sglang", "-l", "tp=16", "-l", "tp=8,pp=2"], []),
    "plan-rank-total-l40s": (["-m", "deepseek-v2-lite", "-t", "2x8xl40s-eth", "--rank-by", "total"], []),
    "plan-prefix-hits": (["-m", "deepseek-r1", "-t", "8xh200", "--prefix-hit-rate", "0.5", "--input-len", "8192"],
                         []),
    "plan-bf16-eager": (["-m", "deepseek-v2-lite", "-t", "8xh100", "--kv-cache-dtype", "bf16", "--enforce-eager",
                         "--tpot-ms", "150"],
                        []),
    "plan-user-topology": (["-m", "deepseek-v3", "-t", USER_TOPOLOGY, "--tpot-ms", "30"],
                           [["--engine", "sglang"]]),
    "plan-hf-config": (["-m", V2_LITE_CONFIG, "-t", "8xh100", "--concurrency", "64"], []),
    "plan-one-nic": (["-t", "2x8xh100-ib-1nic", "--ttft-ms", "1000"], []),
    "plan-tight-tpot-dcp": (["-m", "deepseek-r1", "-t", "2x8xh200-ib", "--tpot-ms", "25", "-e", "vllm"], []),
    "plan-none-fit": (["-m", "kimi-k2", "-t", "8xh100"], []),
    # the 2026 MLA family, recorded after issues 18 and 19 (guards DSA and DeepSeek-V4 against unintended changes)
    "plan-v32-h200": (["-m", "deepseek-v3.2", "-t", "8xh200"], []),
    "plan-glm52-b200-sglang": (["-m", "glm-5.2", "-t", "8xb200", "-e", "sglang"], []),
    "plan-v4pro-b200": (["-m", "tests/fixtures/hf/DeepSeek-V4-Pro", "-t", "8xb200"], [["--engine", "sglang"]]),
    "plan-v4flash-dspark-h200": (["-m", "tests/fixtures/hf/DeepSeek-V4-Flash-0731", "-t", "8xh200", "--mtp"], []),
    "plan-r1-nvl72": (["-m", "deepseek-r1", "-t", "gb200-nvl72", "--top", "3"], []),
    # AMD Instinct, recorded after issue 20's ROCm DSA, V4 and MoRI work (guards them the same way)
    "plan-r1-mi355x": (["-m", "deepseek-r1", "-t", "8xmi355x", "--top", "3"], [["--engine", "sglang"]]),
    "plan-glm5fp8-mi300x": (["-m", "glm-5-fp8", "-t", "8xmi300x", "--top", "3"], [["--engine", "sglang"]]),
    "plan-r1-mori-2xmi355x": (["-m", "deepseek-r1", "-t", "2x8xmi355x-roce", "-l", "tp=1,dp=16,ep=16"], []),
}

# name -> words after `mla-plan`
COMMANDS: dict[str, list[str]] = {
    "memory-tp8-pp2-vllm": ["memory", "--tp", "8", "--pp", "2"],
    "memory-tp8-pp2-sglang": ["memory", "--tp", "8", "--pp", "2", "-e", "sglang", "--kv-cache-dtype", "fp8"],
    "memory-dp-ep-sglang": ["memory", "-m", "deepseek-r1", "-t", "2x8xh200-ib", "--tp", "1", "--dp", "16", "--ep",
                            "16", "-e", "sglang", "--dense-per-rank"],
    "memory-dp-ep-vllm": ["memory", "-m", "deepseek-v3", "-t", "8xh200", "--tp", "1", "--dp", "8", "--ep", "8"],
    "memory-dcp": ["memory", "--tp", "16", "--dcp", "2", "--kv-cache-dtype", "fp8"],
    "memory-pp-partition": ["memory", "-m", "deepseek-v3", "--tp", "4", "--pp", "4", "-t", "4x8xa100-ib",
                            "--pp-layer-partition", "16,15,15,15", "-e", "sglang"],
    "memory-does-not-fit": ["memory", "-m", "deepseek-v3", "-t", "8xh100", "--tp", "8"],
    "memory-int8": ["memory", "-m", INT8_BLOCK, "-t", "4x8xa100-ib", "--tp", "16", "-e", "sglang"],
    "memory-mtp-knobs": ["memory", "-m", "deepseek-r1", "-t", "8xh200", "--tp", "8", "--mtp", "--max-num-seqs", "64",
                         "--block-size", "64", "--kv-cache-dtype", "fp8", "--max-model-len", "32768"],
    "memory-v2lite-latent": ["memory", "-m", "deepseek-v2-lite", "-t", "8xh100", "--tp", "4",
                             "--kv-layout", "latent-sharded"],
    "memory-gqa": ["memory", "-m", "llama-3.1-70b", "-t", "8xh100", "--tp", "8", "-e", "sglang"],
    "compare-seed": ["compare", "--layout", "tp=16", "--layout", "tp=8,pp=2"],
    "compare-sglang-dp": ["compare", "-e", "sglang", "-t", "2x8xh200-ib", "--layout", "dp=8,ep=8",
                          "--layout", "dp=16,ep=16", "--dense-per-rank"],
    "compare-bad-layout": ["compare", "-e", "sglang", "-t", "2x8xh200-ib", "--layout", "tp=8,dp=8,ep=8"],
    "compare-mtp": ["compare", "-m", "deepseek-r1", "-t", "8xh200", "--layout", "tp=8", "--mtp",
                    "--kv-cache-dtype", "fp8"],
    "compare-calibrated": ["compare", "--layout", "tp=8,pp=2", "--calibration", CALIBRATION, "--tpot-ms", "40"],
    "compare-knobs": ["compare", "--layout", "tp=16", "--max-num-seqs", "128", "--max-num-batched-tokens", "4096",
                      "--cuda-graph-max-bs", "128", "--gpu-memory-utilization", "0.9"],
    "compare-int8": ["compare", "-m", INT8_CHANNEL, "-t", "4x8xa100-ib", "--layout", "tp=16", "--layout", "tp=32"],
    "show-topology-user": ["show", "-t", USER_TOPOLOGY],
    "show-awq": ["show", "-m", AWQ],
    "show-int8-channel": ["show", "-m", INT8_CHANNEL],
    "show-snapshot": ["show", "-m", V3_SNAPSHOT],
    "memory-v4flash-vllm-h200": ["memory", "-m", "tests/fixtures/hf/DeepSeek-V4-Flash-0731", "-t", "8xh200", "--tp",
                                 "8", "--max-model-len", "131072"],
    "memory-v4pro-sglang-b200": ["memory", "-m", "tests/fixtures/hf/DeepSeek-V4-Pro", "-t", "8xb200", "--tp", "1",
                                 "--dp", "8", "-e", "sglang"],
    "show-v4flash": ["show", "-m", "tests/fixtures/hf/DeepSeek-V4-Flash-0731"],
    "show-topology-gb200-nvl72": ["show", "-t", "gb200-nvl72"],
    "memory-v4flash-mi355x-vllm": ["memory", "-m", "deepseek-v4-flash", "-t", "8xmi355x", "--tp", "8"],
    "memory-r1-mori-sglang": ["memory", "-m", "deepseek-r1", "-t", "8xmi355x", "--tp", "1", "--dp", "8", "--ep", "8",
                              "-e", "sglang"],
    "memory-v4flash-mori-epv2-sglang": ["memory", "-m", "deepseek-v4-flash", "-t", "8xmi355x", "--tp", "1", "--dp",
                                        "8", "--ep", "8", "-e", "sglang"],
}
MODELS = ["deepseek-v3", "deepseek-r1", "deepseek-v2", "deepseek-v2-lite", "kimi-k2", "llama-3.1-70b"]
TOPOLOGIES = ["2x8xh100-ib", "2x8xh100-ib-1nic", "2x8xh20-roce", "2x8xh200-ib", "2x8xl40s-eth", "4x8xa100-ib",
              "4x8xh800-roce", "8xb200", "8xh100", "8xh200"]
COMMANDS |= {f"show-{m}": ["show", m] for m in MODELS}
COMMANDS |= {f"show-topology-{t}": ["show", "-t", t] for t in TOPOLOGIES}

# compare over a recorded plan's candidates: name -> (plan scenario, candidate numbers)
COMPARE_PLANS: dict[str, tuple[str, list[str]]] = {
    "compare-plan-default": ("plan-default", ["1", "2", "3"]),
    "compare-plan-r1-mtp": ("plan-r1-2xh200-mtp", ["1", "2"]),
}
