"""The image-to-video Wan architecture files as the memory plan reads them: Wan 2.1 I2V (480P and
720P alike) is one transformer with 36 input channels and CLIP image cross-attention plus the
CLIP ViT-H/14 image encoder; Wan 2.2 I2V-A14B is two experts of the same 36-channel transformer
without image cross-attention and no image encoder; Wan 2.2 TI2V-5B's image-to-video is the
text-to-video family's file (one 48-channel transformer). The recipes' plans are the figures the docs
give (docs/models.md, docs/memory_plan.md)."""

from __future__ import annotations

import json

import pytest

from genalign.models.architecture import build_on_meta, load_architecture
from genalign.models.spec import family_spec
from genalign.preflight.load import load_config
from genalign.preflight.memory_plan import estimate_memory

GIB = 2**30
SPEC = family_spec("wan_i2v")


@pytest.mark.parametrize("path", ["Wan-AI/Wan2.1-I2V-14B-480P-Diffusers", "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers"])
def test_wan_2_1_i2v_is_one_image_conditioned_transformer_and_clip(path):
    arch = load_architecture(SPEC, path)
    assert arch.denoisers == ("transformer",) and (arch.hidden_size, arch.num_layers) == (5120, 40)
    names = {c.name for c in arch.components}
    assert names == {"transformer", "text_encoder", "vae", "image_encoder"}
    # CLIP ViT-H/14's vision tower: 32 blocks of 1280 (about 0.63 B parameters with its projection)
    assert 0.6e9 < arch.component("image_encoder").parameters < 0.66e9
    # the image tokens' own keys and values in every block's cross-attention
    assert sum(name.endswith("attn2.add_k_proj") for name, _, _ in arch.linear_shapes) == 40


def test_wan_2_2_i2v_a14b_is_two_experts_without_an_image_encoder():
    arch = load_architecture(SPEC, "Wan-AI/Wan2.2-I2V-A14B-Diffusers")
    assert arch.denoisers == ("transformer", "transformer_2")
    assert arch.component("transformer").parameters == arch.component("transformer_2").parameters
    assert "image_encoder" not in {c.name for c in arch.components}
    assert not any(name.endswith("add_k_proj") for name, _, _ in arch.linear_shapes)


def test_every_file_reads_36_channels_latents_mask_and_first_frame_but_ti2v_its_48_latents():
    """Wan 2.1 / 2.2 I2V concatenate latents, mask and first frame on channels; TI2V-5B
    (expand_timesteps) puts the image's latent frame before the others, reading its VAE's 48."""
    for file in SPEC.architecture_files():
        body = json.loads(file.read_text())
        transformer = body["components"]["transformer"]
        expand = body["pipeline"]["config"].get("expand_timesteps", False)
        channels = 48 if expand else 16 + 4 + 16
        assert expand == ("TI2V" in file.name) and transformer["config"]["in_channels"] == channels, file.name
        built = build_on_meta(transformer["library"], transformer["class"], transformer["config"])
        assert built.patch_embedding.in_channels == channels


def test_flf2v_is_wan_2_1_i2v_with_two_frames_clip_tokens_side_by_side():
    """The FLF2V file (diffusers' conversion script's 'Wan-FLF2V-14B-720P'): Wan 2.1 I2V 14B's
    transformer plus a learned position over 2 x 257 CLIP tokens, so a prompt carries two images."""
    arch = load_architecture(SPEC, "Wan-AI/Wan2.1-FLF2V-14B-720P-Diffusers")
    i2v = load_architecture(SPEC, "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers")
    extra = arch.component("transformer").parameters - i2v.component("transformer").parameters
    assert extra == 514 * 1280  # the position embedding alone
    counts = {f.name: SPEC.sources_per_prompt(json.loads(f.read_text())["components"]["transformer"]["config"])
              for f in SPEC.architecture_files()}  # fmt: skip
    assert counts == {name: 2 if "FLF2V" in name else 1 for name in counts}


def test_ti2v_5b_is_the_text_to_video_familys_file_one_transformer_without_an_image_encoder():
    file = next(f for f in SPEC.architecture_files() if "TI2V" in f.name)
    assert file.resolve() == (family_spec("wan").folder / "architectures" / file.name).resolve()
    arch = load_architecture(SPEC, "Wan-AI/Wan2.2-TI2V-5B-Diffusers")
    assert arch.denoisers == ("transformer",) and (arch.hidden_size, arch.num_layers) == (3072, 30)
    assert {c.name for c in arch.components} == {"transformer", "text_encoder", "vae"}


@pytest.mark.parametrize(
    ("recipe", "peak_gib"),
    [
        ("experiment/diffusion/wan_2_2/i2v_a14b_online_grpo_pickscore", 84.3),
        ("experiment/diffusion/wan_2_1/i2v_14b_online_grpo_pickscore", 54.3),
        ("experiment/diffusion/wan_2_2/ti2v_5b_i2v_online_grpo_pickscore", 34.1),
        ("experiment/diffusion/wan_2_1/flf2v_14b_online_grpo_pickscore", 54.3),
    ],
)
def test_the_recipes_plan_what_the_docs_say(recipe, peak_gib):
    plan = estimate_memory(load_config(recipe, []))
    assert plan.roles[0].peak_bytes / GIB == pytest.approx(peak_gib, abs=0.05)
