"""The tiny HunyuanVideo 1.5 pipelines are the published 480p T2V and I2V configs shrunk in width
and depth only: every other key of every component is the published value, and what differs is
smaller (or, for the text encoder, the in-memory tokenizer's vocabulary and special-token ids; for
the I2V transformer, its target_size, the resolution its size buckets share). The I2V checkpoint
is the T2V one plus FLUX.1 Redux's SigLIP, so its blocks, and with them its memory calibration,
are the same."""

from __future__ import annotations

import pytest

from genalign.models.hunyuan_video15 import tiny as t2v
from genalign.models.hunyuan_video15.tiny import HUNYUAN_VIDEO15_SHAPES, TINY_OVERRIDES, published
from genalign.models.hunyuan_video15_i2v import tiny as i2v

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
    "image_encoder": {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"},
}
"""The keys a tiny form may change: widths and depths (RoPE's axes split the head size; the
transformer's channels and text widths follow the tiny VAE's and encoders')."""
FORMS = {  # family: (its architecture file, its tiny shapes, the keys its tiny form also changes)
    "t2v": (t2v.published, HUNYUAN_VIDEO15_SHAPES["tiny"], {}),
    "i2v": (i2v.published, i2v.HUNYUAN_VIDEO15_I2V_SHAPES["tiny"], {"transformer": {"target_size"}}),
}


def _sizes(value) -> list[int]:
    if isinstance(value, dict):  # rope_scaling: the mrope sections split the head size
        return [s for key in sorted(value) for s in _sizes(value[key]) if key == "mrope_section"]
    return list(value) if isinstance(value, list) else [value]


@pytest.mark.parametrize(
    ("form", "component"),
    [
        (form, name)
        for form, (file, _, _) in FORMS.items()
        for name in sorted(WIDTH_AND_DEPTH)
        if name in file()["components"]
    ],
)
def test_the_tiny_form_is_the_published_config_shrunk(form, component):
    file, shapes, resolution = FORMS[form]
    real = file()["components"][component]["config"]
    tiny = shapes[component]
    overrides = i2v.TINY_IMAGE_ENCODER if component == "image_encoder" else TINY_OVERRIDES[component]
    assert set(overrides) <= WIDTH_AND_DEPTH[component]
    for key, value in real.items():
        if key in WIDTH_AND_DEPTH[component] | resolution.get(component, set()):
            sizes, published_sizes = _sizes(tiny[key]), _sizes(value)
            assert len(sizes) == len(published_sizes) or key == "block_out_channels", key
            assert all(s <= p for s, p in zip(sizes, published_sizes)), (key, tiny[key], value)
        else:
            assert tiny[key] == value, key
    assert set(tiny) == set(real)


def test_the_i2v_checkpoint_is_the_t2v_one_plus_siglip():
    """The same transformer config but task_type (which its forward does not read), the same VAE,
    text encoders, scheduler and guider; SigLIP so400m-patch14-384's 729 tokens of 1152, the
    transformer's image_embed_dim; its processor resizes to 384x384 and maps to [-1, 1]."""
    t2v_body, i2v_body = t2v.published(), i2v.published()
    assert set(i2v_body["components"]) == set(t2v_body["components"]) | {"image_encoder"}
    for name, entry in t2v_body["components"].items():
        config = dict(i2v_body["components"][name]["config"])
        if name == "transformer":
            assert config.pop("task_type") == "i2v"
            config["task_type"] = entry["config"]["task_type"]
        assert config == entry["config"], name
    assert {k: v for k, v in i2v_body["pipeline"].items() if k != "feature_extractor"} == dict(
        t2v_body["pipeline"], **{"class": "HunyuanVideo15ImageToVideoPipeline"}
    )
    vision = i2v_body["components"]["image_encoder"]["config"]
    assert (vision["image_size"] // vision["patch_size"]) ** 2 == 729
    assert vision["hidden_size"] == i2v_body["components"]["transformer"]["config"]["image_embed_dim"] == 1152
    processor = i2v_body["pipeline"]["feature_extractor"]["config"]
    assert processor["size"] == {"height": 384, "width": 384} and processor["image_mean"] == processor["image_std"]
    tiny = i2v.HUNYUAN_VIDEO15_I2V_SHAPES["tiny"]
    assert tiny["image_encoder"]["hidden_size"] == tiny["transformer"]["image_embed_dim"]
    assert tiny["feature_extractor"] == processor
    assert i2v.TINY_TARGET_SIZE % tiny["vae"]["spatial_compression_ratio"] == 0


def test_the_i2v_calibration_is_the_t2v_measurement():
    """The same blocks (above) give the same activation bytes per token: the I2V family ships
    the text-to-video family's measurement, labelled as such (benchmarks/calibrate_memory.py's
    SAME_BLOCKS writes it so)."""
    from genalign.models.spec import CALIBRATION_KEYS, family_spec

    ours, theirs = family_spec("hunyuan_video15_i2v").calibration(), family_spec("hunyuan_video15").calibration()
    numbers = [key for key in CALIBRATION_KEYS if key != "measured_on"]
    assert {key: ours[key] for key in numbers} == {key: theirs[key] for key in numbers}
    assert (
        ours["measured_on"]
        == f"hunyuan_video15_i2v: hunyuan_video15's measurement, the same blocks ({theirs['measured_on']})"
    )


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
