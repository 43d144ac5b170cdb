"""The tiny random Qwen-Image-Edit-Plus pipelines (`SPEC.tiny_builder`, `SPEC.tiny_variants`).

Where it fits: as Qwen-Image-Edit's (`models/qwen_image_edit/tiny.py`, whose components these
are) in a QwenImageEditPlusPipeline, from the 2509 configs, or from the 2511 ones, whose
transformer sets `zero_cond_t` (`python -m genalign.models.tiny_random qwen_image_edit_plus DIR`).
"""

from __future__ import annotations

from pathlib import Path

from genalign.models.qwen_image_edit.tiny import tiny_edit_components

ARCHITECTURES = Path(__file__).parent / "architectures"


def build_tiny_qwen_image_edit_plus_pipeline(seed: int = 0):
    """A QwenImageEditPlusPipeline with random tiny weights from Qwen/Qwen-Image-Edit-2509's configs."""
    from diffusers import QwenImageEditPlusPipeline

    return QwenImageEditPlusPipeline(**tiny_edit_components(seed, ARCHITECTURES / "Qwen--Qwen-Image-Edit-2509.json"))


def build_tiny_2511_pipeline(seed: int = 0):
    """The same from Qwen/Qwen-Image-Edit-2511's configs: the transformer modulates the source
    tokens at timestep 0 (`zero_cond_t`)."""
    from diffusers import QwenImageEditPlusPipeline

    return QwenImageEditPlusPipeline(**tiny_edit_components(seed, ARCHITECTURES / "Qwen--Qwen-Image-Edit-2511.json"))
