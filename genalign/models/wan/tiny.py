"""The tiny random Wan 2.1 pipeline (`SPEC.tiny_builder`), and the same builder at Wan 2.1 T2V
1.3B's shapes.

Where it fits: the default suite saves it and loads it back through the real
`WanPolicy.from_pretrained` (`python -m genalign.models.tiny_random wan DIR`); its tokenizer and
VAE config are the ones the tiny families share (`models/tiny_random.py`).
"""

from __future__ import annotations

import torch

from genalign.models.tiny_random import T5_HIDDEN, TINY_T5, TINY_WAN_VAE, building, shape_spec, tiny_t5_tokenizer

WAN_SHAPES = {
    # 2 blocks of 2 heads x 12 dims (diffusers' WanPipeline test), a 16-channel VAE with
    # spatial factor 8 and temporal factor 2 (so 3 frames make 2 latent frames; real Wan: 4)
    "tiny": dict(
        transformer=dict(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=16,
            out_channels=16,
            text_dim=T5_HIDDEN,
            freq_dim=256,
            ffn_dim=32,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=32,
        ),
        umt5=dict(TINY_T5),
        vae=dict(TINY_WAN_VAE),
        flow_shift=3.0,
    ),
    # the published configs of Wan-AI/Wan2.1-T2V-1.3B-Diffusers (30 blocks of 12 x 128 heads,
    # UMT5-XXL's encoder, the Wan VAE): the shapes a GPU memory check runs, random weights
    "wan2.1-t2v-1.3b": dict(
        transformer=dict(
            patch_size=(1, 2, 2),
            num_attention_heads=12,
            attention_head_dim=128,
            in_channels=16,
            out_channels=16,
            text_dim=4096,
            freq_dim=256,
            ffn_dim=8960,
            num_layers=30,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=1024,
        ),
        umt5=dict(
            d_model=4096,
            d_kv=64,
            d_ff=10240,
            num_layers=24,
            num_heads=64,
            relative_attention_num_buckets=32,
            feed_forward_proj="gated-gelu",
        ),
        vae=dict(
            base_dim=96,
            z_dim=16,
            dim_mult=[1, 2, 4, 4],
            num_res_blocks=2,
            temperal_downsample=[False, True, True],
            scale_factor_temporal=4,
            scale_factor_spatial=8,
        ),
        flow_shift=3.0,
    ),
}
"""Architectures `build_wan_pipeline` knows: the tiny test pipeline and Wan 2.1 T2V 1.3B's."""


def build_wan_pipeline(
    shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
):
    """A WanPipeline of the named `WAN_SHAPES` with random weights (the VAE always float32),
    a UMT5 encoder over the in-memory character-level T5 tokenizer (UMT5's tokenizer class is
    T5's), and the UniPC flow scheduler Wan ships (use_flow_sigmas, flow_shift=3)."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    spec = shape_spec(WAN_SHAPES, shapes, "Wan")
    tokenizer = tiny_t5_tokenizer()
    with building(device, dtype):
        torch.manual_seed(seed)
        transformer = WanTransformer3DModel(**spec["transformer"])
        torch.manual_seed(seed + 1)
        text_encoder = UMT5EncoderModel(
            UMT5Config(
                vocab_size=len(tokenizer), decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **spec["umt5"]
            )
        )
    with building(device, torch.float32):
        torch.manual_seed(seed + 2)
        vae = AutoencoderKLWan(**spec["vae"])
    scheduler = UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=spec["flow_shift"]
    )
    return WanPipeline(
        tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler, transformer=transformer
    )


def build_tiny_wan_pipeline(seed: int = 0):
    """The tiny WanPipeline of `WAN_SHAPES` (fp32, CPU); the same seed gives the same weights."""
    return build_wan_pipeline("tiny", seed)
