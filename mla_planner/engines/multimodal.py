"""What each engine does with a multimodal checkpoint (Kimi-K2.5): SGLang's VLM factor on its default fraction,
and, served with image inputs, in words for the plan's reasons (the bytes: memory/accounting.py, specs/vision.py).

vLLM 0.33.0: without --language-model-only it builds the vision encoder; the Kimi-K2.5 recipe runs it with
--mm-encoder-tp-mode data (the whole encoder on every GPU; docs.vllm.ai/projects/recipes, moonshotai/Kimi-K2.5).
Its memory profile (v1/worker/gpu_model_runner.py `profile_run`) encodes dummy images and holds their outputs
through the text model's dummy forward; the encoder's own activation peak is a torch measurement, estimated
below the text model's at the default budget (0.4-0.65 GB a 3000-px image against ~2 GB), so not priced apart;
images larger than the profile's, or more small ones in one step, run in the margin the fraction leaves.

SGLang 0.5.23 builds the encoder whether or not images come (models/kimi_k25.py) and profiles none of its
memory: it lowers its default --mem-fraction-static by its VLM factor (arg_groups/memory_hook.py;
`sglang_vlm_factor`) and runs the ViT for every image a prefill chunk touches, and its
100 MB embedding cache (SGLANG_VLM_CACHE_SIZE_MB), in the headroom that leaves - and not at all when the user
pins --mem-fraction-static (the factor applies only to its own default)."""

from __future__ import annotations

from mla_planner.specs.model import ModelSpec
from mla_planner.specs.vision import DUMMY_IMAGE_PX, image_tokens, vllm_profile_images, vllm_profile_output_bytes


def images_reason(engine: str, spec: ModelSpec, budget_tokens: int) -> str:
    """One line: what serving images costs this candidate, and what is an estimate."""
    patch, merge = spec.vision_patch_size, spec.vision_merge
    if engine == "vllm":
        n = vllm_profile_images(patch, merge, budget_tokens)
        held = vllm_profile_output_bytes(patch, merge, budget_tokens, spec.hidden_size) / 2**20
        return (f"the vision encoder whole on every GPU (--mm-encoder-tp-mode data, the recipe's), its "
                f"RoPE table, and the {n} dummy {DUMMY_IMAGE_PX}-px image(s) of "
                f"{image_tokens(patch, merge, DUMMY_IMAGE_PX, DUMMY_IMAGE_PX):,} tokens vLLM's profile holds "
                f"({held:,.0f} MiB) out of the KV budget; larger or more images in one step run in the margin")
    return ("SGLang builds the encoder either way and sizes none of its memory; image prefill "
            "(the ViT over every image a chunk touches) and its 100 MB embedding cache run in the headroom its "
            "VLM factor leaves in its own default fraction - an estimate of 2-4 GB a 16k-token chunk of images, "
            "not priced")


def sglang_vlm_factor(spec: ModelSpec) -> float:
    """What SGLang 0.5.23 multiplies its computed --mem-fraction-static by for a multimodal model served with its
    vision encoder (arg_groups/memory_hook.py `adjust_mem_fraction_for_vlm`): 0.95 x (1 - 0.1 x (L x D^2 /
    (24 x 1024^2) - 1)), the second factor kept in [0.8, 1.05], for an encoder of L blocks D wide (a ViT-L/14
    is the baseline): 0.910 for Kimi-K2.5's 27 x 1152. 1 for a text-only model."""
    if not spec.vision_params or not spec.vision_layers or not spec.vision_hidden_size:
        return 1.0
    ratio = spec.vision_layers * spec.vision_hidden_size ** 2 / (24 * 1024 ** 2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
