"""The tiny HunyuanVideo 1.5 pipeline is the published 480p T2V configs shrunk in width and depth
only: every other key of every component is the published value, and what differs is smaller
(or, for the text encoder, the in-memory tokenizer's vocabulary and special-token ids)."""

from __future__ import annotations

import pytest

from genalign.models.hunyuan_video15.tiny import HUNYUAN_VIDEO15_SHAPES, TINY_OVERRIDES, published

WIDTH_AND_DEPTH = {
    "transformer": {
        "num_layers",
        "num_refiner_layers",
        "num_attention_heads",
        "attention_head_dim",
        "rope_axes_dim",
        "text_embed_dim",
        "text_embed_2_dim",
        "image_embed_dim",
        "in_channels",
        "out_channels",
    },
    "vae": {"block_out_channels", "latent_channels", "layers_per_block"},
    "text_encoder": {
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "rope_scaling",
    },
    "text_encoder_2": {"d_model", "d_kv", "d_ff", "num_layers", "num_heads", "relative_attention_num_buckets"},
}
"""The keys a tiny form may change: widths and depths (RoPE's axes split the head size; the
transformer's channels and text widths follow the tiny VAE's and encoders')."""


def _sizes(value) -> list[int]:
    if isinstance(value, dict):  # rope_scaling: the mrope sections split the head size
        return [s for key in sorted(value) for s in _sizes(value[key]) if key == "mrope_section"]
    return list(value) if isinstance(value, list) else [value]


@pytest.mark.parametrize("component", sorted(WIDTH_AND_DEPTH))
def test_the_tiny_form_is_the_published_config_shrunk(component):
    real = published()["components"][component]["config"]
    tiny = HUNYUAN_VIDEO15_SHAPES["tiny"][component]
    assert set(TINY_OVERRIDES[component]) <= WIDTH_AND_DEPTH[component]
    for key, value in real.items():
        if key in WIDTH_AND_DEPTH[component]:
            sizes, published_sizes = _sizes(tiny[key]), _sizes(value)
            assert len(sizes) == len(published_sizes) or key == "block_out_channels", key
            assert all(s <= p for s, p in zip(sizes, published_sizes)), (key, tiny[key], value)
        else:
            assert tiny[key] == value, key
    assert set(tiny) == set(real)


def test_the_tiny_transformer_binds_to_the_tiny_vae_and_encoders_as_the_real_one_does():
    """in = 2·C + 1 (latents, condition latents, condition mask), out = C; text widths = the encoders'."""
    for form in ("tiny", "hunyuan-video-1.5-480p-t2v"):
        shapes = HUNYUAN_VIDEO15_SHAPES[form]
        channels = shapes["vae"]["latent_channels"]
        transformer = shapes["transformer"]
        assert (transformer["in_channels"], transformer["out_channels"]) == (2 * channels + 1, channels)
        assert transformer["text_embed_dim"] == shapes["text_encoder"]["hidden_size"]
        assert transformer["text_embed_2_dim"] == shapes["text_encoder_2"]["d_model"]
        assert sum(transformer["rope_axes_dim"]) == transformer["attention_head_dim"]


def test_the_scheduler_and_guider_are_the_published_ones():
    body = published()["pipeline"]
    for form in ("tiny", "hunyuan-video-1.5-480p-t2v"):
        assert HUNYUAN_VIDEO15_SHAPES[form]["scheduler"] == body["scheduler"]["config"]
        assert HUNYUAN_VIDEO15_SHAPES[form]["guider"]["guidance_scale"] == 6.0
    assert body["scheduler"]["config"]["shift"] == 5.0 and not body["scheduler"]["config"]["use_dynamic_shifting"]


def test_the_real_form_counts_the_published_8_3_billion_parameters():
    """The 480p T2V transformer built on the meta device from the shipped configs: 8.3 B (the
    model's published size)."""
    from genalign.models.architecture import build_on_meta

    spec = published()["components"]["transformer"]
    transformer = build_on_meta("diffusers", spec["class"], spec["config"])
    count = sum(p.numel() for p in transformer.parameters())
    assert 8.2e9 < count < 8.4e9, count
