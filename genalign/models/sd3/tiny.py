"""The tiny random Stable Diffusion 3 pipeline (`SPEC.tiny_builder`), and the same builder at
other shapes.

Where it fits: the default suite saves it with `save_pretrained` and loads it back through the
real `SD3Policy.from_pretrained` (`python -m genalign.models.tiny_random sd3 DIR`); its
tokenizers and small encoder configs are the ones the tiny families share
(`models/tiny_random.py`).
"""

from __future__ import annotations

import torch

from genalign.models.tiny_random import (
    CLIP_PROJECTION,
    T5_HIDDEN,
    TINY_CLIP_TEXT,
    TINY_KL_VAE,
    TINY_T5,
    building,
    shape_spec,
    tiny_clip_tokenizer,
    tiny_t5_tokenizer,
)

SD3_SHAPES = {
    "tiny": dict(
        transformer=dict(
            sample_size=32,
            patch_size=2,
            in_channels=4,
            num_layers=2,
            attention_head_dim=8,
            num_attention_heads=4,
            joint_attention_dim=T5_HIDDEN,
            caption_projection_dim=32,
            pooled_projection_dim=2 * CLIP_PROJECTION,
            out_channels=4,
            pos_embed_max_size=64,
        ),
        clip_l=dict(TINY_CLIP_TEXT),
        clip_g=dict(TINY_CLIP_TEXT),
        t5=dict(TINY_T5),
        vae=dict(TINY_KL_VAE, shift_factor=0.0609, scaling_factor=1.5035),
    ),
}
"""Architectures `build_sd3_pipeline` knows. A real model's shapes come from its shipped
architecture file instead (`models/real_shapes.py`, what the GPU benchmarks build)."""


def build_tiny_sd3_pipeline(seed: int = 0):
    """A complete StableDiffusion3Pipeline with random tiny weights (fp32, CPU), as diffusers'
    `get_dummy_components` builds one: 2 joint blocks of 4 heads x 8 dims, latent channels 4,
    VAE factor 8 (a 64x64 image is an 8x8 latent), FlowMatchEulerDiscreteScheduler(shift=3).
    The same seed gives the same weights."""
    return build_sd3_pipeline("tiny", seed)


def build_sd3_pipeline(
    shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
):
    """A StableDiffusion3Pipeline of the named `SD3_SHAPES` with random weights, built directly
    on `device` in `dtype` (the VAE always float32). The in-memory tokenizers pad and truncate
    to the real lengths (77 CLIP + max_sequence_length T5 tokens)."""
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    spec = shape_spec(SD3_SHAPES, shapes, "SD3")
    clip_tokenizer = tiny_clip_tokenizer()
    t5_tokenizer = tiny_t5_tokenizer()
    with building(device, dtype):
        torch.manual_seed(seed)
        transformer = SD3Transformer2DModel(**spec["transformer"])
        towers = []
        for offset, tower in ((1, "clip_l"), (2, "clip_g")):
            torch.manual_seed(seed + offset)
            towers.append(
                CLIPTextModelWithProjection(
                    CLIPTextConfig(
                        bos_token_id=0,
                        eos_token_id=1,
                        pad_token_id=1,
                        layer_norm_eps=1e-5,
                        vocab_size=len(clip_tokenizer),
                        **spec[tower],
                    )
                )
            )
        torch.manual_seed(seed + 3)
        text_encoder_3 = T5EncoderModel(
            T5Config(
                vocab_size=len(t5_tokenizer), decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **spec["t5"]
            )
        )
    with building(device, torch.float32):
        torch.manual_seed(seed + 4)
        vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4,
            use_quant_conv=False,
            use_post_quant_conv=False,
            **spec["vae"],
        )
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=scheduler,
        vae=vae,
        text_encoder=towers[0],
        tokenizer=clip_tokenizer,
        text_encoder_2=towers[1],
        tokenizer_2=tiny_clip_tokenizer(),
        text_encoder_3=text_encoder_3,
        tokenizer_3=t5_tokenizer,
    )
