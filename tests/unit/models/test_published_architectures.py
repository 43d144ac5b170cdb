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
