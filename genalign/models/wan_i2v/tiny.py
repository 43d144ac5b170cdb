"""The tiny random image-to-video Wan pipelines (`SPEC.tiny_builder` and its variant), and the
real shapes, from the architecture files the family ships.

Where it fits: the default suite saves them and loads them back through the real
`WanI2VPolicy.from_pretrained` (`python -m genalign.models.tiny_random wan_i2v DIR`). They are
the published configs (`architectures/`) with the tiny Wan width and depth of
`models/wan/tiny.py`, whose components builder they share, plus Wan 2.1's CLIP vision tower
shrunk in width and depth (its 224-pixel, 14-pixel-patch geometry and image processor as
published: 257 image tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from genalign.models.tiny_random import TINY_T5, TINY_WAN_VAE, building, shape_spec
from genalign.models.wan.tiny import TINY_TRANSFORMER, WAN_SHAPES, published, wan_components

FOLDER = Path(__file__).parent
WAN21_I2V_480P = "Wan-AI--Wan2.1-I2V-14B-480P-Diffusers.json"
WAN22_I2V_A14B = "Wan-AI--Wan2.2-I2V-A14B-Diffusers.json"
WAN21_FLF2V = "Wan-AI--Wan2.1-FLF2V-14B-720P-Diffusers.json"
TINY_CLIP_VISION = dict(hidden_size=16, intermediate_size=32, num_attention_heads=2, num_hidden_layers=2)
"""CLIP ViT-H/14's vision tower at a tiny width and depth (the transformer's image_dim follows it)."""
TINY_CONDITION_CHANNELS = TINY_WAN_VAE["z_dim"] + TINY_WAN_VAE["scale_factor_temporal"] + TINY_WAN_VAE["z_dim"]
"""The tiny transformer's input channels: latents, the mask (one channel per frame the tiny VAE
folds into a latent frame: 2, real Wan 4) and the first-frame latents."""


def i2v_shapes(file_name: str, tiny: bool) -> dict:
    """A `WAN_SHAPES`-style entry of an image-to-video architecture file, with its image encoder
    and processor (`image`: None for Wan 2.2 I2V-A14B); `tiny` shrinks it."""
    body = json.loads((FOLDER / "architectures" / file_name).read_text())
    encoder = body["components"].get("image_encoder")
    vision = dict(encoder["config"]) if encoder else None
    transformer = None
    if tiny:
        transformer = {**TINY_TRANSFORMER, "in_channels": TINY_CONDITION_CHANNELS}
        if vision is not None:
            vision.update(TINY_CLIP_VISION)
            width = TINY_TRANSFORMER["num_attention_heads"] * TINY_TRANSFORMER["attention_head_dim"]
            transformer.update(image_dim=vision["hidden_size"], added_kv_proj_dim=width)
    shapes = published(
        file_name,
        transformer,
        dict(TINY_T5) if tiny else None,
        dict(TINY_WAN_VAE) if tiny else None,
        folder=FOLDER,
    )
    processor = body["pipeline"].get("image_processor")
    shapes["image"] = (vision, processor["config"]) if vision is not None else None
    return shapes


I2V_SHAPES = {
    "wan2.1-i2v-14b": i2v_shapes(WAN21_I2V_480P, tiny=False),
    "wan2.2-i2v-a14b": i2v_shapes(WAN22_I2V_A14B, tiny=False),
    "tiny-wan2.1-i2v": i2v_shapes(WAN21_I2V_480P, tiny=True),
    "tiny-wan2.2-i2v-a14b": i2v_shapes(WAN22_I2V_A14B, tiny=True),
    # FLF2V: Wan 2.1 I2V 14B with the two frames' CLIP tokens side by side (pos_embed_seq_len 514,
    # the tiny CLIP's 257 tokens twice as the real one's)
    "wan2.1-flf2v-14b": i2v_shapes(WAN21_FLF2V, tiny=False),
    "tiny-wan2.1-flf2v": i2v_shapes(WAN21_FLF2V, tiny=True),
    # TI2V-5B animates an image with the weights it generates text-to-video with: the text-to-video
    # family's entries (its architecture file, models/wan), built as a WanImageToVideoPipeline
    # (expand_timesteps, no image encoder)
    "wan2.2-ti2v-5b": {**WAN_SHAPES["wan2.2-ti2v-5b"], "image": None},
    "tiny-wan2.2-ti2v-5b": {**WAN_SHAPES["tiny-wan2.2-ti2v-5b"], "image": None},
}
"""Architectures `build_wan_i2v_pipeline` knows: the real shapes of Wan 2.1 I2V 14B (480P and
720P share them), Wan 2.1 FLF2V 14B, Wan 2.2 I2V-A14B and TI2V-5B, and their tiny forms."""


def build_wan_i2v_pipeline(
    shapes: str = "tiny-wan2.1-i2v",
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
):
    """A WanImageToVideoPipeline of the named `I2V_SHAPES` with random weights: Wan's components
    (`wan_components`), the CLIP vision tower (its own seed) and image processor where the form
    has one, and the pipeline's config (boundary_ratio) as its file states."""
    from diffusers import WanImageToVideoPipeline
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

    spec = shape_spec(I2V_SHAPES, shapes, "Wan I2V")
    image = {}
    if spec["image"] is not None:
        vision, processor = spec["image"]
        with building(device, dtype):
            torch.manual_seed(seed + 4)
            config = CLIPVisionConfig(**{k: v for k, v in vision.items() if k != "model_type"})
            image = dict(
                image_encoder=CLIPVisionModelWithProjection(config),
                image_processor=CLIPImageProcessor(**processor),
            )
    return WanImageToVideoPipeline(**wan_components(spec, seed, device, dtype), **image, **spec.get("pipeline", {}))


def build_tiny_wan21_i2v_pipeline(seed: int = 0):
    """The tiny WanImageToVideoPipeline of Wan 2.1 I2V's published configs (fp32, CPU)."""
    return build_wan_i2v_pipeline("tiny-wan2.1-i2v", seed)


def build_tiny_wan22_i2v_a14b_pipeline(seed: int = 0):
    """The tiny two-expert WanImageToVideoPipeline of Wan 2.2 I2V-A14B's published configs (fp32, CPU)."""
    return build_wan_i2v_pipeline("tiny-wan2.2-i2v-a14b", seed)


def build_tiny_wan22_ti2v_i2v_pipeline(seed: int = 0):
    """The tiny WanImageToVideoPipeline of Wan 2.2 TI2V-5B's published configs (expand_timesteps, the
    48-channel VAE; fp32, CPU): the same weights as the text-to-video tiny of the same seed."""
    return build_wan_i2v_pipeline("tiny-wan2.2-ti2v-5b", seed)


def build_tiny_wan21_flf2v_pipeline(seed: int = 0):
    """The tiny WanImageToVideoPipeline of Wan 2.1 FLF2V's published configs (first and last frame;
    fp32, CPU)."""
    return build_wan_i2v_pipeline("tiny-wan2.1-flf2v", seed)
