"""FLUX.2 [dev]'s shipped architecture file against the nearest published source (the
black-forest-labs repository is not among the stored copies: the file's "source" says so), its
tiny model against those configs (shrunk in width and depth only), and the tiny tokenizer's
lengths and ids (offline: HF_HUB_OFFLINE=1 in tests/conftest.py)."""

from __future__ import annotations

import inspect
import json

import pytest

from genalign.models.architecture import shipped_file
from genalign.models.flux2.tiny import (
    MISTRAL_SPECIAL,
    TINY_DEPTH,
    TINY_WIDTH,
    published_configs,
    rendered,
    tiny_configs,
    tiny_mistral_tokenizer,
)
from genalign.models.spec import family_spec

CONVERSION_SCRIPT = dict(
    patch_size=1,
    in_channels=128,
    num_layers=8,
    num_single_layers=48,
    attention_head_dim=128,
    num_attention_heads=48,
    joint_attention_dim=15360,
    timestep_guidance_channels=256,
    mlp_ratio=3.0,
    axes_dims_rope=[32, 32, 32, 32],
    rope_theta=2000,
    eps=1e-6,
)
"""huggingface/diffusers scripts/convert_flux2_to_diffusers.py (commit 58eb52c), its flux2-dev
`diffusers_config`; it leaves out_channels and guidance_embeds at the class defaults."""
MISTRAL_SMALL_TEXT = dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=8)
"""Mistral Small 3.x's text model (24 B): what makes joint_attention_dim 3 x 5120."""
FOLLOWS = {"transformer": {"in_channels", "joint_attention_dim"}, "vae": set()}


def architecture() -> dict:
    return json.loads(shipped_file(family_spec("flux2"), "black-forest-labs/FLUX.2-dev").read_text())


def test_the_transformer_is_diffusers_conversion_config_with_the_class_defaults():
    from diffusers import Flux2Transformer2DModel

    body = architecture()
    config = dict(body["components"]["transformer"]["config"])
    signature = inspect.signature(Flux2Transformer2DModel.__init__).parameters
    assert config.pop("out_channels") is signature["out_channels"].default is None
    assert config.pop("guidance_embeds") is signature["guidance_embeds"].default is True  # guidance-distilled
    assert config == CONVERSION_SCRIPT
    text = body["components"]["text_encoder"]["config"]["text_config"]
    assert {k: text[k] for k in MISTRAL_SMALL_TEXT} == MISTRAL_SMALL_TEXT
    assert CONVERSION_SCRIPT["joint_attention_dim"] == 3 * text["hidden_size"]  # layers 10, 20, 30 side by side


def test_the_vae_is_flux2s_one_vae_as_klein_ships_it():
    klein = json.loads(shipped_file(family_spec("flux2_klein"), "black-forest-labs/FLUX.2-klein-4B").read_text())
    assert architecture()["components"]["vae"] == klein["components"]["vae"]
    assert architecture()["geometry"] == klein["geometry"]


def test_the_text_encoder_config_builds_the_published_class():
    """The Mistral3 config is one transformers reads as published (nothing unknown), and its
    image token index is the tokenizer's [IMG] (Tekken's control-token ids)."""
    from transformers import AutoConfig

    config = dict(architecture()["components"]["text_encoder"]["config"])
    built = AutoConfig.for_model(config.pop("model_type"), **config)
    assert type(built).__name__ == "Mistral3Config" and built.text_config.model_type == "mistral"
    assert built.vision_config.model_type == "pixtral" and built.spatial_merge_size == 2
    assert MISTRAL_SPECIAL.index("[IMG]") == built.image_token_index == 10
    assert built.text_config.vocab_size == 131072


def test_the_tiny_model_is_the_published_config_shrunk_in_width_and_depth_only():
    real, tiny = published_configs(), tiny_configs(vocab_size=400)

    def check(name: str, real_part: dict, tiny_part: dict, width: dict, depth: dict, follows: set) -> None:
        shrunk = set(width) | set(depth) | follows
        assert set(tiny_part) == set(real_part), name
        assert {k: v for k, v in tiny_part.items() if k not in shrunk} == {
            k: v for k, v in real_part.items() if k not in shrunk
        }, name
        for key in set(depth) | (set(width) - {"axes_dims_rope", "block_out_channels"}):
            assert tiny_part[key] <= real_part[key], (name, key)

    for name in ("transformer", "vae"):
        check(name, real[name], tiny[name], TINY_WIDTH[name], TINY_DEPTH[name], FOLLOWS[name])
    text_width, text_depth = TINY_WIDTH["text_encoder"], TINY_DEPTH["text_encoder"]
    for part in ("text_config", "vision_config"):
        follows = {"vocab_size"} if part == "text_config" else set()
        check(
            part,
            real["text_encoder"][part],
            tiny["text_encoder"][part],
            text_width[part],
            text_depth[part],
            follows,
        )
    outer = {k: v for k, v in tiny["text_encoder"].items() if k not in ("text_config", "vision_config")}
    assert outer == {k: v for k, v in real["text_encoder"].items() if k not in ("text_config", "vision_config")}
    text, real_text, transformer = (
        tiny["text_encoder"]["text_config"],
        real["text_encoder"]["text_config"],
        tiny["transformer"],
    )
    assert text["num_hidden_layers"] > 30  # the pipeline reads hidden states 10, 20, 30, none the last
    assert (
        text["num_attention_heads"] // text["num_key_value_heads"]
        == real_text["num_attention_heads"] // real_text["num_key_value_heads"]
    )
    assert sum(transformer["axes_dims_rope"]) == transformer["attention_head_dim"]  # RoPE spans a head, as real
    assert transformer["guidance_embeds"] is True
    assert len(tiny["vae"]["block_out_channels"]) == len(real["vae"]["block_out_channels"])  # VAE factor 8 kept


def test_the_tiny_tokenizer_renders_and_pads_as_the_pipeline_asks():
    """Offline: the chat template renders FLUX.2's system and user turns; <s>, [INST] and the
    system-prompt brackets are single tokens at their published ids; the pipeline's call pads to
    max_length with <pad> (11) and truncates there."""
    from diffusers.pipelines.flux2.pipeline_flux2 import format_input

    tokenizer = tiny_mistral_tokenizer()
    assert [tokenizer.convert_tokens_to_ids(t) for t in MISTRAL_SPECIAL] == list(range(len(MISTRAL_SPECIAL)))
    assert tokenizer.pad_token_id == 11 and tokenizer.bos_token_id == 1
    messages = format_input(["two cats"])
    assert tokenizer.apply_chat_template(messages, tokenize=False) == [rendered("two cats")]
    words = tokenizer(rendered("two cats"), add_special_tokens=False)["input_ids"]
    call = dict(add_generation_prompt=False, tokenize=True, return_dict=True, return_tensors="pt", truncation=True)
    inputs = tokenizer.apply_chat_template(messages, padding="max_length", max_length=512, **call)
    assert inputs["input_ids"].shape == (1, 512)
    assert int(inputs["attention_mask"].sum()) == len(words) == 39
    assert inputs["input_ids"][0, : len(words)].tolist() == words
    assert words[:2] == [1, 17] and words[-1] == 4  # <s> [SYSTEM_PROMPT] ... [/INST]
    assert set(inputs["input_ids"][0, len(words) :].tolist()) == {11}
    short = tokenizer.apply_chat_template(messages, padding="max_length", max_length=16, **call)
    assert short["input_ids"].shape == (1, 16) and short["input_ids"][0].tolist() == words[:16]


@pytest.mark.parametrize("gpus,card_gib,fits", [(8, 80, True), (4, 80, True), (2, 80, False), (8, 48, False)])
def test_the_recipe_fits_the_cards_its_comment_names(gpus, card_gib, fits):
    """The recipe's "what it needs" (and docs/models.md's), from the memory plan: FSDP2 over 8
    (or 4) 80 GB GPUs, not 2, and no 48 GB card (the text encoder alone is 43.5 GiB)."""
    from genalign.preflight.load import load_config
    from genalign.preflight.memory_plan import estimate_memory

    cfg = load_config(
        "experiment/diffusion/flux2/online_grpo_clip_pickscore",
        [f"distributed.resources.trainer.num_gpus={gpus}", f"distributed.resources.gpu_memory_gib={card_gib}"],
    )
    peak = max(role.peak_bytes for role in estimate_memory(cfg).roles) / 2**30
    assert (peak <= 0.9 * card_gib) is fits, peak
