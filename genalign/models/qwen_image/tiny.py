"""The tiny random Qwen-Image pipeline (`SPEC.tiny_builder`).

Where it fits: the default suite saves it and loads it back through the real
`QwenImagePolicy.from_pretrained` (`python -m genalign.models.tiny_random qwen_image DIR`);
its Qwen2.5-VL text encoder and Qwen2 tokenizer are shared with Cosmos
(`models/tiny_random.py`).
"""

from __future__ import annotations

import torch

from genalign.models.tiny_random import QWEN_TEXT_HIDDEN, tiny_qwen2_5_vl, tiny_qwen2_tokenizer

TINY_TRANSFORMER = dict(
    in_channels=16,
    out_channels=4,
    num_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=QWEN_TEXT_HIDDEN,
    axes_dims_rope=(8, 4, 4),
)
"""The tiny transformer's sizes (the edit families shrink their published configs to these too)."""


def build_tiny_qwen_image_pipeline(seed: int = 0):
    """A QwenImagePipeline with random tiny weights (fp32, CPU), as diffusers' Qwen-Image tests
    build one: 2 blocks of 2 heads x 16 dims, RoPE axes (8, 4, 4), a 2-layer Qwen2.5-VL of
    hidden 16, AutoencoderKLQwenImage with z_dim 4 and VAE factor 8 (non-trivial
    latents_mean/std, so the decode normalisation is exercised), Qwen-Image's scheduler
    config (dynamic shift, max_image_seq_len 8192, shift_terminal 0.02)."""
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
    )

    tokenizer = tiny_qwen2_tokenizer()
    torch.manual_seed(seed)
    transformer = QwenImageTransformer2DModel(patch_size=2, guidance_embeds=False, **TINY_TRANSFORMER)
    torch.manual_seed(seed + 1)
    text_encoder = tiny_qwen2_5_vl(len(tokenizer))
    torch.manual_seed(seed + 2)
    vae = AutoencoderKLQwenImage(
        base_dim=24,
        z_dim=4,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        latents_mean=[-0.7571, -0.7089, -0.9113, 0.1075],
        latents_std=[2.8184, 1.4541, 2.3275, 2.6558],
    )
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=1.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=0.9,
        base_image_seq_len=256,
        max_image_seq_len=8192,
        shift_terminal=0.02,
        time_shift_type="exponential",
    )
    return QwenImagePipeline(
        transformer=transformer, scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer
    )
