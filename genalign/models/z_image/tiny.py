"""The tiny random Z-Image pipelines (`SPEC.tiny_builder`, and the base model's `tiny_variants`
entry): the family's architecture files (`architectures/Tongyi-MAI--*.json`) shrunk in width and
depth only.

Where it fits: the default suite saves it and loads it back through the real
`ZImagePolicy.from_pretrained` (`python -m genalign.models.tiny_random z_image DIR`); the GPU
suite takes its tokenizer and scheduler beside the real-size components (`models/real_shapes.py`).
Its tokenizer is the byte-level Qwen2 BPE the Qwen families share (`models/tiny_random.py`) with
the chat template's output for one user turn, as Qwen3's template writes it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from genalign.models.tiny_random import tiny_qwen2_tokenizer

ARCHITECTURES = Path(__file__).parent / "architectures"
TURBO = "Tongyi-MAI--Z-Image-Turbo.json"
BASE = "Tongyi-MAI--Z-Image.json"

TINY_WIDTH_DEPTH = {
    "transformer": dict(
        dim=32, n_heads=2, n_kv_heads=2, n_layers=2, n_refiner_layers=1, cap_feat_dim=32, axes_dims=[4, 6, 6]
    ),
    "text_encoder": dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        max_window_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    ),
    "vae": dict(block_out_channels=[8, 16, 16, 16], layers_per_block=1, norm_num_groups=2),
}
"""What the tiny model changes in each published config: widths (the RoPE axes split the head
width 16 as the real ones split 128, time : height : width = 2 : 3 : 3; the transformer reads
the text encoder's width, cap_feat_dim) and depths. Every other key is the published value
(`test_the_tiny_model_is_the_published_config_shrunk`); the text encoder's vocabulary and its
special token ids are the tiny tokenizer's."""

QWEN3_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
"""Qwen3's chat template for what ZImagePipeline asks of it (user turns, a generation prompt,
`enable_thinking`): `<|im_start|>user\\n{prompt}<|im_end|>\\n<|im_start|>assistant\\n`; the empty
think block only without thinking, as Qwen3's template writes it."""


def published(file_name: str) -> dict:
    """The architecture file `file_name`: {"components": ..., "pipeline": ...} as shipped."""
    return json.loads((ARCHITECTURES / file_name).read_text())


def tiny_configs(file_name: str) -> dict[str, dict]:
    """Each component's published config with `TINY_WIDTH_DEPTH` applied."""
    components = published(file_name)["components"]
    return {name: {**components[name]["config"], **TINY_WIDTH_DEPTH[name]} for name in TINY_WIDTH_DEPTH}


def build_tiny(file_name: str, seed: int):
    """A ZImagePipeline with random tiny weights (fp32, CPU) of the checkpoint `file_name`
    describes, its scheduler config (the static shift) as published."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel
    from transformers import Qwen3Config, Qwen3Model

    configs = tiny_configs(file_name)
    tokenizer = tiny_qwen2_tokenizer("<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n")
    tokenizer.chat_template = QWEN3_CHAT_TEMPLATE
    torch.manual_seed(seed)
    transformer = ZImageTransformer2DModel(**configs["transformer"])
    torch.manual_seed(seed + 1)
    text = {k: v for k, v in configs["text_encoder"].items() if k != "model_type"}  # the config class says it
    vocabulary = dict(  # the tiny tokenizer's ids of Qwen's <|endoftext|> and <|im_end|>
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
    )
    text_encoder = Qwen3Model(Qwen3Config(**{**text, **vocabulary}))
    torch.manual_seed(seed + 2)
    vae = AutoencoderKL(**configs["vae"])
    scheduler = FlowMatchEulerDiscreteScheduler(**published(file_name)["pipeline"]["scheduler"]["config"])
    return ZImagePipeline(
        transformer=transformer, scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer
    )


def build_tiny_z_image_pipeline(seed: int = 0):
    """Z-Image-Turbo's form: scheduler shift 3.0."""
    return build_tiny(TURBO, seed)


def build_tiny_z_image_base_pipeline(seed: int = 0):
    """The base Z-Image's form: scheduler shift 6.0 (the same architecture)."""
    return build_tiny(BASE, seed)
