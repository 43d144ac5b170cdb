"""The tiny random Janus-Pro (`SPEC.tiny_builder`): a `JanusForConditionalGeneration` and its
`JanusProcessor` over an in-memory tokenizer with Janus-Pro's special tokens.

Where it fits: the default suite saves it and loads it back through the real
`JanusPolicy.from_pretrained` (`python -m genalign.models.tiny_random janus DIR`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from genalign.models.tiny_random import bytes_to_unicode, shape_spec

JANUS_SPECIAL = {
    "bos_token": "<｜begin▁of▁sentence｜>",
    "eos_token": "<｜end▁of▁sentence｜>",
    "pad_token": "<｜▁pad▁｜>",
}
JANUS_IMAGE_SPECIAL = {
    "image_token": "<image_placeholder>",
    "boi_token": "<begin_of_image>",
    "eoi_token": "<end_of_image>",
}
"""Janus-Pro's special tokens (its tokenizer's names); the processor reads the image ones."""


def tiny_janus_tokenizer():
    """A byte-level BPE with no merges (one token per byte) that prepends BOS, with Janus-Pro's
    special tokens (BOS/EOS/pad and the image placeholder / begin / end of image), 262 tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = list(JANUS_SPECIAL.values()) + list(JANUS_IMAGE_SPECIAL.values())
    vocab = {token: index for index, token in enumerate(specials + bytes_to_unicode())}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    bpe.decoder = decoders.ByteLevel()
    bos = JANUS_SPECIAL["bos_token"]
    bpe.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, padding_side="left", extra_special_tokens=JANUS_IMAGE_SPECIAL, **JANUS_SPECIAL
    )


JANUS_SHAPES = {
    # a 2-layer Llama of hidden 32 (4 heads, 2 KV heads), a 1-layer SigLIP tower, and a VQ model
    # of 64 codes whose decoder upsamples 4x4 tokens by 8: 16 image tokens per 32x32 image
    "tiny": dict(
        text=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
        ),
        vision=dict(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
            mlp_ratio=2.0,
            depth=2,
        ),
        vq=dict(
            embed_dim=8,
            num_embeddings=64,
            latent_channels=32,
            base_channels=32,
            channel_multiplier=[1, 1, 1, 1],
            num_res_blocks=1,
            num_hidden_layers=2,
        ),
    ),
}
"""Architectures `build_tiny_janus` knows."""


class JanusBundle:
    """A `JanusForConditionalGeneration` and its `JanusProcessor`, saved side by side as the hub
    repos are (`save_pretrained` writes both into one directory)."""

    def __init__(self, model, processor):
        self.model, self.processor = model, processor

    def save_pretrained(self, path: str | Path) -> None:
        self.model.save_pretrained(path)
        self.processor.save_pretrained(path)


def build_tiny_janus(seed: int = 0, shapes: str = "tiny") -> JanusBundle:
    """A JanusForConditionalGeneration with random tiny weights (fp32, CPU) and its processor
    (in-memory tokenizer, JanusImageProcessor at the tiny image size). The generation config
    carries what `generate(generation_mode="image")` reads: BOS, pad (the unconditional
    prompt's filler), the begin-of-image id and CFG 5 (Janus-Pro's default)."""
    from transformers import (
        GenerationConfig,
        JanusConfig,
        JanusForConditionalGeneration,
        JanusImageProcessorPil,
        JanusProcessor,
    )

    spec = shape_spec(JANUS_SHAPES, shapes, "Janus")
    tokenizer = tiny_janus_tokenizer()
    text_hidden = spec["text"]["hidden_size"]
    vision = spec["vision"]
    num_image_tokens = (vision["image_size"] // vision["patch_size"]) ** 2
    config = JanusConfig(
        text_config=dict(
            model_type="llama",
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **spec["text"],
        ),
        vision_config=dict(projection_dim=text_hidden, num_image_tokens=num_image_tokens, **vision),
        vq_config=dict(projection_dim=text_hidden, image_token_embed_dim=text_hidden, **spec["vq"]),
        image_token_id=tokenizer.convert_tokens_to_ids(JANUS_IMAGE_SPECIAL["image_token"]),
    )
    torch.manual_seed(seed)
    model = JanusForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        generation_kwargs={"boi_token_id": tokenizer.convert_tokens_to_ids(JANUS_IMAGE_SPECIAL["boi_token"])},
        guidance_scale=5.0,
    )
    image_processor = JanusImageProcessorPil(size={"height": vision["image_size"], "width": vision["image_size"]})
    processor = JanusProcessor(image_processor=image_processor, tokenizer=tokenizer, num_image_tokens=num_image_tokens)
    return JanusBundle(model, processor)
