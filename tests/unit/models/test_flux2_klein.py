"""FLUX.2 [klein]'s shipped architecture files against the nearest published source (the
black-forest-labs repositories are not among the stored copies: the files' "source" says so),
its tiny model against those configs (shrunk in width and depth only)."""

from __future__ import annotations

import json

import pytest

from genalign.models.architecture import shipped_file
from genalign.models.flux2_klein.tiny import TINY_DEPTH, TINY_WIDTH, published_configs, tiny_configs
from genalign.models.spec import family_spec

CONVERSION_SCRIPT = {
    "klein-4B": dict(num_layers=5, num_single_layers=20, num_attention_heads=24, joint_attention_dim=7680),
    "klein-9B": dict(num_layers=8, num_single_layers=24, num_attention_heads=32, joint_attention_dim=12288),
}
"""huggingface/diffusers scripts/convert_flux2_to_diffusers.py (commit 58eb52c), the keys by which
its klein-4b and klein-9b configs differ; every other key is the same in both."""
CONVERSION_COMMON = dict(
    patch_size=1,
    in_channels=128,
    attention_head_dim=128,
    timestep_guidance_channels=256,
    mlp_ratio=3.0,
    axes_dims_rope=[32, 32, 32, 32],
    rope_theta=2000,
    eps=1e-6,
    guidance_embeds=False,
)
FOLLOWS = {"transformer": {"in_channels", "joint_attention_dim"}, "text_encoder": {"vocab_size"}, "vae": set()}
"""Keys of the tiny configs set by what they follow (4 x latent channels, 3 x text width, the
tokenizer's vocabulary), not shrunk on their own."""


@pytest.mark.parametrize("size", ["4B", "9B"])
def test_the_transformer_is_diffusers_conversion_config(size):
    body = architecture(size)
    config = dict(body["components"]["transformer"]["config"])
    assert config.pop("out_channels") is None  # in_channels (diffusers' default)
    assert config == {**CONVERSION_COMMON, **CONVERSION_SCRIPT[f"klein-{size}"]}
    # three Qwen3 layers side by side make the transformer's text width
    assert config["joint_attention_dim"] == 3 * body["components"]["text_encoder"]["config"]["hidden_size"]


def test_the_vae_is_the_one_the_conversion_script_builds():
    """The conversion script builds FLUX.2's VAE as `AutoencoderKLFlux2()`: its defaults."""
    from diffusers import AutoencoderKLFlux2

    defaults = {k: v for k, v in AutoencoderKLFlux2().config.items() if not k.startswith("_")}
    for size in ("4B", "9B"):
        shipped = architecture(size)["components"]["vae"]["config"]
        assert {k: defaults[k] for k in shipped} == {k: _listed(v) for k, v in shipped.items()}


def architecture(size: str) -> dict:
    """The shipped architecture file of FLUX.2 [klein] `size` ("4B" or "9B")."""
    return json.loads(shipped_file(family_spec("flux2_klein"), f"black-forest-labs/FLUX.2-klein-{size}").read_text())


def _listed(value):
    return tuple(value) if isinstance(value, list) else value


def test_the_tiny_model_is_the_published_config_shrunk_in_width_and_depth_only():
    real, tiny = published_configs(), tiny_configs(vocab_size=400)
    for name in real:
        shrunk = set(TINY_WIDTH[name]) | set(TINY_DEPTH[name]) | FOLLOWS[name]
        assert set(tiny[name]) == set(real[name]), name
        assert {k: v for k, v in tiny[name].items() if k not in shrunk} == {
            k: v for k, v in real[name].items() if k not in shrunk
        }, name
        for key in set(TINY_DEPTH[name]) | (set(TINY_WIDTH[name]) - {"axes_dims_rope", "block_out_channels"}):
            assert tiny[name][key] <= real[name][key], (name, key)
    text, transformer = tiny["text_encoder"], tiny["transformer"]
    assert text["num_hidden_layers"] > 27  # the pipeline reads hidden states 9, 18 and 27
    real_text = real["text_encoder"]
    assert (
        text["num_attention_heads"] // text["num_key_value_heads"]
        == real_text["num_attention_heads"] // real_text["num_key_value_heads"]
    )
    assert sum(transformer["axes_dims_rope"]) == transformer["attention_head_dim"]  # RoPE spans a head, as real
    assert len(tiny["vae"]["block_out_channels"]) == len(real["vae"]["block_out_channels"])  # VAE factor 8 kept


@pytest.mark.parametrize("preset,fits,refused", [("klein_9b", 80, 48), ("klein_4b", 48, None)])
def test_the_recipe_fits_the_cards_its_comment_names(preset, fits, refused):
    """The recipe's "what it needs" (and docs/models.md's): 9B one 80 GB GPU (51.3 GiB peak), not
    a 48 GB one; 4B one 48 GB GPU (27.6 GiB)."""
    from genalign.preflight.load import load_config
    from genalign.preflight.memory_plan import estimate_memory

    def peak_gib(card_gib: int) -> float:
        cfg = load_config(
            "experiment/diffusion/flux2_klein/online_grpo_pickscore",
            [f"/model/diffusion/flux2_klein={preset}", f"distributed.resources.gpu_memory_gib={card_gib}"],
        )
        plan = estimate_memory(cfg)
        return max(role.peak_bytes for role in plan.roles) / 2**30

    assert peak_gib(fits) <= 0.9 * fits
    if refused is not None:
        assert peak_gib(refused) > 0.9 * refused
