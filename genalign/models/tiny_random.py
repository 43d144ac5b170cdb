"""Tiny random models for tests, benchmarks and offline smoke runs: what the families' tiny
builders share, and the one command that writes any of them.

Each family builds its own tiny model from configs with random weights, in its folder
(`models/<family>/tiny.py`, named by its spec's `tiny_builder`: SD3, FLUX, Qwen-Image, Wan,
Cosmos-Predict2.5 and Z-Image pipelines and a Janus-Pro). Not the shipped demo: that is the trained `toy`
family (models/toy/), whose weights ship instead.

Where it fits: nothing can be downloaded here, so the real loading path
(`SD3Policy.from_pretrained`, `StableDiffusion3Pipeline.load_lora_weights`) is exercised on a
pipeline built the way diffusers' own tests build one (1-2 layers, head dim 8), saved with
`save_pretrained` and loaded back. What is shared lives here: the tokenizers, constructed in
memory (byte-level CLIP BPE with no merges, a character-level T5 unigram, a byte-level Qwen2
BPE trained on the Qwen-Image prompt template or Cosmos' system turn), so no hub access is
needed at any point; the small encoder and VAE configs several families use; the tiny
Qwen2.5-VL text encoder of Qwen-Image, Qwen-Image-Edit and Cosmos; `building` (construct on a device in a dtype).

    python -m genalign.models.tiny_random {sd3,flux,flux_kontext,flux2,flux2_klein,qwen_image,qwen_image_edit,
        qwen_image_edit_plus,z_image,wan,wan_i2v,hunyuan_video15,cosmos,janus} OUT_DIR
"""

from __future__ import annotations

import argparse
import string
import sys
from contextlib import contextmanager
from pathlib import Path

import torch

from genalign.models.registry import MODEL_FAMILIES
from genalign.models.spec import family_spec

CLIP_HIDDEN = 16
"""Per-CLIP-tower hidden size: the two towers concatenate to 2·16 = 32 = T5_HIDDEN, so
`encode_prompt` pads nothing and crops nothing (real SD3 pads 768 + 1280 up to 4096)."""
CLIP_PROJECTION = 32
"""Pooled size per tower: pooled_projection_dim = 2·32 = 64."""
T5_HIDDEN = 32
T5_CHARS = string.ascii_letters + string.digits + string.punctuation + " "


def bytes_to_unicode() -> list[str]:
    """GPT-2/CLIP's reversible byte -> printable-unicode table (the BPE alphabet)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def shape_spec(table: dict, shapes: str, what: str) -> dict:
    """The named architecture of a `*_SHAPES` table, or a clear error naming the choices."""
    if shapes not in table:
        raise ValueError(f"unknown {what} shapes {shapes!r}: choose one of {sorted(table)}")
    return table[shapes]


@contextmanager
def building(device: str | torch.device, dtype: torch.dtype):
    """Modules constructed inside are allocated on `device` in `dtype` directly (no float32 copy
    first: real-size shapes build in seconds on a GPU, or on "meta" for parameter counts)."""
    previous_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            yield
    finally:
        torch.set_default_dtype(previous_dtype)


def tiny_clip_tokenizer():
    """Byte-level CLIP BPE over the 256-symbol alphabet with no merges (one token per byte):
    ids 0/1 are <|startoftext|>/<|endoftext|>, 514 tokens in all, max length 77 as in SD3."""
    from transformers import CLIPTokenizer

    alphabet = bytes_to_unicode()
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


TINY_CLIP_TEXT = dict(
    hidden_size=CLIP_HIDDEN,
    intermediate_size=37,
    num_attention_heads=2,
    num_hidden_layers=2,
    hidden_act="gelu",
    projection_dim=CLIP_PROJECTION,
)
"""A CLIP text tower as diffusers' tests build one: SD3's two towers, FLUX's CLIP-L."""
TINY_T5 = dict(d_model=T5_HIDDEN, d_kv=8, d_ff=37, num_layers=2, num_heads=4, relative_attention_num_buckets=8)
"""A T5 encoder of width T5_HIDDEN: SD3's and FLUX's."""
TINY_KL_VAE = dict(
    sample_size=32, block_out_channels=(4, 8, 8, 8), layers_per_block=1, latent_channels=4, norm_num_groups=1
)
"""An AutoencoderKL of factor 8 and 4 latent channels: SD3's and FLUX's (each adds its own
shift_factor and scaling_factor)."""
TINY_WAN_VAE = dict(
    base_dim=3,
    z_dim=16,
    dim_mult=[1, 1, 1, 1],
    num_res_blocks=1,
    temperal_downsample=[False, True, False],
    scale_factor_temporal=2,
    scale_factor_spatial=8,
)
"""An AutoencoderKLWan of 16 channels, spatial factor 8 and temporal factor 2 (3 frames make 2
latent frames; real Wan: 4): Wan's and Cosmos'."""


QWEN_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
    "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
    "<|im_end|>\n<|im_start|>assistant\n"
)
"""QwenImagePipeline's `prompt_template_encode`; its first 34 tokens (the system turn) are dropped."""
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def tiny_qwen2_tokenizer(corpus: str = QWEN_TEMPLATE):
    """A byte-level Qwen2 BPE (Qwen2's pre-tokenizer regex) whose merges are trained in memory
    on the words of `corpus`: by default the Qwen-Image prompt template, so the template's
    system turn is exactly the 34 tokens the pipeline drops (as with the real tokenizer); other
    text falls back to bytes. 362 tokens for the default corpus; <|endoftext|> pads."""
    import json

    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    words = corpus.replace("{}", "")
    for token in QWEN_SPECIAL:
        words = words.replace(token, "")
    bpe.train_from_iterator([words], trainer)
    model = json.loads(bpe.to_str())["model"]
    vocab = dict(model["vocab"])
    for token in QWEN_SPECIAL:
        vocab[token] = len(vocab)
    merges = [tuple(merge) for merge in model["merges"]]
    return Qwen2Tokenizer(vocab=vocab, merges=merges, additional_special_tokens=QWEN_SPECIAL[1:])


QWEN_TEXT_HIDDEN = 16
QWEN_TEXT_LAYERS = 2


def tiny_qwen2_5_vl(vocab: int, vision_tokens_embedded: bool = False):
    """A Qwen2_5_VLForConditionalGeneration of 2 layers of hidden 16 (text) and a 2-block vision
    tower, random weights from the current seed: the text encoder of the tiny Qwen-Image and
    Cosmos-Predict2.5 pipelines. The vision special tokens (start, end, image, video) sit just past
    the tokenizer's `vocab`; `vision_tokens_embedded` gives them embedding rows, for a model whose
    prompts carry pictures (the tiny Qwen-Image-Edit: its tokenizer adds them in that order)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(
        text_config=dict(
            hidden_size=QWEN_TEXT_HIDDEN,
            intermediate_size=16,
            num_hidden_layers=QWEN_TEXT_LAYERS,
            num_attention_heads=2,
            num_key_value_heads=2,
            vocab_size=vocab + 4 * vision_tokens_embedded,
            rope_theta=1000000.0,
            rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
        ),
        vision_config=dict(
            depth=2, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=QWEN_TEXT_HIDDEN
        ),
        hidden_size=QWEN_TEXT_HIDDEN,
        vocab_size=vocab + 4 * vision_tokens_embedded,
        vision_start_token_id=vocab,
        vision_end_token_id=vocab + 1,
        image_token_id=vocab + 2,
        video_token_id=vocab + 3,
    )
    return Qwen2_5_VLForConditionalGeneration(config)


def tiny_families() -> list[str]:
    """The registered families whose spec names a tiny builder (`FamilySpec.tiny_builder`)."""
    return [name for name in MODEL_FAMILIES.names() if family_spec(name).tiny_builder]


def save_tiny(family: str, path: str | Path, seed: int = 0) -> Path:
    """Build the tiny model of `family` (its spec's `tiny_builder`) and `save_pretrained` it into
    `path` (safetensors)."""
    if family not in tiny_families():
        raise ValueError(f"no tiny builder for family {family!r}: choose one of {tiny_families()}")
    path = Path(path)
    family_spec(family).build_tiny(seed).save_pretrained(path)
    return path


def save_tiny_sd3(path: str | Path, seed: int = 0) -> Path:
    """Build and `save_pretrained` a tiny SD3 pipeline into `path` (safetensors); returns it."""
    return save_tiny("sd3", path, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m genalign.models.tiny_random", description="Write a tiny random pipeline."
    )
    parser.add_argument("family", choices=tiny_families())
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(save_tiny(args.family, args.out_dir, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
