"""Tiny SD3 pipelines built from configs, for tests, benchmarks and offline smoke runs.

Where it fits: nothing can be downloaded here, so the real loading path
(`SD3Policy.from_pretrained`, `StableDiffusion3Pipeline.load_lora_weights`) is exercised on a
pipeline built the way diffusers' own tests build one (1-2 layers, head dim 8), saved with
`save_pretrained` and loaded back. Tokenizers are constructed in memory (byte-level CLIP BPE
with no merges, a character-level T5 unigram), so no hub access is needed at any point.

    python -m genalign.models.tiny sd3 OUT_DIR
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


def build_tiny_sd3_pipeline(seed: int = 0):
    """A complete StableDiffusion3Pipeline with random tiny weights (fp32, CPU), as diffusers'
    `get_dummy_components` builds one: 2 joint blocks of 4 heads x 8 dims, latent channels 4,
    VAE factor 8 (a 64x64 image is an 8x8 latent), FlowMatchEulerDiscreteScheduler(shift=3).
    The same seed gives the same weights."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    clip_tokenizer = tiny_clip_tokenizer()
    t5_tokenizer = tiny_t5_tokenizer()
    torch.manual_seed(seed)
    transformer = SD3Transformer2DModel(
        sample_size=32, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=4,
        joint_attention_dim=T5_HIDDEN, caption_projection_dim=32, pooled_projection_dim=2 * CLIP_PROJECTION,
        out_channels=4, pos_embed_max_size=64)
    clip_config = CLIPTextConfig(
        bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=CLIP_HIDDEN, intermediate_size=37,
        layer_norm_eps=1e-5, num_attention_heads=2, num_hidden_layers=2, vocab_size=len(clip_tokenizer),
        hidden_act="gelu", projection_dim=CLIP_PROJECTION)
    torch.manual_seed(seed + 1)
    text_encoder = CLIPTextModelWithProjection(clip_config)
    torch.manual_seed(seed + 2)
    text_encoder_2 = CLIPTextModelWithProjection(clip_config)
    torch.manual_seed(seed + 3)
    text_encoder_3 = T5EncoderModel(T5Config(
        vocab_size=len(t5_tokenizer), d_model=T5_HIDDEN, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))
    torch.manual_seed(seed + 4)
    vae = AutoencoderKL(
        sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4, 8, 8, 8),
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        layers_per_block=1, latent_channels=4, norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False,
        shift_factor=0.0609, scaling_factor=1.5035)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return StableDiffusion3Pipeline(
        transformer=transformer, scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=clip_tokenizer,
        text_encoder_2=text_encoder_2, tokenizer_2=tiny_clip_tokenizer(), text_encoder_3=text_encoder_3,
        tokenizer_3=t5_tokenizer)


def save_tiny_sd3(path: str | Path, seed: int = 0) -> Path:
    """Build and `save_pretrained` a tiny SD3 pipeline into `path` (safetensors); returns it."""
    path = Path(path)
    build_tiny_sd3_pipeline(seed).save_pretrained(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m genalign.models.tiny", description="Write a tiny random pipeline.")
    parser.add_argument("family", choices=["sd3"])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(save_tiny_sd3(args.out_dir, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
