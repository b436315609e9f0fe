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


@dataclass(frozen=True)
class VisionTower:
    params: int           # encoder + projector parameters
    layers: int           # encoder blocks (SGLang's VLM memory-fraction rule reads them)
    hidden_size: int


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
    return VisionTower(tower + projector, L, D)
