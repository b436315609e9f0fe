"""vLLM 0.33.0's cross-flag rules: model, KV cache dtype, attention backend, TP/DCP, DP load balancing and
launch options, CUDA graph sizes, scheduler limits, world size and max model length."""

from __future__ import annotations

from typing import Any


def _json_obj(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def vllm_rules(
    fx: dict,
    values: dict,
    given: set[str],
    positionals: list[str],
    major: int | None,
    model_max_len: int | None,
    allow_long_max_model_len: bool,
    sparse_attention: bool | None,
    gpus_per_node: int | None,
    model_backend: str | None = None,
    rocm: bool = False,
    attention_rules: bool = True,
) -> list[str]:
    rules = fx["rules"]
    out: list[str] = []

    def get(key: str, default: Any = None) -> Any:
        return values[key] if key in given else default

    # model
    if not positionals and "--config" not in given:
        out.append(
            "no model given: `vllm serve` needs the model as the first positional argument "
            f"(it would silently fall back to {rules['default_model']['value']!r}) "
            f"[{rules['default_model']['source']}]"
        )

    cc = _json_obj(get("--compilation-config"))
    ac = _json_obj(get("--attention-config"))

    # kv cache dtype
    kv = get("--kv-cache-dtype", "auto")
    kvr = rules["kv_cache_dtype"]
    if kv not in kvr["valid"]:
        out.append(f"--kv-cache-dtype {kv}: Invalid kv_cache_dtype: {kv!r}. Valid values are: {kvr['valid']} [{kvr['source']}]")

    if attention_rules:
        out += _attention_backend(rules, get, ac, model_backend, kv, major, sparse_attention, rocm)

    # block size > 0 is covered by the flag bounds

    # TP / DCP
    tp = get("--tensor-parallel-size", 1)
    dcp = get("--decode-context-parallel-size", 1)
    pcp = get("--prefill-context-parallel-size", 1)
    r = rules["tp_divisible_by_dcp"]
    if isinstance(tp, int) and isinstance(dcp, int) and dcp > 0:
        if pcp == 1 and tp % dcp != 0:
            out.append(f"-tp {tp} -dcp {dcp}: tp_size={tp} must be divisible by dcp_size={dcp}. [{r['source']}]")
        elif pcp != 1 and dcp not in (1, pcp, tp * pcp):
            out.append(
                f"-tp {tp} -pcp {pcp} -dcp {dcp}: when PCP is enabled, DCP must be 1, PCP or TP*PCP [{r['source']}]"
            )

    # headless
    r = rules["headless_api_server_count"]
    asc = get("--api-server-count")
    if get("--headless", False) and asc is not None and asc > 0:
        out.append(f"--api-server-count={asc} cannot be used with --headless [{r['source']}]")

    # DP load-balancing modes
    r = rules["dp_lb_modes"]
    external = bool(get("--data-parallel-external-lb", False)) or get("--data-parallel-rank") is not None
    hybrid_flag = bool(get("--data-parallel-hybrid-lb", False))
    multi = bool(get("--data-parallel-multi-port-external-lb", False))
    if not hybrid_flag and not multi:
        hybrid = get("--data-parallel-start-rank") is not None
    else:
        hybrid = hybrid_flag
    if sum([multi, external, hybrid]) > 1:
        out.append(
            "Cannot use more than one data parallel load balancing mode (multi-port external LB, "
            "external LB / --data-parallel-rank, hybrid LB / --data-parallel-start-rank) "
            f"[{r['source']}]"
        )

    # cudagraph capture sizes
    r = rules["cudagraph_capture_sizes_consistency"]
    sizes = get("--cudagraph-capture-sizes", cc.get("cudagraph_capture_sizes"))
    mx = get("--max-cudagraph-capture-size", cc.get("max_cudagraph_capture_size"))
    graphs_off = bool(get("--enforce-eager", False)) or str(cc.get("cudagraph_mode", "")).upper() == "NONE"
    mnbt = get("--max-num-batched-tokens")
    if sizes and mx is not None and not graphs_off:
        kept = [s for s in sizes if mnbt is None or s <= mnbt]
        valid_max = max(kept) if kept else 0
        if mx != valid_max:
            out.append(
                f"customized max_cudagraph_capture_size(={mx}) should be consistent with the max "
                f"value of cudagraph_capture_sizes(={valid_max}) [{r['source']}]"
            )

    # scheduler
    r = rules["scheduler"]
    mml = get("--max-model-len")
    eff_mml = mml if mml not in (None, -1) else model_max_len
    chunked = get("--enable-chunked-prefill", True)
    if chunked is False and mnbt is not None and eff_mml is not None and mnbt < eff_mml:
        out.append(
            f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({eff_mml}) with chunked "
            f"prefill disabled [{r['source']}]"
        )
    mns = get("--max-num-seqs")
    if mnbt is not None and mns is not None and mnbt < mns:
        out.append(
            f"max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({mns}) [{r['source']}]"
        )
    mnas = get("--max-num-active-seqs")
    if mnas is not None and mns is not None and mnas > mns:
        out.append(f"max_num_active_seqs ({mnas}) cannot be greater than max_num_seqs ({mns}) [{r['source']}]")

    # data-parallel launch options (EngineArgs.create_engine_config)
    r = rules["dp_launch"]
    headless = bool(get("--headless", False))
    nnodes = get("--nnodes", 1)
    node_rank = get("--node-rank", 0)
    dp = get("--data-parallel-size", 1)
    pp = get("--pipeline-parallel-size", 1)
    dpl = get("--data-parallel-size-local")
    dp_rank = get("--data-parallel-rank")
    if headless and hybrid_flag:
        out.append(f"data_parallel_hybrid_lb is not applicable in headless mode [{r['source']}]")
    if nnodes > 1:
        if get("--data-parallel-backend", "mp") != "mp":
            out.append(f"--nnodes {nnodes} requires --data-parallel-backend mp [{r['source']}]")
        world = dp * pp * tp * pcp
        if world % nnodes != 0:
            out.append(f"--nnodes {nnodes} must evenly divide the total world size ({world}) [{r['source']}]")
        if not 0 <= node_rank < nnodes:
            out.append(f"--node-rank must be between 0 and {nnodes - 1}; got {node_rank} [{r['source']}]")
    if external:
        inferable = nnodes > 1 and dp > 1 and nnodes % dp == 0
        if dp_rank is None and not inferable:
            out.append(f"--data-parallel-external-lb requires a data-parallel rank (--data-parallel-rank) [{r['source']}]")
        if dpl not in (1, None):
            out.append(
                f"an external data-parallel rank requires --data-parallel-size-local 1; got {dpl} [{r['source']}]"
            )
    elif dpl is None and hybrid_flag and not (nnodes > 1):
        out.append(f"--data-parallel-hybrid-lb requires --data-parallel-size-local [{r['source']}]")

    r = rules["world_size_vs_gpus"]
    world = tp * pp * pcp
    if (
        gpus_per_node is not None
        and get("--distributed-executor-backend") is None
        and nnodes == 1
        and world * dp > 1
        and world > gpus_per_node
    ):
        out.append(
            f"World size ({world}) is larger than the number of available GPUs ({gpus_per_node}) in this node; "
            f"use --nnodes/--node-rank (mp) or --distributed-executor-backend ray [{r['source']}]"
        )

    # max model len vs model
    r = rules["max_model_len"]
    if mml not in (None, -1) and model_max_len is not None and mml > model_max_len and not allow_long_max_model_len:
        out.append(
            f"User-specified max_model_len ({mml}) is greater than the derived max_model_len "
            f"({model_max_len}); needs VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 [{r['source']}]"
        )
    return out


def _vllm_backend_reasons(
    rules: dict,
    name: str,
    major: int | None,
    block: int | None,
    kv: str,
    sparse_attention: bool | None,
    rocm: bool = False,
) -> list[str]:
    info = rules["attention_backends"]["backends"][name]
    reasons: list[str] = []
    if kv is not None and info.get("kv_cache_dtypes") and kv not in info["kv_cache_dtypes"]:
        reasons.append("kv_cache_dtype not supported")
    bases = info.get("block_size_bases")
    if block is not None and bases and not any(block % b == 0 for b in bases):
        reasons.append("block_size not supported")
    if sparse_attention is not None and bool(info.get("sparse")) != sparse_attention:
        reasons.append("sparse not supported" if sparse_attention else "non-sparse not supported")
    if rocm:     # ROCm selects from its own platform list (vllm/platforms/rocm.py _get_backend_priorities)
        rp = rules["attention_backend_auto_priority_mla_rocm"]
        if name not in rp["aiter"] + rp["no_aiter"] + rp["sparse"]:
            reasons.append("not a ROCm backend (absent from the ROCm platform's MLA backend list)")
    elif major is not None:
        cc = info.get("compute_capability_majors")
        if isinstance(cc, list) and major not in cc:
            reasons.append("compute capability not supported")
        elif isinstance(cc, dict) and major < cc.get("min", 0):
            reasons.append("compute capability not supported")
        elif cc == "any":
            prio = rules["attention_backend_auto_priority_mla"]
            cuda_names = {b for k, v in prio.items() if k != "source" for b in v}
            if name not in cuda_names:
                reasons.append("not a CUDA backend (absent from the CUDA platform's MLA backend list)")
        fam = info.get("device_family_majors")
        if fam and not info.get("sparse") and major not in fam and "compute capability not supported" not in reasons:
            reasons.append(
                info.get("device_family_message")
                or f"device family not supported (only sm{'/sm'.join(str(f) + '0' for f in fam)})"
            )
    return reasons


def _attention_backend(rules: dict, get, ac: dict, model_backend: str | None, kv: str, major: int | None,
                       sparse_attention: bool | None, rocm: bool) -> list[str]:
    """--attention-backend (or --attention-config backend) against the backend table, or the auto order's
    candidates for the block size and KV dtype given."""
    out: list[str] = []
    abr = rules["attention_backends"]
    backend = get("--attention-backend")
    if backend is None:
        backend = ac.get("backend")
    block = get("--block-size")
    if model_backend is not None:
        if backend is not None and str(backend).upper() != model_backend:
            out.append(f"--attention-backend {backend}: this model selects {model_backend} itself")
    elif backend is not None and str(backend).lower() != "auto":
        name = str(backend).upper()
        if name not in abr["names"]:
            out.append(
                f"--attention-backend {backend}: unknown attention backend; valid names: "
                f"{', '.join(abr['names'])} [{abr['source']}]"
            )
        elif name not in abr["backends"]:
            out.append(
                f"--attention-backend {name}: Selected backend is not valid for this configuration. "
                f"Reason: ['MLA not supported'] (not an MLA backend) [{abr['source']}]"
            )
        else:
            reasons = _vllm_backend_reasons(rules, name, major, block, kv, sparse_attention, rocm)
            if reasons:
                out.append(
                    f"--attention-backend {name}: Selected backend is not valid for this configuration. "
                    f"Reason: {reasons} [{abr['backends'][name]['source']}]"
                )
    elif major is not None and (block is not None or kv != "auto"):
        prio = rules["attention_backend_auto_priority_mla_rocm" if rocm else "attention_backend_auto_priority_mla"]
        cands = prio["aiter"] if rocm else prio.get(f"sm{major}x", prio["other"])
        ok = [
            b for b in cands
            if b in abr["backends"]
            and (sparse_attention is None or abr["backends"][b]["sparse"] == sparse_attention)
            and (sparse_attention is not None or not abr["backends"][b]["sparse"])
            and not _vllm_backend_reasons(rules, b, major, block, kv, sparse_attention, rocm)
        ]
        if not ok:
            out.append(
                f"no valid MLA attention backend for sm{major}x with block_size={block}, "
                f"kv_cache_dtype={kv} (auto-selection candidates: {', '.join(cands)}) [{prio['source']}]"
            )
    return out
