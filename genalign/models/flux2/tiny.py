"""The tiny random FLUX.2 [dev] pipeline (`SPEC.tiny_builder`).

Where it fits: the default suite saves it and loads it back through the real `Flux2Policy.
from_pretrained` (`python -m genalign.models.tiny_random flux2 DIR`). Every component is the
published config (`architectures/black-forest-labs--FLUX.2-dev.json`) shrunk in width and depth
only (tests/unit/models/test_flux2_tiny.py checks it key by key): the Mistral3 text model keeps 31
of its 40 layers, the fewest that hold the pipeline's hidden states 10, 20 and 30 without the last
one (whose output the model's final norm changes), so prompts are encoded exactly as the real
pipeline encodes them; its Pixtral vision tower and projector are shrunk too (text-to-image never
runs them, but the class holds them). The tokenizer carries Mistral Small 3.x's chat template
(`mistral3_chat_template.jinja`) and special tokens at their published ids over a small
byte-level BPE trained in memory: the real 131,072-token vocabulary is too large to ship.

The pipeline's `tokenizer` component is that tokenizer with the chat template: the published
checkpoint's tokenizer/ folder holds a PixtralProcessor, whose module imports torchvision (not
installed with genalign's CPU torch: its wheels need CUDA's torch). For text the processor only
renders the template and hands the text to its tokenizer, which is what the tokenizer's own
`apply_chat_template` does with the same arguments, so Flux2Pipeline's `encode_prompt` runs the
same tokens through either; the real checkpoint loads its PixtralProcessor where torchvision is
installed (any GPU machine).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from genalign.models.flux.tiny import flux_dev_scheduler
from genalign.models.flux2_klein.tiny import random_batch_norm

ARCHITECTURE = Path(__file__).parent / "architectures" / "black-forest-labs--FLUX.2-dev.json"
CHAT_TEMPLATE = Path(__file__).parent / "mistral3_chat_template.jinja"
MISTRAL_SPECIAL = [
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
]
"""Mistral Small 3.x's first 20 control tokens in id order (Tekken's; [IMG] is 10, the text
encoder config's image_token_index; <pad> 11): the tiny tokenizer gives each its published id."""
PRETOKENIZE = "|".join(
    [
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
        r"\p{N}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)
"""Tekken's pre-tokenizer split (a tiktoken-style pattern with single digits)."""

TINY_WIDTH = dict(
    transformer=dict(
        num_attention_heads=2, attention_head_dim=16, axes_dims_rope=[4, 4, 4, 4], timestep_guidance_channels=32
    ),
    text_encoder=dict(
        text_config=dict(
            hidden_size=16, intermediate_size=32, num_attention_heads=4, num_key_value_heads=1, head_dim=8
        ),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_attention_heads=2, head_dim=8),
    ),
    vae=dict(block_out_channels=[8, 8, 8, 8], latent_channels=4, norm_num_groups=2, sample_size=32),
)
"""Width keys set smaller (the text model's heads : KV heads ratio of 4 kept); the transformer's
in_channels (4 x the VAE's latent channels) and joint_attention_dim (3 x the text width) follow."""
TINY_DEPTH = dict(
    transformer=dict(num_layers=1, num_single_layers=1),
    text_encoder=dict(text_config=dict(num_hidden_layers=31), vision_config=dict(num_hidden_layers=1)),
    vae=dict(layers_per_block=1),
)
"""Depth keys set smaller."""


def published_configs() -> dict[str, dict]:
    """{component: config} of the shipped FLUX.2 [dev] architecture file."""
    body = json.loads(ARCHITECTURE.read_text())
    return {name: json.loads(json.dumps(entry["config"])) for name, entry in body["components"].items()}


def _apply(config: dict, shrink: dict) -> None:
    for key, value in shrink.items():
        if isinstance(value, dict):
            _apply(config[key], value)
        else:
            config[key] = value


def tiny_configs(vocab_size: int) -> dict[str, dict]:
    """The published configs with `TINY_WIDTH` and `TINY_DEPTH` applied and the keys that
    follow from them (in_channels, joint_attention_dim, the tokenizer's vocabulary)."""
    configs = published_configs()
    for name in configs:
        _apply(configs[name], TINY_WIDTH[name])
        _apply(configs[name], TINY_DEPTH[name])
    text = configs["text_encoder"]["text_config"]
    text["vocab_size"] = vocab_size
    transformer = configs["transformer"]
    transformer["in_channels"] = 4 * configs["vae"]["latent_channels"]
    transformer["joint_attention_dim"] = 3 * text["hidden_size"]
    return configs


def rendered(prompt: str) -> str:
    """What Mistral Small 3.x's template renders for Flux2Pipeline's system and user turns."""
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

    return f"<s>[SYSTEM_PROMPT]{SYSTEM_MESSAGE}[/SYSTEM_PROMPT][INST]{prompt}[/INST]"


def tiny_mistral_tokenizer():
    """A byte-level BPE (Tekken's split) whose merges are trained in memory on what the pipeline
    renders, `MISTRAL_SPECIAL` at ids 0-19; <s> opens (written by the template), <pad> pads;
    Mistral Small 3.x's chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=MISTRAL_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = rendered("")
    for token in MISTRAL_SPECIAL:
        corpus = corpus.replace(token, " ")
    bpe.train_from_iterator([corpus], trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=[t for t in MISTRAL_SPECIAL if t not in ("<unk>", "<s>", "</s>", "<pad>")],
    )
    tokenizer.chat_template = CHAT_TEMPLATE.read_text()
    return tokenizer


def build_tiny_flux2_pipeline(seed: int = 0):
    """A Flux2Pipeline with random tiny weights (fp32, CPU) from `tiny_configs`: the transformer
    1 double + 1 single block of 2 heads x 16 dims, RoPE axes (4, 4, 4, 4), the guidance
    embedding; Mistral3 31 text layers of width 16 and a 1-layer vision tower; the VAE factor 8
    with 4 latent channels and non-trivial batch-norm statistics; FLUX.1-dev's scheduler config,
    which diffusers' conversion script gives FLUX.2."""
    from diffusers import AutoencoderKLFlux2, Flux2Pipeline, Flux2Transformer2DModel
    from transformers import AutoConfig, Mistral3ForConditionalGeneration

    tokenizer = tiny_mistral_tokenizer()
    configs = tiny_configs(len(tokenizer))
    torch.manual_seed(seed)
    transformer = Flux2Transformer2DModel(**configs["transformer"])
    torch.manual_seed(seed + 1)
    text = dict(configs["text_encoder"])
    text["text_config"] = {**text["text_config"], "pad_token_id": tokenizer.pad_token_id}
    text_encoder = Mistral3ForConditionalGeneration(AutoConfig.for_model(text.pop("model_type"), **text))
    torch.manual_seed(seed + 2)
    vae = AutoencoderKLFlux2(**configs["vae"])
    random_batch_norm(vae, seed + 3)
    return Flux2Pipeline(
        scheduler=flux_dev_scheduler(), vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer
    )
