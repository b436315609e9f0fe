"""The vision encoder a multimodal MLA checkpoint carries beside its text model, counted from its
`vision_config`: what it holds in GPU memory when an engine builds it (the text model's plan does not
otherwise use it).

Kimi-K2.5's MoonViT-3D (vLLM 0.33.0 `model_executor/models/kimi_k25_vit.py`, SGLang 0.5.23
`srt/models/kimi_k25.py`): a patch embedding (conv P x P over 3 channels, with bias), a learned position
table of pos_emb_height x pos_emb_width x D, L transformer blocks of D wide (two LayerNorms, fused QKV
and output projections with biases, an MLP of I with biases), a final LayerNorm, then the patch-merger
projector over kh x kw merged patches (LayerNorm, M x M and T x M linears with biases, M = D kh kw, T the
text model's hidden size). All bf16 in the published checkpoint (vLLM keeps the tower and projector
unquantized under compressed-tensors). The published config names its fields `vt_*`; the transformers
class reads the plain names, so both are read.
"""

from __future__ import annotations

from dataclasses import dataclass

from mla_planner.core.errors import InputError


# Kimi-K2.5's image processor (its media_proc_cfg, as vLLM 0.33.0 transformers_utils/processors/
# kimi_k25_vision_fused.py `navit_resize_image` and SGLang 0.5.23 srt/multimodal/processors/kimi_k25.py
# `navit_resize_config` read it): at most 16,384 patches per image and 512 per side; vLLM profiles the encoder
# with a 3000 x 3000 dummy image (model_executor/models/kimi_k25.py `get_dummy_mm_data`).
IN_PATCH_LIMIT = 16_384
PATCHES_PER_SIDE = 512
DUMMY_IMAGE_PX = 3000


@dataclass(frozen=True)
class VisionTower:
    params: int           # encoder + projector parameters
    layers: int           # encoder blocks (SGLang's VLM memory-fraction rule reads them)
    hidden_size: int
    patch_size: int = 0   # MoonViT's image geometry (0: an encoder whose image serving is not modelled)
    merge: int = 0        # patches merged per side into one token
    heads: int = 0


def images_problem(spec) -> str:
    """Why SPEC cannot be planned served with images ('' when it can): image serving is modelled for MoonViT
    (Kimi-K2.5), whose image geometry the spec keeps; a text-only model has no encoder, and Pixtral's (Mistral
    Large 3) image path is not modelled."""
    if not spec.vision_params:
        return f"{spec.name} has no vision encoder: it serves text only"
    if not spec.vision_patch_size:
        return f"serving {spec.name} with images is not modelled (only Kimi-K2.5's MoonViT encoder is)"
    return ""


def image_tokens(patch: int, merge: int, width_px: int, height_px: int) -> int:
    """Tokens one image of WIDTH x HEIGHT pixels becomes (navit_resize_image, above): scaled down to at most
    IN_PATCH_LIMIT patches and PATCHES_PER_SIDE per side, each side padded to whole merged patches, one token
    per merge x merge patches. The 3000 x 3000 dummy vLLM profiles with is 4,225 tokens for K2.5."""
    scale = min(1.0, (IN_PATCH_LIMIT / ((width_px // patch) * (height_px // patch))) ** 0.5,
                PATCHES_PER_SIDE * patch / width_px, PATCHES_PER_SIDE * patch / height_px)
    side = patch * merge
    w, h = int(width_px * scale), int(height_px * scale)
    return -(-w // side) * -(-h // side)


def vllm_profile_images(patch: int, merge: int, budget_tokens: int) -> int:
    """Dummy images vLLM encodes in its memory profile: as many as the encoder budget (max(max-num-batched-tokens,
    one image's tokens)) holds, at least one (v1 multimodal/encoder_budget.py `max_items_per_batch`)."""
    per_image = image_tokens(patch, merge, DUMMY_IMAGE_PX, DUMMY_IMAGE_PX)
    return max(1, max(budget_tokens, per_image) // per_image)


def vllm_profile_output_bytes(patch: int, merge: int, budget_tokens: int, text_hidden: int) -> int:
    """Bytes of the encoder outputs vLLM's profile run keeps while it runs the text model's dummy forward
    (v1/worker/gpu_model_runner.py `profile_run`: embed_multimodal's results held in encoder_cache, cleared after
    `_dummy_run`), so charged on top of its peak: images x tokens x the text hidden size, bf16 (60.6 MB each)."""
    per_image = image_tokens(patch, merge, DUMMY_IMAGE_PX, DUMMY_IMAGE_PX)
    return vllm_profile_images(patch, merge, budget_tokens) * per_image * text_hidden * 2


def vit_rope_bytes(hidden: int, heads: int) -> int:
    """MoonViT's 2-D RoPE table, registered as a buffer at the first encoder call (the profile's) and kept:
    PATCHES_PER_SIDE^2 positions x head_dim/2 frequencies, complex64 (vLLM kimi_k25_vit.py): 75.5 MB for K2.5."""
    return PATCHES_PER_SIDE * PATCHES_PER_SIDE * (hidden // heads // 2) * 8


def _get(cfg: dict, where: str, *names: str, default=None):
    """The first of NAMES the config gives, as a positive integer (or a list of them, like DEFAULT)."""
    value = next((cfg[n] for n in names if cfg.get(n) is not None), default)
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values) or \
            isinstance(default, (list, tuple)) and len(values) != len(default):
        raise InputError(where, "expected " + (f"{len(default)} positive integers" if isinstance(default, (list, tuple))
                                               else "a positive integer") + f", got {value!r}",
                         f"vision_config.{names[0]}")
    return value


def moonvit(vision: dict, text_hidden: int, where: str = "config.json") -> VisionTower:
    """Kimi-K2.5's MoonViT-3D and patch-merger projector (module docstring): 471,143,920 parameters for the
    published config (D 1152, L 27, I 4304, P 14, a 64 x 64 position table, 2 x 2 merge, T 7168)."""
    D = _get(vision, where, "vt_hidden_size", "hidden_size", default=1152)
    L = _get(vision, where, "vt_num_hidden_layers", "num_hidden_layers", default=27)
    inter = _get(vision, where, "vt_intermediate_size", "intermediate_size", default=4304)
    P = _get(vision, where, "patch_size", default=14)
    ph = _get(vision, where, "init_pos_emb_height", "pos_emb_height", default=64)
    pw = _get(vision, where, "init_pos_emb_width", "pos_emb_width", default=64)
    kh, kw = _get(vision, where, "merge_kernel_size", default=(2, 2))
    T = _get(vision, where, "text_hidden_size", default=text_hidden)
    block = 4 * D + (3 * D * D + 3 * D) + (D * D + D) + (2 * D * inter + inter + D)
    tower = 3 * P * P * D + D + ph * pw * D + L * block + 2 * D
    M = D * kh * kw
    projector = 2 * D + (M * M + M) + (T * M + T)
    heads = _get(vision, where, "vt_num_attention_heads", "num_attention_heads", default=16)
    return VisionTower(tower + projector, L, D, P, kh, heads)
