"""The model families' architecture files and big-shape builders against the published configs
found in stored copies (tests/fixtures/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

from genalign.models.architecture import shipped_file
from genalign.models.spec import family_spec

HUB = Path(__file__).resolve().parents[2] / "fixtures" / "hub"


def published(repo: str, path: str) -> dict:
    """A published config without diffusers' bookkeeping keys."""
    config = json.loads((HUB / repo / path).read_text())
    return {k: v for k, v in config.items() if not k.startswith("_")}


def test_sd3_5_medium_transformer_is_the_published_config():
    real = published("stabilityai--stable-diffusion-3.5-medium", "transformer/config.json")
    shipped = json.loads(shipped_file(family_spec("sd3"), "stabilityai/stable-diffusion-3.5-medium").read_text())
    # what the memory plan builds on meta, and what the GPU benchmarks build (models/real_shapes.py)
    assert shipped["components"]["transformer"]["config"] == real


def test_every_shipped_autoencoder_kl_states_its_latent_scaling():
    """The decode maps latents back with `latents / scaling_factor + shift_factor` (SD3, FLUX), so
    an architecture file without them builds a VAE with AutoencoderKL's defaults (SD 1's 0.18215
    and no shift): a random-weight GPU run stopped on the missing shift, and a wrong scale would
    have passed silently. The published values, as the VAE config.json of each repository states
    them (SD3.5's on the stabilityai repositories, FLUX.1's on black-forest-labs'; seen in stored
    copies of those files and of diffusers' own conversion code)."""
    published_scaling = {
        "stabilityai/stable-diffusion-3.5-medium": (1.5305, 0.0609),
        "stabilityai/stable-diffusion-3.5-large": (1.5305, 0.0609),
        "black-forest-labs/FLUX.1-dev": (0.3611, 0.1159),
        # FLUX.1 Kontext-dev ships FLUX.1-dev's VAE; its architecture file is FLUX.1-dev's configs
        # (its own config.json is not in the stored copies: the file's "source" says so)
        "black-forest-labs/FLUX.1-Kontext-dev": (0.3611, 0.1159),
        # both Z-Image checkpoints ship FLUX.1's VAE (their vae/config.json as public ports quote it:
        # zhutao100/Z-Image.swift at 81d9bbe, its reference notes z-image.md and z-image-turbo.md)
        "Tongyi-MAI/Z-Image": (0.3611, 0.1159),
        "Tongyi-MAI/Z-Image-Turbo": (0.3611, 0.1159),
    }
    found = {}
    import genalign.models

    for path in sorted(Path(genalign.models.__file__).parent.glob("*/architectures/*.json")):
        for component in json.loads(path.read_text()).get("components", {}).values():
            if component.get("class") == "AutoencoderKL":
                config = component["config"]
                found[path.stem.replace("--", "/")] = (config.get("scaling_factor"), config.get("shift_factor"))
    assert found == published_scaling
