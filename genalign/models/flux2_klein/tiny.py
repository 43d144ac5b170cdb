"""The tiny random FLUX.2 [klein] pipeline (`SPEC.tiny_builder`).

Where it fits: the default suite saves it and loads it back through the real
`Flux2KleinPolicy.from_pretrained` (`python -m genalign.models.tiny_random flux2_klein DIR`).
Every component is the published config (`architectures/black-forest-labs--FLUX.2-klein-4B.json`)
shrunk in width and depth only (tests/unit/models/test_flux2_klein_tiny.py checks it key by key):
the Qwen3 keeps 28 of its 36 layers, the fewest that still hold the pipeline's layers 9, 18 and
27, so prompts are encoded exactly as the real pipeline encodes them. Its tokenizer is a small
byte-level BPE in memory with Qwen3's chat template (`qwen3_chat_template.jinja`) and special
tokens: the real 151,936-token vocabulary is too large to ship.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from genalign.models.flux.tiny import flux_dev_scheduler
from genalign.models.tiny_random import QWEN_SPECIAL, tiny_qwen2_tokenizer

ARCHITECTURE = Path(__file__).parent / "architectures" / "black-forest-labs--FLUX.2-klein-4B.json"
CHAT_TEMPLATE = Path(__file__).parent / "qwen3_chat_template.jinja"
"""Qwen3's chat template (the tokenizer_config.json `chat_template` of Qwen/Qwen3-4B, which
FLUX.2 [klein]'s tokenizer/ ships), as public projects transcribe it."""
THINK_TOKENS = ["<think>", "</think>"]
"""Qwen3's added tokens the template writes when thinking is off."""
KLEIN_RENDERED = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
"""What the template renders for the pipeline's one user turn (add_generation_prompt,
enable_thinking=False): the corpus of the tiny tokenizer's merges."""

TINY_WIDTH = dict(
    transformer=dict(
        num_attention_heads=2, attention_head_dim=16, axes_dims_rope=[4, 4, 4, 4], timestep_guidance_channels=32
    ),
    text_encoder=dict(hidden_size=16, intermediate_size=32, num_attention_heads=4, num_key_value_heads=1, head_dim=8),
    vae=dict(block_out_channels=[8, 8, 8, 8], latent_channels=4, norm_num_groups=2, sample_size=32),
)
"""Width keys set smaller (the published heads : KV heads ratio of 4 kept); the transformer's
in_channels (4 x the VAE's latent channels) and joint_attention_dim (3 x the text width) follow."""
TINY_DEPTH = dict(
    transformer=dict(num_layers=1, num_single_layers=1),
    text_encoder=dict(num_hidden_layers=28),
    vae=dict(layers_per_block=1),
)
"""Depth keys set smaller."""


def published_configs() -> dict[str, dict]:
    """{component: config} of the shipped FLUX.2 [klein] 4B architecture file."""
    body = json.loads(ARCHITECTURE.read_text())
    return {name: dict(entry["config"]) for name, entry in body["components"].items()}


def tiny_configs(vocab_size: int) -> dict[str, dict]:
    """The published configs with `TINY_WIDTH` and `TINY_DEPTH` applied and the keys that
    follow from them (in_channels, joint_attention_dim, the tokenizer's vocabulary)."""
    configs = published_configs()
    for name in configs:
        configs[name].update(TINY_WIDTH[name], **TINY_DEPTH[name])
    text = configs["text_encoder"]
    text["vocab_size"] = vocab_size
    transformer = configs["transformer"]
    transformer["in_channels"] = 4 * configs["vae"]["latent_channels"]
    transformer["joint_attention_dim"] = 3 * text["hidden_size"]
    return configs


def tiny_qwen3_tokenizer():
    """A byte-level Qwen2 BPE trained in memory on what the pipeline renders, with Qwen3's
    special tokens (<|endoftext|> pads, as Qwen3's) and chat template."""
    tokenizer = tiny_qwen2_tokenizer(KLEIN_RENDERED)
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN_SPECIAL[1:] + THINK_TOKENS})
    tokenizer.chat_template = CHAT_TEMPLATE.read_text()
    return tokenizer


def build_tiny_flux2_klein_pipeline(seed: int = 0, is_distilled: bool = True):
    """A Flux2KleinPipeline with random tiny weights (fp32, CPU) from `tiny_configs`: the
    transformer 1 double + 1 single block of 2 heads x 16 dims, RoPE axes (4, 4, 4, 4); Qwen3
    28 layers of width 16; the VAE factor 8 with 4 latent channels and non-trivial batch-norm
    statistics (so the normalisation is exercised); FLUX.1-dev's scheduler config, which
    diffusers' conversion script gives FLUX.2. `is_distilled`: the step-distilled 4B / 9B's
    form (CFG ignored); False the -base form."""
    from diffusers import (
        AutoencoderKLFlux2,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = tiny_qwen3_tokenizer()
    configs = tiny_configs(len(tokenizer))
    torch.manual_seed(seed)
    transformer = Flux2Transformer2DModel(**configs["transformer"])
    torch.manual_seed(seed + 1)
    text_encoder = Qwen3ForCausalLM(
        Qwen3Config(pad_token_id=tokenizer.pad_token_id, **_without(configs["text_encoder"], "model_type"))
    )
    torch.manual_seed(seed + 2)
    vae = AutoencoderKLFlux2(**configs["vae"])
    random_batch_norm(vae, seed + 3)
    return Flux2KleinPipeline(
        scheduler=flux_dev_scheduler(),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        is_distilled=is_distilled,
    )


def random_batch_norm(vae, seed: int) -> None:
    """Non-trivial batch-norm statistics for a freshly built FLUX.2 VAE (its defaults, mean 0 and
    variance 1, would leave the latent normalisation untested): mean ~ 0.3·N(0, 1), variance in
    [0.5, 1.5)."""
    channels = vae.bn.running_mean.shape[0]
    generator = torch.Generator().manual_seed(seed)
    vae.bn.running_mean.copy_(0.3 * torch.randn(channels, generator=generator))
    vae.bn.running_var.copy_(0.5 + torch.rand(channels, generator=generator))


def _without(config: dict, *keys: str) -> dict:
    return {key: value for key, value in config.items() if key not in keys}
