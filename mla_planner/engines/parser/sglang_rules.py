"""SGLang 0.5.23's cross-flag rules: deprecated backend aliases, the MLA backends' GPU, KV dtype and page
size limits, and attention data/context parallelism."""

from __future__ import annotations

from typing import Any


def sglang_rules(fx: dict, values: dict, given: set[str], major: int | None, include_overrides: bool,
                  rocm: bool = False, attention_rules: bool = True) -> list[str]:
    rules = fx["rules"]
    out: list[str] = _attention_backends(rules, values, given, major, include_overrides, rocm) \
        if attention_rules else []
    return out + _parallel(rules, values, given)


def _attention_backends(rules: dict, values: dict, given: set[str], major: int | None, include_overrides: bool,
                        rocm: bool) -> list[str]:
    """The attention backend flags against the backend groups, aliases and MLA backend rules, with the page
    sizes SGLang silently replaces ([override])."""
    out: list[str] = []
    if rocm:     # the choices' "NVIDIA specific" group does not run on a HIP build
        choices = rules["attention_backend_choices"]
        for flag in ("--attention-backend", "--decode-attention-backend", "--prefill-attention-backend"):
            if flag in given and values[flag] in choices["by_platform"]["nvidia"]:
                out.append(f"{flag} {values[flag]}: an NVIDIA-specific backend on a ROCm GPU [{choices['source']}]")

    def get(key: str, default: Any = None) -> Any:
        return values[key] if key in given else default

    attn = get("--attention-backend")
    dec = get("--decode-attention-backend")
    pre = get("--prefill-attention-backend")
    kv = get("--kv-cache-dtype", "auto")
    page = get("--page-size")

    # deprecated aliases
    ar = rules["attention_backend_aliases"]
    aliases = ar["aliases"]
    if "tokenspeed_mla" in (attn, dec) and kv != "fp8_e4m3":
        if "--kv-cache-dtype" in given and include_overrides:
            out.append(
                f"[override] tokenspeed_mla required FP8 KV; --kv-cache-dtype {kv} would be replaced by fp8_e4m3 [{ar['source']}]"
            )
        kv = ar["tokenspeed_mla_forces_kv_cache_dtype"]
    pre_was_alias = pre in aliases
    attn, dec, pre = (aliases.get(x, x) for x in (attn, dec, pre))
    if pre_was_alias and pre == "cutedsl_mla":
        pre = "trtllm_mla"  # cutedsl_mla is decode-only

    mb = rules["mla_backends"]

    def uses(backend: str) -> bool:
        flags = mb[backend]["applies_to"]
        vals = {"--attention-backend": attn, "--decode-attention-backend": dec, "--prefill-attention-backend": pre}
        return any(vals[f] == backend for f in flags)

    # trtllm_mla and cutedsl_mla: their GPUs, KV dtypes and the page sizes SGLang replaces
    if uses("cutedsl_mla") and pre == "cutedsl_mla":
        out.append("--prefill-attention-backend cutedsl_mla: CuteDSL MLA only supports decoding for now "
                   f"[{mb['cutedsl_mla']['source']}]")
    for name, label in (("trtllm_mla", "TensorRT-LLM MLA"), ("cutedsl_mla", "CuteDSL MLA")):
        r = mb[name]
        if not uses(name):
            continue
        if major is not None and major not in r["compute_capability_majors"]:
            out.append(f"{name} on sm{major}x: {r['message']} [{r['source']}]")
        if kv not in r["kv_cache_dtypes"]:
            out.append(f"{name} with --kv-cache-dtype {kv}: {label} backend only supports "
                       f"kv-cache-dtype of {', '.join(r['kv_cache_dtypes'])} [{r['source']}]")
        if include_overrides and page is not None and page not in r["page_sizes"]:
            out.append(f"[override] {name} supports --page-size {r['page_sizes']}; {page} would be changed "
                       f"to {r['page_size_otherwise']} [{r['source']}]")
    # flashmla
    r = mb["flashmla"]
    if uses("flashmla") and include_overrides and page is not None and page not in r["page_sizes"]:
        out.append(f"[override] flashmla only supports --page-size 64; {page} would be changed to 64 [{r['source']}]")
    # fa3 with an MLA model: SM90 only
    r = mb["fa3"]
    eff = {dec or attn, pre or attn}
    if "fa3" in eff and major is not None and major not in r["compute_capability_majors"]:
        out.append(f"fa3 on sm{major}x: {r['message']} [{r['source']}]")
    return out


def _parallel(rules: dict, values: dict, given: set[str]) -> list[str]:
    """--tp-size, --dp-size, --attn-dp-size and --attn-cp-size as parallel_hook.py checks them."""
    out: list[str] = []

    def get(key: str, default: Any = None) -> Any:
        return values[key] if key in given else default

    r = rules["parallel"]
    tp = get("--tp-size", 1)
    dp = get("--dp-size", 1)
    attn_dp = get("--attn-dp-size", 1)
    attn_cp = get("--attn-cp-size", 1)
    if get("--enable-dp-attention", False) and attn_dp == 1:
        attn_dp, dp = dp, 1
    if attn_dp < 1:
        out.append(f"--attn-dp-size must be positive (got {attn_dp}) [{r['source']}]")
    elif attn_dp > 1 and dp > 1:
        out.append(
            f"--dp-size {dp} with --attn-dp-size {attn_dp}: data-parallel replicas combined with "
            f"attention data parallelism are not supported [{r['source']}]"
        )
    elif attn_dp > 1 and tp % attn_dp != 0:
        out.append(f"tp_size {tp} must be divisible by attn_dp_size {attn_dp} (assert tp_size % attn_dp_size == 0) [{r['source']}]")
    if attn_cp > 1:
        if tp % attn_cp != 0:
            out.append(f"tp_size must be divisible by attn_cp_size ({tp} % {attn_cp}) [{r['source']}]")
        elif tp % (max(attn_dp, 1) * attn_cp) != 0:
            out.append(f"tp_size must be divisible by attn_dp_size * attn_cp_size [{r['source']}]")
    return out
