"""The tiny random FLUX.1 pipeline (`SPEC.tiny_builder`).

Where it fits: the default suite saves it and loads it back through the real
`FluxPolicy.from_pretrained` (`python -m genalign.models.tiny_random flux DIR`); its CLIP-L,
T5 and VAE are the small configs the tiny families share (`models/tiny_random.py`).
"""

from __future__ import annotations

import torch

from genalign.models.tiny_random import (
    CLIP_HIDDEN,
    T5_HIDDEN,
    TINY_CLIP_TEXT,
    TINY_KL_VAE,
    TINY_T5,
    tiny_clip_tokenizer,
    tiny_t5_tokenizer,
)


def build_tiny_flux_pipeline(seed: int = 0, guidance_embeds: bool = True):
    """A FluxPipeline with random tiny weights (fp32, CPU), as diffusers' FLUX tests build one:
    1 double-stream + 1 single-stream block of 2 heads x 16 dims, RoPE axes (4, 4, 8), latent
    channels 4 (packed 16), VAE factor 8 (a 64x64 image is an 8x8 latent, 16 tokens), CLIP-L
    pooled 16, T5 32; FLUX.1-dev's scheduler config (dynamic shift) and, with
    `guidance_embeds`, dev's guidance embedding (False: schnell's form)."""
    from diffusers import AutoencoderKL, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    clip_tokenizer, t5_tokenizer = tiny_clip_tokenizer(), tiny_t5_tokenizer()
    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=T5_HIDDEN,
        pooled_projection_dim=CLIP_HIDDEN,
        guidance_embeds=guidance_embeds,
        axes_dims_rope=(4, 4, 8),
    )
    torch.manual_seed(seed + 1)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
            layer_norm_eps=1e-5,
            vocab_size=len(clip_tokenizer),
            **TINY_CLIP_TEXT,
        )
    )
    torch.manual_seed(seed + 2)
    text_encoder_2 = T5EncoderModel(
        T5Config(vocab_size=len(t5_tokenizer), decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **TINY_T5)
    )
    torch.manual_seed(seed + 3)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        use_quant_conv=False,
        use_post_quant_conv=False,
        **dict(TINY_KL_VAE, shift_factor=0.1159, scaling_factor=0.3611),
    )
    return FluxPipeline(
        transformer=transformer,
        scheduler=flux_dev_scheduler(),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=clip_tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=t5_tokenizer,
    )


def flux_dev_scheduler():
    """FLUX.1-dev's scheduler config (dynamic shift between 256 and 4096 tokens, 0.5 to 1.15;
    static shift 3): the tiny FLUX.1 pipelines', and FLUX.2's, which diffusers' conversion script
    takes from FLUX.1-dev."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(
        shift=3.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
    )
