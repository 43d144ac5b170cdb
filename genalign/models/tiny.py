"""Tiny SD3 and Wan pipelines built from configs, for tests, benchmarks and offline smoke runs.

Where it fits: nothing can be downloaded here, so the real loading path
(`SD3Policy.from_pretrained`, `StableDiffusion3Pipeline.load_lora_weights`) is exercised on a
pipeline built the way diffusers' own tests build one (1-2 layers, head dim 8), saved with
`save_pretrained` and loaded back. Tokenizers are constructed in memory (byte-level CLIP BPE
with no merges, a character-level T5 unigram), so no hub access is needed at any point.

    python -m genalign.models.tiny sd3 OUT_DIR
    python -m genalign.models.tiny wan OUT_DIR
"""

from __future__ import annotations

import argparse
import string
import sys
from pathlib import Path

import torch

CLIP_HIDDEN = 16
"""Per-CLIP-tower hidden size: the two towers concatenate to 2·16 = 32 = T5_HIDDEN, so
`encode_prompt` pads nothing and crops nothing (real SD3 pads 768 + 1280 up to 4096)."""
CLIP_PROJECTION = 32
"""Pooled size per tower: pooled_projection_dim = 2·32 = 64."""
T5_HIDDEN = 32
T5_CHARS = string.ascii_letters + string.digits + string.punctuation + " "


def _bytes_to_unicode() -> list[str]:
    """GPT-2/CLIP's reversible byte -> printable-unicode table (the BPE alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def tiny_clip_tokenizer():
    """Byte-level CLIP BPE over the 256-symbol alphabet with no merges (one token per byte):
    ids 0/1 are <|startoftext|>/<|endoftext|>, 514 tokens in all, max length 77 as in SD3."""
    from transformers import CLIPTokenizer

    alphabet = _bytes_to_unicode()
    tokens = ["<|startoftext|>", "<|endoftext|>"] + alphabet + [c + "</w>" for c in alphabet]
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)
    return tokenizer


def tiny_t5_tokenizer():
    """A character-level Unigram T5 tokenizer (<pad>=0, </s>=1, <unk>=2), built by the
    `tokenizers` library inside the fast tokenizer; no sentencepiece model file needed."""
    from transformers import T5TokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -1.0)]
    pieces += [(char, -2.0) for char in T5_CHARS if char != " "] + [("▁" + c, -1.5) for c in string.ascii_letters]
    return T5TokenizerFast(vocab=pieces, extra_ids=0, model_max_length=256)


SD3_SHAPES = {
    "tiny": dict(
        transformer=dict(sample_size=32, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8,
                         num_attention_heads=4, joint_attention_dim=T5_HIDDEN, caption_projection_dim=32,
                         pooled_projection_dim=2 * CLIP_PROJECTION, out_channels=4, pos_embed_max_size=64),
        clip_l=dict(hidden_size=CLIP_HIDDEN, intermediate_size=37, num_attention_heads=2, num_hidden_layers=2,
                    hidden_act="gelu", projection_dim=CLIP_PROJECTION),
        clip_g=dict(hidden_size=CLIP_HIDDEN, intermediate_size=37, num_attention_heads=2, num_hidden_layers=2,
                    hidden_act="gelu", projection_dim=CLIP_PROJECTION),
        t5=dict(d_model=T5_HIDDEN, d_kv=8, d_ff=37, num_layers=2, num_heads=4, relative_attention_num_buckets=8),
        vae=dict(sample_size=32, block_out_channels=(4, 8, 8, 8), layers_per_block=1, latent_channels=4,
                 norm_num_groups=1, shift_factor=0.0609, scaling_factor=1.5035),
    ),
    # the published configs of stabilityai/stable-diffusion-3.5-medium (MMDiT-X: 24 blocks of
    # 24 x 64 heads, dual attention in the first 13, RMS qk-norm), CLIP-L, CLIP-G, T5-XXL's
    # encoder and the 16-channel SD3 VAE: the shapes GPU benchmarks run, with random weights
    "sd3.5-medium": dict(
        transformer=dict(sample_size=128, patch_size=2, in_channels=16, num_layers=24, attention_head_dim=64,
                         num_attention_heads=24, joint_attention_dim=4096, caption_projection_dim=1536,
                         pooled_projection_dim=2048, out_channels=16, pos_embed_max_size=384,
                         dual_attention_layers=tuple(range(13)), qk_norm="rms_norm"),
        clip_l=dict(hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=12,
                    hidden_act="quick_gelu", projection_dim=768),
        clip_g=dict(hidden_size=1280, intermediate_size=5120, num_attention_heads=20, num_hidden_layers=32,
                    hidden_act="gelu", projection_dim=1280),
        t5=dict(d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64, relative_attention_num_buckets=32,
                feed_forward_proj="gated-gelu"),
        vae=dict(sample_size=1024, block_out_channels=(128, 256, 512, 512), layers_per_block=2, latent_channels=16,
                 norm_num_groups=32, shift_factor=0.0609, scaling_factor=1.5305),
    ),
}
"""Architectures `build_sd3_pipeline` knows: the tiny test pipeline and SD3.5 Medium's."""


def build_tiny_sd3_pipeline(seed: int = 0):
    """A complete StableDiffusion3Pipeline with random tiny weights (fp32, CPU), as diffusers'
    `get_dummy_components` builds one: 2 joint blocks of 4 heads x 8 dims, latent channels 4,
    VAE factor 8 (a 64x64 image is an 8x8 latent), FlowMatchEulerDiscreteScheduler(shift=3).
    The same seed gives the same weights."""
    return build_sd3_pipeline("tiny", seed)


def build_sd3_pipeline(shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu",
                       dtype: torch.dtype = torch.float32):
    """A StableDiffusion3Pipeline of the named `SD3_SHAPES` with random weights, built directly
    on `device` in `dtype` (the VAE always float32): SD3.5 Medium's 2.2 B-parameter
    transformer and 4.7 B-parameter T5 build in seconds on a GPU. The in-memory tokenizers
    pad and truncate to the real lengths (77 CLIP + max_sequence_length T5 tokens), so the
    transformer sees the real sequence length."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    if shapes not in SD3_SHAPES:
        raise ValueError(f"unknown SD3 shapes {shapes!r}: choose one of {sorted(SD3_SHAPES)}")
    spec = SD3_SHAPES[shapes]
    clip_tokenizer = tiny_clip_tokenizer()
    t5_tokenizer = tiny_t5_tokenizer()
    previous_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            torch.manual_seed(seed)
            transformer = SD3Transformer2DModel(**spec["transformer"])
            towers = []
            for offset, tower in ((1, "clip_l"), (2, "clip_g")):
                torch.manual_seed(seed + offset)
                towers.append(CLIPTextModelWithProjection(CLIPTextConfig(
                    bos_token_id=0, eos_token_id=1, pad_token_id=1, layer_norm_eps=1e-5,
                    vocab_size=len(clip_tokenizer), **spec[tower])))
            torch.manual_seed(seed + 3)
            text_encoder_3 = T5EncoderModel(T5Config(
                vocab_size=len(t5_tokenizer), decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **spec["t5"]))
            torch.set_default_dtype(torch.float32)
            torch.manual_seed(seed + 4)
            vae = AutoencoderKL(
                in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                up_block_types=("UpDecoderBlock2D",) * 4, use_quant_conv=False, use_post_quant_conv=False,
                **spec["vae"])
    finally:
        torch.set_default_dtype(previous_dtype)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return StableDiffusion3Pipeline(
        transformer=transformer, scheduler=scheduler, vae=vae, text_encoder=towers[0], tokenizer=clip_tokenizer,
        text_encoder_2=towers[1], tokenizer_2=tiny_clip_tokenizer(), text_encoder_3=text_encoder_3,
        tokenizer_3=t5_tokenizer)


def save_tiny_sd3(path: str | Path, seed: int = 0) -> Path:
    """Build and `save_pretrained` a tiny SD3 pipeline into `path` (safetensors); returns it."""
    path = Path(path)
    build_tiny_sd3_pipeline(seed).save_pretrained(path)
    return path


WAN_SHAPES = {
    # 2 blocks of 2 heads x 12 dims (diffusers' WanPipeline test), a 16-channel VAE with
    # spatial factor 8 and temporal factor 2 (so 3 frames make 2 latent frames; real Wan: 4)
    "tiny": dict(
        transformer=dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16,
                         out_channels=16, text_dim=T5_HIDDEN, freq_dim=256, ffn_dim=32, num_layers=2,
                         cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=32),
        umt5=dict(d_model=T5_HIDDEN, d_kv=8, d_ff=37, num_layers=2, num_heads=4, relative_attention_num_buckets=8),
        vae=dict(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                 temperal_downsample=[False, True, False], scale_factor_temporal=2, scale_factor_spatial=8),
        flow_shift=3.0,
    ),
    # the published configs of Wan-AI/Wan2.1-T2V-1.3B-Diffusers (30 blocks of 12 x 128 heads,
    # UMT5-XXL's encoder, the Wan VAE): the shapes a GPU memory check runs, random weights
    "wan2.1-t2v-1.3b": dict(
        transformer=dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                         out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30,
                         cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=1024),
        umt5=dict(d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64, relative_attention_num_buckets=32,
                  feed_forward_proj="gated-gelu"),
        vae=dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                 temperal_downsample=[False, True, True], scale_factor_temporal=4, scale_factor_spatial=8),
        flow_shift=3.0,
    ),
}
"""Architectures `build_wan_pipeline` knows: the tiny test pipeline and Wan 2.1 T2V 1.3B's."""


def build_wan_pipeline(shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu",
                       dtype: torch.dtype = torch.float32):
    """A WanPipeline of the named `WAN_SHAPES` with random weights (the VAE always float32),
    a UMT5 encoder over the in-memory character-level T5 tokenizer (UMT5's tokenizer class is
    T5's), and the UniPC flow scheduler Wan ships (use_flow_sigmas, flow_shift=3)."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    if shapes not in WAN_SHAPES:
        raise ValueError(f"unknown Wan shapes {shapes!r}: choose one of {sorted(WAN_SHAPES)}")
    spec = WAN_SHAPES[shapes]
    tokenizer = tiny_t5_tokenizer()
    previous_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            torch.manual_seed(seed)
            transformer = WanTransformer3DModel(**spec["transformer"])
            torch.manual_seed(seed + 1)
            text_encoder = UMT5EncoderModel(UMT5Config(
                vocab_size=len(tokenizer), decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **spec["umt5"]))
            torch.set_default_dtype(torch.float32)
            torch.manual_seed(seed + 2)
            vae = AutoencoderKLWan(**spec["vae"])
    finally:
        torch.set_default_dtype(previous_dtype)
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        flow_shift=spec["flow_shift"])
    return WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler,
                       transformer=transformer)


def save_tiny_wan(path: str | Path, seed: int = 0) -> Path:
    """Build and `save_pretrained` a tiny Wan pipeline into `path` (safetensors); returns it."""
    path = Path(path)
    build_wan_pipeline("tiny", seed).save_pretrained(path)
    return path


TINY_SAVERS = {"sd3": save_tiny_sd3, "wan": save_tiny_wan}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m genalign.models.tiny", description="Write a tiny random pipeline.")
    parser.add_argument("family", choices=sorted(TINY_SAVERS))
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(TINY_SAVERS[args.family](args.out_dir, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
