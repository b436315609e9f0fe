"""Model specs from their sources: a built-in name, a YAML spec, a HF config.json or a snapshot folder.

Never touches the network. A HF config is mapped key-for-key onto `ModelSpec` (the spec's fields are
named like config.json keys), keyed by `architectures`, never by model name (aiconfigurator issue 850:
R1 failed when looked up by name although it shares V3's architecture).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mla_planner.core.errors import InputError, PlanError, did_you_mean
from mla_planner.core.files import path_kind, read_mapping, user_path
from mla_planner.core.validation import validate
from mla_planner.specs.builtin import builtin_names, builtin_spec
from mla_planner.specs.model import MAX_LAYERS, ModelSpec
from mla_planner.specs.quantization import quantization_of, v4_expert_fields, weight_fields
from mla_planner.specs.mistral import hf_config_from_params, pixtral
from mla_planner.specs.vision import moonvit

# architecture -> (attention kind, the config.json model_types that go with it; empty: any)
ARCHITECTURES = {
    "DeepseekV2ForCausalLM": ("mla", {"deepseek_v2"}),
    "DeepseekV3ForCausalLM": ("mla", {"deepseek_v3"}),
    "KimiK2ForCausalLM": ("mla", {"kimi_k2", "deepseek_v3"}),
    "KimiK25ForConditionalGeneration": ("mla", {"kimi_k25"}),    # Kimi-K2.5 / K2.6: text model in text_config
    "MistralLarge3ForCausalLM": ("mla", {"deepseek_v3"}),           # from a params.json (specs/mistral.py)
    "DeepseekV32ForCausalLM": ("mla-dsa", {"deepseek_v32"}),   # V3.2, V3.2-Exp, V3.2-Speciale
    "GlmMoeDsaForCausalLM": ("mla-dsa", {"glm_moe_dsa"}),       # GLM-5, GLM-5.1, GLM-5.2
    "DeepseekV4ForCausalLM": ("csa-hca", {"deepseek_v4"}),      # V4-Pro, V4-Flash (preview, -0731, -0813)
    "LlamaForCausalLM": ("gqa", {"llama"}),
    "Qwen2ForCausalLM": ("gqa", {"qwen2"}),
    "MistralForCausalLM": ("gqa", {"mistral"}),
}

# architectures the engines serve that the planner reads but cannot size yet: refused with why, never priced as
# a neighbour (their engine facts: vLLM 0.33.0 `models/deepseek_v41`, `models/kimi_k3`)
NOT_MODELLED = {
    "DeepseekV41ForCausalLM": "DeepSeek-V4.1 shares its KV across layer groups (kv_source_layer_ids), keeps Engram "
                              "tables that may live in host memory, and is an encoder-decoder; none of that is "
                              "modelled yet",
    "KimiK3ForConditionalGeneration": "Kimi-K3 mixes MLA layers with Kimi Delta Attention (linear attention whose "
                                      "per-request recurrent state TP splits); that state is not modelled yet",
}

# what a user types for them (a name or an HF id, case aside) -> the architecture, so the refusal says why
NOT_MODELLED_NAMES = {"deepseek-v4.1": "DeepseekV41ForCausalLM", "kimi-k3": "KimiK3ForConditionalGeneration"}

# multimodal architectures whose text model sits in `text_config` (the model_types it may have)
NESTED_TEXT = {"KimiK25ForConditionalGeneration": {"kimi_k2", "deepseek_v3"}}
# how each multimodal architecture's vision encoder is counted from its `vision_config`
VISION = {"KimiK25ForConditionalGeneration": moonvit, "MistralLarge3ForCausalLM": pixtral}


@dataclass(frozen=True)
class LoadedModel:
    spec: ModelSpec
    model_path: str   # what an engine serves: the HF id (a spec's hf_id, else its name), or the absolute
                      # snapshot folder a config.json was read from ("" for a .json under another name)
    source: str       # "built-in", "spec", "config.json", "params.json"


def load_model(ref: str) -> LoadedModel:
    """Resolve `ref`: built-in name first, then a path (YAML spec, config.json or Mistral's params.json, or a
    folder holding one)."""
    if not ref.strip():
        raise PlanError(f"the model is empty: give a built-in name ({', '.join(sorted(builtin_names()))}) or a path")
    path = user_path(ref)
    kind = path_kind(path)
    if kind != "missing":
        path = path.resolve()   # scripts run on other nodes and in other folders: never a relative path
    if kind == "other":
        raise InputError(ref, "is not a regular file (a FIFO, device or socket)")
    name = (ref.lower() if ref.lower() in builtin_names() else builtin_by_hf_id(ref)) if kind == "missing" else None
    if name:      # a built-in's name, or its Hugging Face id (`deepseek-ai/DeepSeek-V3`) where no such path exists
        spec = builtin_spec(name)
        return LoadedModel(spec, spec.hf_id or spec.name, "built-in")
    if kind == "dir":
        if path.name == "config.json":
            raise InputError(str(path), "is a folder, expected the config.json file (or its snapshot folder)")
        cfg = path / "config.json"
        if not cfg.is_file() and (path / "params.json").is_file():
            return LoadedModel(spec_from_mistral_params(path / "params.json"), str(path), "params.json")
        if not cfg.is_file():
            raise InputError(str(path), "folder holds no config.json file (expected a Hugging Face snapshot)")
        return LoadedModel(spec_from_hf_config(cfg), str(path), "config.json")
    if path.name == "params.json":
        return LoadedModel(spec_from_mistral_params(path), str(path.parent), "params.json")
    if path.suffix == ".json":
        # engines read <folder>/config.json: a file under another name plans, but serves nothing as it stands
        served = str(path.parent) if path.name == "config.json" else ""
        return LoadedModel(spec_from_hf_config(path), served, "config.json")
    if path.suffix in (".yaml", ".yml") or kind == "file":
        spec = validate(ModelSpec, read_mapping(path), str(path))
        return LoadedModel(spec, spec.hf_id or spec.name, "spec")
    family = next((arch for word, arch in NOT_MODELLED_NAMES.items() if word in ref.lower()), None)
    if family:
        raise InputError(ref, f"not modelled: {NOT_MODELLED[family]} ({family})")
    raise InputError(ref, "not a built-in model, nor an existing file or folder" + did_you_mean(ref, builtin_names())
                     + f"; built-ins: {', '.join(builtin_names())}")


def builtin_by_hf_id(ref: str) -> Optional[str]:
    """The built-in whose Hugging Face id REF is (case aside), else None."""
    return next((n for n in builtin_names() if (builtin_spec(n).hf_id or "").lower() == ref.lower()), None)


def spec_from_mistral_params(path: Path) -> ModelSpec:
    """Mistral Large 3's params.json, made the DeepSeek-V3 config the engines make of it (specs/mistral.py)."""
    cfg = hf_config_from_params(read_mapping(path), str(path))
    return spec_from_config(cfg, path, str(path), config_format="mistral")


def spec_from_hf_config(path: Path) -> ModelSpec:
    """Map a Hugging Face config.json onto a ModelSpec (keys shared by name, plus the weight dtype)."""
    return spec_from_config(read_mapping(path), path, str(path))


def spec_from_config(cfg: dict, path: Path, where: str, config_format: str = "hf") -> ModelSpec:
    """The spec of config CFG read from PATH: its architecture and model_type checked, its keys taken by name."""
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise InputError(where, f"expected a list of architecture names like [\"DeepseekV3ForCausalLM\"], got "
                         f"{str(archs)[:80]}", "architectures")
    arch = next((a for a in archs if a in ARCHITECTURES), None)
    refused = next((a for a in archs if a in NOT_MODELLED), None)
    if arch is None and refused:
        raise InputError(where, f"{refused} is not supported yet: {NOT_MODELLED[refused]}", "architectures")
    if arch is None:
        supported = ", ".join(sorted(ARCHITECTURES))
        raise InputError(where, f"unsupported architecture {archs or 'none given'}; supported: {supported}",
                         "architectures")
    kind, model_types = ARCHITECTURES[arch]
    for key, value in (("model_type", cfg.get("model_type")),
                       ("text_config.model_type", (cfg.get("text_config") or {}).get("model_type")
                        if isinstance(cfg.get("text_config"), dict) else None)):
        if value is not None and not isinstance(value, str):
            raise InputError(where, f"expected a name like \"deepseek_v3\", got {str(value)[:60]}", key)
    if cfg.get("model_type") and model_types and cfg["model_type"] not in model_types:
        raise InputError(where, f"model_type {cfg['model_type']!r} does not go with {arch} (expected "
                         f"{' or '.join(sorted(model_types))}): an edited config?", "model_type")
    text, vision = _text_and_vision(cfg, arch, where)
    fields = {k: v for k, v in text.items() if k in ModelSpec.field_names() and k not in ("name", "attention")}
    # a config without model_type is its architecture's (engines key some defaults on it: GLM's KV on Blackwell)
    model_type = cfg.get("model_type") or (next(iter(model_types)) if len(model_types) == 1 else None)
    fields.update(name=_snapshot_name(path), attention=kind, model_type=model_type, config_format=config_format,
                  **vision)
    if arch == "Qwen2ForCausalLM":
        fields["attention_bias"] = True  # Qwen2 always has q/k/v biases
    quant = quantization_of(cfg, path.parent, text)
    # the weight formats walk the layers: counts that are not counts are left to the spec's validation to refuse
    fields.update(weight_fields(quant, where, _count(text, "num_hidden_layers", 1),
                                _count(text, "first_k_dense_replace", 0) if text.get("n_routed_experts") else None))
    if kind == "csa-hca":
        fields.update(v4_expert_fields(text, quant, where))
    if not quant and _channel_int8_index(path.parent):
        fields["weight_dtype"] = "int8"
    return validate(ModelSpec, fields, where)


def _count(cfg: dict, key: str, default: int) -> int:
    """CFG[KEY] where it is a plausible count (a whole number in [0, MAX_LAYERS]), else DEFAULT."""
    value = cfg.get(key)
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_LAYERS
    return value if ok else default


def _text_and_vision(cfg: dict, arch: str, where: str) -> tuple[dict, dict]:
    """(the text model's config, the vision encoder's spec fields): the config itself or, for an architecture
    that nests it, its `text_config`; and for a multimodal architecture (VISION) the encoder its
    `vision_config` describes."""
    text, vision = cfg, cfg.get("vision_config")
    if arch in NESTED_TEXT:
        text, model_types = cfg.get("text_config"), NESTED_TEXT[arch]
        if not isinstance(text, dict):
            raise InputError(where, f"{arch} keeps its text model in text_config; expected a mapping", "text_config")
        if text.get("model_type") and text["model_type"] not in model_types:
            raise InputError(where, f"text_config.model_type {text['model_type']!r} does not go with {arch} "
                             f"(expected {' or '.join(sorted(model_types))})", "text_config.model_type")
    if arch not in VISION or not isinstance(vision, dict):
        return text, {}
    tower = VISION[arch](vision, text.get("hidden_size"), where)
    geometry = {"vision_patch_size": tower.patch_size, "vision_merge": tower.merge, "vision_heads": tower.heads} \
        if tower.patch_size else {}
    return text, {"vision_params": tower.params, "vision_layers": tower.layers,
                  "vision_hidden_size": tower.hidden_size, **geometry}


def _channel_int8_index(folder: Path) -> bool:
    """A snapshot without quantization_config whose weight index lists per-channel `weight_scale` tensors:
    meituan's DeepSeek-R1-Channel-INT8 ships no quantization_config ("We only support the inference of this
    model in SGLang", its Hugging Face discussion #4) and is served with --quantization w8a8_int8, which reads
    `<linear>.weight_scale` beside each int8 weight (SGLang w8a8_int8.py); FP8 releases name theirs
    `weight_scale_inv` and carry a quantization_config."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file() or (folder / "hf_quant_config.json").is_file():   # ModelOpt (FP8/FP4) keeps its own
        return False
    names = read_mapping(index).get("weight_map")
    if not isinstance(names, dict):      # read to tell INT8 from BF16: a broken one would price it at 2x
        raise InputError(str(index), "expected a safetensors index, a JSON object with a weight_map of tensor names",
                         "weight_map")
    # ModelOpt's NVFP4 names weight_scale too, beside a second-level weight_scale_2 and static input_scale
    return any(n.endswith("_proj.weight_scale") for n in names) and \
        not any(n.endswith(("weight_scale_2", "input_scale")) for n in names)


def _snapshot_name(config: Path) -> str:
    """The model's name from where its config.json lies: the folder name, or for a Hugging Face cache
    snapshot (models--ORG--NAME/snapshots/HASH/config.json) ORG/NAME rather than the commit hash."""
    if config.name not in ("config.json", "params.json"):
        return config.stem
    folder = config.parent
    repo = folder.parent.parent.name if folder.parent.name == "snapshots" else ""
    if repo.startswith("models--"):
        return repo[len("models--"):].replace("--", "/")
    return folder.name or config.stem
