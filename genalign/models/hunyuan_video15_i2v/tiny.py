"""The tiny random HunyuanVideo 1.5 image-to-video pipeline (`SPEC.tiny_builder`) and the real
480p I2V shapes, from the architecture file the family ships.

Where it fits: the default suite saves it and loads it back through the real
`HunyuanVideo15I2VPolicy.from_pretrained` (`python -m genalign.models.tiny_random
hunyuan_video15_i2v DIR`). It is the text-to-video family's tiny pipeline (`models/hunyuan_video15/
tiny.py`: the same components, widths and depths, whose builder it shares) over the I2V configs,
plus the SigLIP vision tower shrunk in width and depth (its 384-pixel, 14-pixel-patch geometry and
its image processor as published: 729 image tokens, the count the pipeline fixes), and the
transformer's `target_size` (the pixel side whose area the pipeline's size buckets share) at 32,
so that a 32x32 first frame is a bucket of its own, as 480x848 is of the real 640.
tests/unit/models/test_hunyuan_video15_i2v_tiny.py checks every other key is the published value.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from genalign.models.hunyuan_video15.tiny import hunyuan_video15_components, shapes_of
from genalign.models.tiny_random import building, shape_spec

ARCHITECTURE = "hunyuanvideo-community--HunyuanVideo-1.5-Diffusers-480p_i2v.json"
TINY_IMAGE_ENCODER = dict(hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2)
"""SigLIP so400m's vision tower (27 layers of 1152, MLP 4304, 16 heads) at 2 layers of 8 (the tiny
transformer's image_embed_dim), MLP 16, 2 heads."""
TINY_TARGET_SIZE = 32
"""The tiny transformer's target_size (real 640): a resolution, not a width; the tests' 32x32 runs."""


def published() -> dict:
    """The family's architecture file: {"components": ..., "pipeline": ..., ...}."""
    return json.loads((Path(__file__).parent / "architectures" / ARCHITECTURE).read_text())


def _shapes(tiny: bool) -> dict:
    body = published()
    shapes = shapes_of(body, tiny)
    shapes["feature_extractor"] = body["pipeline"]["feature_extractor"]["config"]
    if tiny:
        shapes["image_encoder"].update(TINY_IMAGE_ENCODER)
        shapes["transformer"]["target_size"] = TINY_TARGET_SIZE
    return shapes


HUNYUAN_VIDEO15_I2V_SHAPES = {"tiny": _shapes(True), "hunyuan-video-1.5-480p-i2v": _shapes(False)}
"""Architectures `build_hunyuan_video15_i2v_pipeline` knows: the tiny test pipeline and the real
480p I2V shapes, both from the shipped architecture file."""


def build_hunyuan_video15_i2v_pipeline(
    shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
):
    """A HunyuanVideo15ImageToVideoPipeline of the named `HUNYUAN_VIDEO15_I2V_SHAPES` with random
    weights: the text-to-video components (`hunyuan_video15_components`), the SigLIP vision tower
    (its own seed) and its image processor as published."""
    from diffusers import HunyuanVideo15ImageToVideoPipeline
    from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

    spec = shape_spec(HUNYUAN_VIDEO15_I2V_SHAPES, shapes, "HunyuanVideo 1.5 I2V")
    components = hunyuan_video15_components(spec, shapes == "tiny", seed, device, dtype)
    with building(device, dtype):
        torch.manual_seed(seed + 4)
        vision = {k: v for k, v in spec["image_encoder"].items() if k != "model_type"}
        image_encoder = SiglipVisionModel(SiglipVisionConfig(**vision))
    return HunyuanVideo15ImageToVideoPipeline(
        **components, image_encoder=image_encoder, feature_extractor=SiglipImageProcessor(**spec["feature_extractor"])
    )


def build_tiny_hunyuan_video15_i2v_pipeline(seed: int = 0):
    """The tiny HunyuanVideo15ImageToVideoPipeline (fp32, CPU); the same seed gives the same weights."""
    return build_hunyuan_video15_i2v_pipeline("tiny", seed)
