"""The published files under tests/fixtures/ are the bytes found (tests/fixtures/README.md says
where), and they say what the scorers assume of the real models."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FOUND = {
    "hub/openai--clip-vit-large-patch14/preprocessor_config.json":
        "910e70b3956ac9879ebc90b22fb3bc8a75b6a0677814500101a4c072bd7857bd",
    "hub/laion--CLIP-ViT-H-14-laion2B-s32B-b79K/preprocessor_config.json":
        "910e70b3956ac9879ebc90b22fb3bc8a75b6a0677814500101a4c072bd7857bd",
    "hub/laion--CLIP-ViT-H-14-laion2B-s32B-b79K/tokenizer_config.json":
        "cbcdcf14cede6b5c3a6841f37961364357d82bef3079beb115e95f27252526a0",
    "hub/stabilityai--stable-diffusion-3.5-medium/transformer/config.json":
        "b6ea8128277df286573ce1937c36ce42a5a84e976331091ffccb1d05893dc299",
    "upstream/mlfoundations--open_clip/ViT-L-14.json":
        "171cfafd089dfcdcec7df80b6628582e6e78937932799bf748b32503d6a5fa8b",
    "upstream/open-mmlab--mmdetection/coco_classes.txt":
        "bd17f1ee35d5f3c862a4894605855abbb9dda4b0621fdb0ac4c2c8c7bb7e730a",
}
"""Each fixture's sha256 when it was copied from its stored source."""


@pytest.mark.parametrize("name", sorted(FOUND))
def test_fixture_is_the_file_found(name):
    assert hashlib.sha256((FIXTURES / name).read_bytes()).hexdigest() == FOUND[name]


def test_every_fixture_is_recorded_and_described():
    files = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.is_file() and p.name != "README.md"}
    assert files == set(FOUND)
    readme = (FIXTURES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in FOUND)


def test_the_published_configs_say_what_the_scorers_assume():
    clip_l = json.loads((FIXTURES / "upstream" / "mlfoundations--open_clip" / "ViT-L-14.json").read_text())
    assert clip_l["vision_cfg"]["image_size"] == 224 and clip_l["text_cfg"]["context_length"] == 77
    assert clip_l["text_cfg"]["vocab_size"] == 49408  # CLIP's BPE: 256 bytes x 2 + 48894 merges + 2 specials
    for repo in ("openai--clip-vit-large-patch14", "laion--CLIP-ViT-H-14-laion2B-s32B-b79K"):
        processor = json.loads((FIXTURES / "hub" / repo / "preprocessor_config.json").read_text())
        assert (processor["size"], processor["crop_size"], processor["resample"]) == (224, 224, 3)  # PIL bicubic
    tokenizer = json.loads((FIXTURES / "hub" / "laion--CLIP-ViT-H-14-laion2B-s32B-b79K" / "tokenizer_config.json"
                            ).read_text())
    assert tokenizer["do_lower_case"] and tokenizer["eos_token"]["content"] == tokenizer["pad_token"] == "<|endoftext|>"
