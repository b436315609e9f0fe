"""What every CLI command shares: the error guard, output helpers, and common option types. No rich here:
the listings (`models`, `topologies`) print plain columns and start without it; reports use cli/console.py."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Annotated, Callable, Optional

import click

from mla_planner.cli.params import Opt
from mla_planner.core.errors import PlanError
from mla_planner.core.files import path_kind
from mla_planner.core.jsonout import dumps
from mla_planner.specs.vision import images_problem

DEFAULT_MODEL = "deepseek-v3"
DEFAULT_TOPOLOGY = "2x8xh100-ib"

ModelOpt = Annotated[str, Opt("--model", "-m", help="Built-in model name (see `mla-plan models`), a YAML "
                                       "spec, a Hugging Face config.json, or a snapshot folder holding one.")]
TopologyOpt = Annotated[str, Opt("--topology", "-t", help="Built-in topology (see `mla-plan topologies`) "
                                          "or a topology YAML file.")]
JsonOpt = Annotated[bool, Opt("--json", help="Print machine-readable JSON instead of tables.")]
PpPartitionOpt = Annotated[Optional[str], Opt("--pp-layer-partition", help=(
    "Decoder layers per pipeline stage, e.g. 32,29 (what VLLM_PP_LAYER_PARTITION / SGLANG_PP_LAYER_PARTITION set; "
    "default: the engine's split by count, the remainder to vLLM's middle stages or SGLang's last); with "
    "several layouts (compare), those with as many stages take it."))]
GraphCapOpt = Annotated[Optional[int], Opt("--cuda-graph-max-bs", help=(
    "Largest decode batch captured as a CUDA graph, per DP rank (vLLM --max-cudagraph-capture-size, in tokens: "
    "1 + the drafted tokens per request with --mtp; SGLang --cuda-graph-max-bs-decode, in requests; default: the engine's, 512 on "
    "vLLM, by GPU memory and TP on SGLang): every captured size costs graph memory."))]
MtpOpt = Annotated[bool, Opt("--mtp", help=(
    "Plan every layout with speculative decoding by the model's own MTP layer (DeepSeek-V3/R1: one drafted "
    "token per step). Without it, a note says what the best candidate would serve with it, and with it, "
    "what it serves without."))]
ImagesOpt = Annotated[bool, Opt("--images", help=(
    "Serve a multimodal checkpoint (Kimi-K2.5) with image inputs; without it, text-only. vLLM then builds the "
    "vision encoder whole on every GPU (--mm-encoder-tp-mode data, its recipe's; no --language-model-only) and its "
    "memory profile holds the encoder's outputs; SGLang builds the encoder either way."))]
IndexerKvOpt = Annotated[str, Opt("--indexer-kv-dtype", help=(
    "DeepSeek-V4 with vLLM: the index-key cache, auto (the engine's default: fp8, 132-byte keys; mxfp4 on MI350X / "
    "MI355X with AITER), fp8 or mxfp4 (68 bytes: --attention-config '{\"indexer_kv_dtype\":\"mxfp4\"}', what `plan` "
    "runs on Blackwell)."))]
MtpDraftOpt = Annotated[Optional[int], Opt("--mtp-draft-tokens", help=(
    "With --mtp: tokens drafted per step (vLLM num_speculative_tokens; SGLang --speculative-num-steps, or "
    "--speculative-dspark-block-size for a DSpark draft): the MTP layer drafts them one after another (the recipes "
    "run 3 for DeepSeek-V3.2 and GLM-5), a DSpark draft (DeepSeek-V4 -0731) all at once. Each is accepted with "
    "--mtp-acceptance given the one before. Default: 1, or the DSpark draft's block size."))]
MtpAcceptanceOpt = Annotated[float, Opt("--mtp-acceptance", help=(
    "Share of MTP-drafted tokens the model accepts on your traffic (the engines log it: vLLM's SpecDecoding "
    "metrics, SGLang's accept length - 1). Default: the DeepSeek-V3 report's 85 % (it found 85-90 %)."))]


def guard(fn: Callable) -> Callable:
    """Turn the library's PlanError family into one line on stderr ("error:" in red on a terminal) and exit
    status 2."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PlanError as exc:
            text = " ".join(str(exc).splitlines())   # one line, whatever the user typed into it
            click.echo(click.style("error:", fg="red") + " " + text, err=True)
            raise SystemExit(2) from None
    return wrapper


def print_json(data: dict) -> None:
    """A command's `--json` output: one object, `schema_version` first (core.jsonout)."""
    sys.stdout.write(dumps(data) + "\n")


def human_bytes(n: float) -> str:
    """Binary units, as the engines print them (vLLM GiB; SGLang's 'GB' is also 2^30)."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def human_count(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f}{unit}"
    return f"{n:,.0f}"


def check_output_file(path: Path, flag: str) -> None:
    """Fail before any work when a file cannot be written there."""
    if path_kind(path) == "dir":
        raise PlanError(f"{flag} {path}: is a folder, expected a file name")
    parent = path_kind(path.parent)
    if parent != "dir":
        raise PlanError(f"{flag} {path}: " + (f"{path.parent} is a file, not a folder" if parent == "file" else
                                              f"folder {path.parent} does not exist"))
    if len(path.name.encode()) > 255:
        raise PlanError(f"{flag}: file name longer than 255 bytes")


def check_context(spec, workload) -> None:
    """A workload longer than the model's context is bad input, whatever the layout (both engines refuse
    a max-model-len above max_position_embeddings; vLLM 0.33.0 vllm/config/model.py, SGLang 0.5.23
    sglang/srt/configs/model_config.py)."""
    if workload.max_context_len > spec.max_position_embeddings:
        raise PlanError(f"--input-len + --output-len = {workload.max_context_len:,} tokens exceeds {spec.name}'s "
                        f"max_position_embeddings {spec.max_position_embeddings:,}")


def check_images(spec, images: bool) -> None:
    """--images needs a multimodal checkpoint whose image serving is modelled (specs/vision.images_problem)."""
    if images and (problem := images_problem(spec)):
        raise PlanError(f"--images: {problem}")


def check_mtp(spec, mtp: bool) -> None:
    """--mtp needs a model with an MTP layer to draft with (both engines load it from the checkpoint)."""
    if mtp and spec.drafter is None:
        raise PlanError(f"--mtp: {spec.name} has no MTP layer to draft with{spec.no_mtp_head_why}")


MAX_DRAFT_TOKENS = 32    # beyond any drafter's depth: at 85 % acceptance the 32nd token is accepted 0.6 % of the time


def check_draft_tokens(tokens: Optional[int], mtp: bool) -> None:
    """--mtp-draft-tokens: a positive count, and only with --mtp (it says how MTP drafts)."""
    if tokens is None:
        return
    if not 1 <= tokens <= MAX_DRAFT_TOKENS:
        raise PlanError(f"--mtp-draft-tokens must be 1 to {MAX_DRAFT_TOKENS}, got {tokens} (the recipes draft 1-3, a "
                        "DSpark block 5; each further token is accepted only after every one before it)")
    if not mtp:
        raise PlanError("--mtp-draft-tokens needs --mtp (it sets how many tokens the MTP layer drafts per step)")


def check_acceptance(rate: float) -> None:
    if not 0 <= rate <= 1:
        raise PlanError(f"--mtp-acceptance must be a share in [0, 1], got {rate:g}")


def lower_case(value):
    """--engine SGLang reads as sglang (engine names are lower case everywhere else)."""
    return value.lower() if isinstance(value, str) else value


def warn_weightless(model_path: str) -> None:
    """On stderr, when the scripts serve a folder here that holds no weights (weightless_folder)."""
    if (bare := weightless_folder(model_path)):
        click.echo(click.style("warning:", fg="yellow") + f" the scripts serve {bare}, which holds a config.json but no "
                   f"weight files here ({', '.join(WEIGHT_FILES)}): pass --model-path with the HF id or the nodes' "
                   "weights folder (`mla-plan emit --plan ... --model-path ...`), unless the nodes have them at that "
                   "path", err=True)


WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")


def weightless_folder(model_path: str) -> str:
    """The plan's served folder when it is here, holds a config.json and no weight files (a config fetched alone
    to plan with), else ''. The plan resolves a folder to an absolute path; a relative one is an HF id, which
    the engine fetches, and a path that is not here may be the nodes' own."""
    folder = Path(model_path) if model_path else None
    if folder is None or not folder.is_absolute() or not (folder / "config.json").is_file():
        return ""
    return "" if any(any(folder.glob(pattern)) for pattern in WEIGHT_FILES) else model_path


def weight_dtypes(spec: dict) -> str:
    """'fp8', or 'bf16, experts int4' when the routed experts are stored differently."""
    experts = spec.get("expert_weight_dtype")
    return spec["weight_dtype"] + (f", experts {experts}" if experts and experts != spec["weight_dtype"] else "")


def columns(header: list[str], rows: list[list[str]], title: str = "") -> str:
    """A listing as plain aligned columns (as `pip list` prints one), easy to read and to grep."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    lines = [title] if title else []
    for row in (header, ["-" * w for w in widths], *rows):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    return "\n".join(lines)
