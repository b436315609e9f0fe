"""What each engine's prefill/decode disaggregation takes and allows (SGLang 0.5.23, vLLM 0.33.0), read in the
wheels:

SGLang  `--disaggregation-mode prefill|decode`, `--disaggregation-transfer-backend mooncake` (its default;
        arg_groups/fields/disagg.py), the bootstrap server on the prefill side at `--disaggregation-bootstrap-port`
        (8998), `--disaggregation-ib-device` the HCAs. The decode side learns the prefill layout at the handshake
        (disaggregation/common/conn.py) and refuses a different `--page-size` or `--kv-cache-dtype`; decode PP must
        equal prefill PP or be 1, decode context parallelism 1. KV leaves after each prefill chunk's forward, all
        layers in one batch transfer (disaggregation/prefill.py send_kv_chunk; mooncake/conn.py).
        On AMD GPUs the transfer backend is `mori` (MoRI's IO engine, disaggregation/mori/conn.py; TransferBackend in
        disaggregation/utils.py), the one AMD's disaggregated SGLang recipes run (SemiAnalysisAI/InferenceX's MI300X and
        MI355X disagg configs: MoRI for the EP all-to-all and the KV transfer).
        The router is the separate sglang-router package (`python -m sglang_router.launch_router
        --pd-disaggregation --prefill URL BOOTSTRAP_PORT --decode URL`, sgl-project/sglang docs/advanced_features/
        router.md; the wheel's own test fixture launches it the same way).
vLLM    `--kv-transfer-config '{"kv_connector": "NixlConnector", "kv_role": "kv_producer" | "kv_consumer"}'`
        (config/kv_transfer.py; kv_both is deprecated for NIXL, nixl/connector.py). NIXL's handshake hash refuses
        a different attention backend or cache dtype between the sides (nixl/metadata.py); TP and block size may
        differ (MLA reads its replicated cache from one rank). The decode side pulls the blocks after the whole
        prefill finished (nixl/base_scheduler.py), so TTFT waits for all of it. Each worker's side channel listens
        on VLLM_NIXL_SIDE_CHANNEL_PORT (5600) + its DP index on the host VLLM_NIXL_SIDE_CHANNEL_HOST names.
        The router: vllm-router (github.com/vllm-project/router, `--vllm-pd-disaggregation --prefill URL
        --decode URL`).
Both: the pools here run without pipeline stages or DCP (neither engine pairs them with every layout here).
"""

from __future__ import annotations

from mla_planner.specs.knobs import Knobs
from mla_planner.specs.layout import Layout

MUST_MATCH = {"sglang": ("block_size", "kv_cache_dtype"), "vllm": ("attention_backend", "kv_cache_dtype")}
SENDS_PER_CHUNK = {"sglang": True, "vllm": False}   # KV leaves after each prefill chunk, or after the whole prompt
SGLANG_TRANSFER_BACKEND = {"nvidia": "mooncake", "amd": "mori"}    # by GPU vendor
SGLANG_BOOTSTRAP_PORT = 8998
VLLM_CONNECTOR = "NixlConnector"
VLLM_NIXL_SIDE_CHANNEL_PORT = 5600
ROUTER_PORT = 8090    # the router's listening port: clear of both engines' API ports (8000, 30000)
FLAG_WORDS = {"block_size": "page size", "kv_cache_dtype": "KV cache dtype", "attention_backend": "attention backend"}


def pools_mismatch(engine: str, prefill: Knobs, decode: Knobs) -> str:
    """Why a prefill pool's and a decode pool's knobs cannot hand a cache over ('' when they can)."""
    for name in MUST_MATCH[engine]:
        if getattr(prefill, name) != getattr(decode, name):
            return (f"{engine} needs the same {FLAG_WORDS[name]} on both pools ({getattr(prefill, name)} on prefill, "
                    f"{getattr(decode, name)} on decode)")
    return ""


def pool_shape_problem(layout: Layout, nodes_per_instance: int, gpus_per_node: int) -> str:
    """Why a pool's instance shape cannot be launched as planned ('' when it can): `pool_layout_problem`, and an
    instance that does not fill its whole nodes (each pool node runs one node's share of one instance)."""
    problem = pool_layout_problem(layout)
    if not problem and layout.instance_gpus != nodes_per_instance * gpus_per_node:
        problem = (f"{layout.label} runs on {layout.instance_gpus} GPUs, not the {nodes_per_instance} x "
                   f"{gpus_per_node} of its nodes")
    return problem


def pool_layout_problem(layout: Layout) -> str:
    """Why a layout is not offered as a pool instance ('' when it is)."""
    if layout.pp > 1:
        return "pipeline stages are not planned in a disaggregated pool"
    if layout.dcp > 1:
        return "decode context parallelism is not planned in a disaggregated pool"
    if layout.replicas > 1:
        return "a pool's instances are counted by the pool, not the layout"
    return ""
