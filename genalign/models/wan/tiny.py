"""The tiny random Wan 2.1 pipeline (`SPEC.tiny_builder`), the same builder at Wan 2.1 T2V
1.3B's shapes, and Wan 2.2's two forms (T2V-A14B's two experts, TI2V-5B's dense model and its
48-channel VAE), tiny and real, from the architecture files the family ships.

Where it fits: the default suite saves it and loads it back through the real
`WanPolicy.from_pretrained` (`python -m genalign.models.tiny_random wan DIR`); its tokenizer and
VAE config are the ones the tiny families share (`models/tiny_random.py`).
"""

from __future__ import annotations

import json
from pathlib import Path

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


def published(
    file_name: str,
    transformer: dict | None = None,
    umt5: dict | None = None,
    vae: dict | None = None,
    folder: Path = Path(__file__).parent,
) -> dict:
    """A `WAN_SHAPES` entry from the architecture file `file_name` of the family in `folder` (its
    components and its pipeline's config and scheduler), with `transformer` / `umt5` / `vae` keys
    overriding the published values (the tiny forms: the real configs shrunk in width and depth)."""
    body = json.loads((folder / "architectures" / file_name).read_text())
    components = body["components"]
    text = {k: v for k, v in components["text_encoder"]["config"].items() if k in TINY_T5 or k == "feed_forward_proj"}
    return dict(
        transformer={**components["transformer"]["config"], **(transformer or {})},
        experts="transformer_2" in components,  # the second expert: the same architecture, its own weights
        umt5={**text, **(umt5 or {})},
        vae={**components["vae"]["config"], **(vae or {})},
        flow_shift=body["pipeline"]["scheduler"]["config"]["flow_shift"],
        pipeline=body["pipeline"]["config"],
    )


WAN22_A14B = "Wan-AI--Wan2.2-T2V-A14B-Diffusers.json"
WAN22_TI2V_5B = "Wan-AI--Wan2.2-TI2V-5B-Diffusers.json"
TINY_TRANSFORMER = {
    key: WAN_SHAPES["tiny"]["transformer"][key]
    for key in ("num_attention_heads", "attention_head_dim", "text_dim", "ffn_dim", "num_layers", "rope_max_seq_len")
}
"""The tiny width and depth every tiny Wan transformer shares (the Wan 2.1 tiny's)."""
WAN_SHAPES.update(
    {
        "wan2.2-t2v-a14b": published(WAN22_A14B),
        "wan2.2-ti2v-5b": published(WAN22_TI2V_5B),
        # the published configs with the tiny width and depth: two experts and boundary_ratio 0.875;
        # the Wan 2.1 VAE as the tiny Wan 2.1's
        "tiny-wan2.2-t2v-a14b": published(WAN22_A14B, TINY_TRANSFORMER, dict(TINY_T5), dict(TINY_WAN_VAE)),
        # the 48-channel residual VAE with its 2x2 pixel patch, 4 base channels, one block a level,
        # temporal factor 2 (3 frames make 2 latent frames), spatial 16; expand_timesteps
        "tiny-wan2.2-ti2v-5b": published(
            WAN22_TI2V_5B,
            TINY_TRANSFORMER,
            dict(TINY_T5),
            dict(
                base_dim=4,
                decoder_base_dim=8,
                dim_mult=[1, 1, 1, 1],
                num_res_blocks=1,
                temperal_downsample=[False, True, False],
                scale_factor_temporal=2,
            ),
        ),
    }
)
"""Architectures `build_wan_pipeline` knows: the tiny test pipelines (Wan 2.1's; Wan 2.2's two forms)
and the real shapes of Wan 2.1 T2V 1.3B, Wan 2.2 T2V-A14B and TI2V-5B."""


def build_wan_pipeline(
    shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
):
    """A WanPipeline of the named `WAN_SHAPES` with random weights (`wan_components`)."""
    from diffusers import WanPipeline

    spec = shape_spec(WAN_SHAPES, shapes, "Wan")
    return WanPipeline(**wan_components(spec, seed, device, dtype), **spec.get("pipeline", {}))


def wan_components(spec: dict, seed: int, device: str | torch.device, dtype: torch.dtype) -> dict:
    """The components every Wan pipeline holds, for a `WAN_SHAPES`-style entry, with random
    weights (the VAE always float32): a UMT5 encoder over the in-memory character-level T5
    tokenizer (UMT5's tokenizer class is T5's), and the UniPC flow scheduler Wan ships
    (use_flow_sigmas, the form's flow_shift); a two-expert form gets `transformer_2` (same
    architecture, its own seed)."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    tokenizer = tiny_t5_tokenizer()
    with building(device, dtype):
        torch.manual_seed(seed)
        transformer = WanTransformer3DModel(**spec["transformer"])
        transformer_2 = None
        if spec.get("experts"):
            torch.manual_seed(seed + 3)
            transformer_2 = WanTransformer3DModel(**spec["transformer"])
        torch.manual_seed(seed + 1)
        text_encoder = UMT5EncoderModel(
            UMT5Config(
                vocab_size=len(tokenizer), decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **spec["umt5"]
            )
        )
    with building(device, torch.float32):
        torch.manual_seed(seed + 2)
        vae = AutoencoderKLWan.from_config(spec["vae"])  # from_config: a published key this diffusers lacks is dropped
    scheduler = UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=spec["flow_shift"]
    )
    return dict(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=scheduler,
        transformer=transformer,
        transformer_2=transformer_2,
    )


def build_tiny_wan_pipeline(seed: int = 0):
    """The tiny WanPipeline of `WAN_SHAPES` (fp32, CPU); the same seed gives the same weights."""
    return build_wan_pipeline("tiny", seed)


def build_tiny_wan22_a14b_pipeline(seed: int = 0):
    """The tiny two-expert WanPipeline of Wan 2.2 T2V-A14B's published configs (fp32, CPU)."""
    return build_wan_pipeline("tiny-wan2.2-t2v-a14b", seed)


def build_tiny_wan22_ti2v_pipeline(seed: int = 0):
    """The tiny WanPipeline of Wan 2.2 TI2V-5B's published configs (fp32, CPU)."""
    return build_wan_pipeline("tiny-wan2.2-ti2v-5b", seed)
