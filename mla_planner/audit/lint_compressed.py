"""Findings on a hand-written command for a DeepSeek-V4 model, by the engines' own rules for its compressed
attention (docs/dsv4-engines.md, data/backends.yaml `compressed`): the 256-token blocks its indexer demands, the fp8
rows its FlashMLA backend keeps (and its ROCm backends, data/backends.yaml `by_arch`; vLLM's FP4 index keys only on
CDNA4 there). (level, flag, text) tuples, as audit/lint.py makes findings of them; what the
planner does not model (bf16 rows, other pages) is said as such, never passed as fine."""

from __future__ import annotations

from mla_planner.engines.compressed_kv import SGLANG_PAGE_TOKENS, VLLM_BLOCK_TOKENS

SGLANG_PAGE_MULTIPLE = 128      # pool_configurator.py: "page_size must be multiple of 128 for compressed attention"


def compressed_findings(engine: str, values: dict, spec=None, gpu=None) -> list[tuple]:
    raw, block = values.get("kv", "auto"), values.get("block")
    out = _drafter_findings(engine, values, spec) if spec is not None else []
    fp4_keys = "mxfp4" in (values.get("attention_config") or "")
    if engine == "vllm" and gpu is not None and gpu.arch == "cdna3" and fp4_keys:
        out.append(("error", "--attention-config", "indexer_kv_dtype mxfp4 on gfx942: vLLM refuses it (v1/attention/"
                    "backends/mla/indexer.py: 'on ROCm requires CDNA4 (MI350X/MI355X)'); leave the index keys fp8"))
    if engine == "sglang":
        if block and block.isdigit() and int(block) % SGLANG_PAGE_MULTIPLE:
            out.append(("error", "block size", f"--page-size {block}: SGLang's V4 pools take multiples of "
                        f"{SGLANG_PAGE_MULTIPLE} (model_executor/pool_configurator.py asserts it)"))
        elif block and block.isdigit() and int(block) != SGLANG_PAGE_TOKENS:
            out.append(("warn", "block size", f"--page-size {block}: SGLang's V4 default is {SGLANG_PAGE_TOKENS}, the "
                        "only page the planner models"))
        if raw not in ("auto", "fp8_e4m3"):
            out.append(("warn", "--kv-cache-dtype", f"{raw}: SGLang keeps V4's rows in fp8 (auto becomes fp8_e4m3); "
                        "another cache is not modelled here"))
        return out
    if block is None:
        out.append(("warn", "block size", f"no --block-size: vLLM's V4 indexer backend takes only {VLLM_BLOCK_TOKENS}-"
                    f"token blocks (v1/attention/backends/mla/indexer.py) and the recipes pass --block-size "
                    f"{VLLM_BLOCK_TOKENS}; pass it"))
    elif block.isdigit() and int(block) != VLLM_BLOCK_TOKENS:
        out.append(("error", "block size", f"--block-size {block}: vLLM's V4 indexer backend accepts only "
                    f"{VLLM_BLOCK_TOKENS} (v1/attention/backends/mla/indexer.py); it refuses to start"))
    if raw in ("bfloat16", "bf16"):
        plain = (values.get("backend") or "").upper() == "FLASHINFER_MLA_SPARSE_DSV4"
        out.append(("warn", "--kv-cache-dtype", f"{raw}: bf16 rows run only on FLASHINFER_MLA_SPARSE_DSV4, which the "
                    "planner does not model") if plain else
                   ("error", "--kv-cache-dtype", f"{raw}: vLLM's V4 FlashMLA layout takes only fp8 (models/deepseek_v4/"
                    "attention.py: 'only supports fp8 kv-cache'); give fp8 or auto"))
    return out


def _drafter_findings(engine: str, values: dict, spec) -> list[tuple]:
    """Speculative decoding with a drafter the checkpoint does not ship (an MTP method on a DSpark checkpoint, whose
    weights hold no MTP layer: docs/dsv4-engines.md section 2), and SGLang's DSpark under pipeline parallelism
    (arg_groups/speculative_hook.py: "DSpark pipeline parallelism requires PD prefill")."""
    said = (values.get("spec") or "").lower()
    if not said:
        return []
    asked = "dspark" if "dspark" in said else "mtp" if ("mtp" in said or "eagle" in said or "nextn" in said) else ""
    out = []
    if asked and spec.drafter and asked != spec.drafter:
        names = {"dspark": ("a DSpark draft", "method dspark", "DSPARK"), "mtp": ("an MTP layer", "method mtp", "EAGLE")}
        ships, fix = names[spec.drafter][0], names[spec.drafter][1 if engine == "vllm" else 2]
        out.append(("error", "speculative decoding", f"{spec.name} ships {ships}, not {names[asked][0]}: the engine "
                    f"finds no weights for the drafter asked for; ask for {fix}"))
    if engine == "sglang" and asked == "dspark" and (values.get("pp") or "1") != "1":
        out.append(("error", "speculative decoding", f"--pp-size {values['pp']} with DSPARK: SGLang refuses DSpark "
                    "under pipeline parallelism outside PD prefill (arg_groups/speculative_hook.py)"))
    return out

