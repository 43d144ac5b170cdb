"""The tiny random HunyuanVideo 1.5 pipeline (`SPEC.tiny_builder`) and the same builder at the
real shapes, both from the architecture file the family ships.

Where it fits: the default suite saves it and loads it back through the real
`HunyuanVideo15Policy.from_pretrained` (`python -m genalign.models.tiny_random hunyuan_video15
DIR`). The tiny form is the published 480p T2V configs with only widths and depths shrunk
(`TINY_OVERRIDES`; tests/unit/models/test_hunyuan_video15_tiny.py checks that every other key is
the published value). Its tokenizers are built in memory: a byte-level Qwen2 BPE whose merges are
trained on the pipeline's own system turn (`models/tiny_random.py`) with Qwen's chat template,
and transformers' ByT5Tokenizer (which needs no vocabulary file).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import torch

from genalign.models.tiny_random import building, shape_spec, tiny_qwen2_tokenizer

ARCHITECTURE = "hunyuanvideo-community--HunyuanVideo-1.5-Diffusers-480p_t2v.json"
QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen2.5-VL's chat template for text-only messages (what its full template renders for them)."""
TINY_OVERRIDES = {
    # 2 dual-stream blocks (54) of 2 heads x 16 (16 x 128), one token-refiner block (2); RoPE axes
    # over the head size 16 in the published proportion 1 : 3.5 : 3.5 rounded to even sizes
    "transformer": dict(
        num_layers=2,
        num_refiner_layers=1,
        num_attention_heads=2,
        attention_head_dim=16,
        rope_axes_dim=[4, 6, 6],
        text_embed_dim=16,
        text_embed_2_dim=32,
        image_embed_dim=8,
        in_channels=9,
        out_channels=4,
    ),
    # 4 latent channels (32), 8 channels at every one of the 5 levels (128 ... 1024), one block a level (2)
    "vae": dict(block_out_channels=[8, 8, 8, 8, 8], latent_channels=4, layers_per_block=1),
    # Qwen2.5-VL's text model: 2 layers (28) of width 16 (3584), 2 heads over 1 key-value head (28 / 4)
    "text_encoder": dict(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
    ),
    # the byT5 glyph encoder: 2 layers (12) of width 32 (1472), 4 heads of 8 (6 of 64), MLP 64 (3584)
    "text_encoder_2": dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, relative_attention_num_buckets=8),
}
"""What the tiny pipeline changes in the published configs: widths and depths only (the
transformer's input/output channels follow the VAE's latent channels, 2·C + 1 and C; its text
widths follow the tiny encoders')."""


def published() -> dict:
    """The family's architecture file: {"components": ..., "pipeline": ..., ...}."""
    return json.loads((Path(__file__).parent / "architectures" / ARCHITECTURE).read_text())


def shapes_of(body: dict, tiny: bool) -> dict:
    """The component configs of architecture file `body` (every component, with the pipeline's
    scheduler and guider); `tiny` applies `TINY_OVERRIDES`."""
    components = {name: dict(entry["config"]) for name, entry in body["components"].items()}
    if tiny:
        for name, overrides in TINY_OVERRIDES.items():
            components[name].update(overrides)
    return dict(
        components,
        scheduler=body["pipeline"]["scheduler"]["config"],
        guider=body["pipeline"]["guider"]["config"],
    )


HUNYUAN_VIDEO15_SHAPES = {
    "tiny": shapes_of(published(), True),
    "hunyuan-video-1.5-480p-t2v": shapes_of(published(), False),
}
"""Architectures `build_hunyuan_video15_pipeline` knows: the tiny test pipeline and the real 480p
T2V shapes (8.3 B transformer parameters), both from the shipped architecture file."""


def system_message() -> str:
    """The system turn HunyuanVideo15Pipeline wraps every prompt in (its encoder's default)."""
    from diffusers import HunyuanVideo15Pipeline

    return inspect.signature(HunyuanVideo15Pipeline._get_mllm_prompt_embeds).parameters["system_message"].default


def tiny_tokenizers():
    """(Qwen2 tokenizer, ByT5 tokenizer): the Qwen BPE's merges are trained on the pipeline's
    system turn rendered by the chat template, so that turn and the user turn's header are
    whole words, 108 tokens, exactly what the pipeline crops (`prompt_template_encode_start_idx`),
    as with the real tokenizer; `<|endoftext|>` pads."""
    from transformers import ByT5Tokenizer

    corpus = (
        f"<|im_start|>system\n{system_message()}<|im_end|>\n<|im_start|>user\n{{}}<|im_end|>\n<|im_start|>assistant\n"
    )
    tokenizer = tiny_qwen2_tokenizer(corpus)
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    tokenizer.pad_token = "<|endoftext|>"
    return tokenizer, ByT5Tokenizer()


def hunyuan_video15_components(
    spec: dict, tiny: bool, seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> dict:
    """The components every HunyuanVideo 1.5 pipeline shares, with random weights from the
    configs `spec` (a `shapes_of` entry; the VAE always float32): transformer, both text encoders
    and their in-memory tokenizers (`tiny`: the Qwen config takes their vocabulary and ids), VAE,
    the published scheduler and guider."""
    from diffusers import (
        AutoencoderKLHunyuanVideo15,
        ClassifierFreeGuidance,
        FlowMatchEulerDiscreteScheduler,
        HunyuanVideo15Transformer3DModel,
    )
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel, T5Config, T5EncoderModel

    tokenizer, tokenizer_2 = tiny_tokenizers()
    text_config = {k: v for k, v in spec["text_encoder"].items() if k != "model_type"}
    if tiny:  # the in-memory tokenizer's vocabulary and its <|im_end|> / <|endoftext|> ids
        text_config.update(
            vocab_size=len(tokenizer),
            bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        )
    with building(device, dtype):
        torch.manual_seed(seed)
        transformer = HunyuanVideo15Transformer3DModel.from_config(spec["transformer"])
        torch.manual_seed(seed + 1)
        text_encoder = Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(**text_config))
        torch.manual_seed(seed + 2)
        byt5 = {k: v for k, v in spec["text_encoder_2"].items() if k != "model_type"}
        text_encoder_2 = T5EncoderModel(T5Config(**byt5))
    with building(device, torch.float32):
        torch.manual_seed(seed + 3)
        vae = AutoencoderKLHunyuanVideo15.from_config(spec["vae"])
    return dict(
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        vae=vae,
        scheduler=FlowMatchEulerDiscreteScheduler.from_config(spec["scheduler"]),
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        guider=ClassifierFreeGuidance.from_config(spec["guider"]),
    )


def build_hunyuan_video15_pipeline(
    shapes: str = "tiny", seed: int = 0, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
):
    """A HunyuanVideo15Pipeline of the named `HUNYUAN_VIDEO15_SHAPES` with random weights
    (`hunyuan_video15_components`)."""
    from diffusers import HunyuanVideo15Pipeline

    spec = shape_spec(HUNYUAN_VIDEO15_SHAPES, shapes, "HunyuanVideo 1.5")
    return HunyuanVideo15Pipeline(**hunyuan_video15_components(spec, shapes == "tiny", seed, device, dtype))


def build_tiny_hunyuan_video15_pipeline(seed: int = 0):
    """The tiny HunyuanVideo15Pipeline (fp32, CPU); the same seed gives the same weights."""
    return build_hunyuan_video15_pipeline("tiny", seed)
