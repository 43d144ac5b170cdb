"""The published files under tests/fixtures/ are the bytes found (tests/fixtures/README.md says
where), and they say what the scorers assume of the real models."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FOUND = {
    "hub/openai--clip-vit-large-patch14/preprocessor_config.json": "910e70b3956ac9879ebc90b22fb3bc8a75b6a0677814500101a4c072bd7857bd",
    "hub/laion--CLIP-ViT-H-14-laion2B-s32B-b79K/preprocessor_config.json": "910e70b3956ac9879ebc90b22fb3bc8a75b6a0677814500101a4c072bd7857bd",
    "hub/laion--CLIP-ViT-H-14-laion2B-s32B-b79K/tokenizer_config.json": "cbcdcf14cede6b5c3a6841f37961364357d82bef3079beb115e95f27252526a0",
    "hub/stabilityai--stable-diffusion-3.5-medium/transformer/config.json": "b6ea8128277df286573ce1937c36ce42a5a84e976331091ffccb1d05893dc299",
    "upstream/mlfoundations--open_clip/ViT-L-14.json": "171cfafd089dfcdcec7df80b6628582e6e78937932799bf748b32503d6a5fa8b",
    "upstream/open-mmlab--mmdetection/coco_classes.txt": "bd17f1ee35d5f3c862a4894605855abbb9dda4b0621fdb0ac4c2c8c7bb7e730a",
    # files inside published packages (each also matches its wheel's RECORD)
    "pypi/hpsv2-1.2.0/hpsv2-1.2.0.dist-info/LICENSE": "1eb85fc97224598dad1852b5d6483bbcf0aa8608790dcc657a5a2a761ae9c8c6",
    "pypi/hpsv2-1.2.0/hpsv2/src/open_clip/model_configs/ViT-H-14.json": "63f6653068b7b913ccf6c2043d8a1b1b8f043751e0714e5ce1f593e0977e9b09",
    "pypi/mmdet-2.28.2/mmdet-2.28.2.dist-info/LICENSE": "874b8b2e6f12306a1ff7812c068a0dbf880418b8ac1f7190382bd6c6da9f23a1",
    "pypi/mmdet-2.28.2/mmdet/.mim/configs/_base_/datasets/coco_panoptic.py": "3593f1e78cf0e1fea61db7b466276a8e5a98e8aeabc49442cc783a73b2fff6ad",
    "pypi/mmdet-2.28.2/mmdet/.mim/configs/_base_/default_runtime.py": "9a6abfe8d66001e7d5757ea543ebb04f989613cc669935dfc3ce1b404e1e7667",
    "pypi/mmdet-2.28.2/mmdet/.mim/configs/mask2former/mask2former_r50_lsj_8x2_50e_coco-panoptic.py": "113fca77d3a9ec8940f9d06e9144e83ca0c6e1d879dc604c7008d312581ee729",
    "pypi/mmdet-2.28.2/mmdet/.mim/configs/mask2former/mask2former_r50_lsj_8x2_50e_coco.py": "48fd0b34abbe6f0bff0c8243a5daa4e3a0c4de4648a838bb94c6a85a8ff3bb95",
    "pypi/mmdet-2.28.2/mmdet/.mim/configs/mask2former/mask2former_swin-s-p4-w7-224_lsj_8x2_50e_coco.py": "9074c4681870644756c0c5b813995bc06749844be8f24fb2eca3e494d5b9eadb",
    "pypi/mmdet-2.28.2/mmdet/.mim/configs/mask2former/mask2former_swin-t-p4-w7-224_lsj_8x2_50e_coco.py": "741352d9f904cabd61fdc58cf3742887de289f72791ec4c38c565d113695c301",
    "pypi/open_clip_torch-3.3.0/open_clip/bpe_simple_vocab_16e6.txt.gz": "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a",
    "pypi/open_clip_torch-3.3.0/open_clip_torch-3.3.0.dist-info/licenses/LICENSE": "4a5b4f13ea4792a8211a69f32d2b460b6d520e57cd23c6301e707c76a6e97a55",
    "pypi/rapidocr_onnxruntime-1.4.4/rapidocr_onnxruntime/config.yaml": "bf94a1da4cba828e67b1d61e27cee14d9e7da27c9f272e04048a17e41ae97332",
    "pypi/salesforce_lavis-1.0.2/lavis/configs/models/med_large_config.json": "5c6125f0ab23c0fd6ca8949812b924b6f4e5b40cc0265ae7b80fe320be4cba72",
    "pypi/salesforce_lavis-1.0.2/salesforce_lavis-1.0.2.dist-info/LICENSE.txt": "5aca00bff81e12a65992c7f2ecfece6ba7a923193c7a1d33a1b60f657e8cf11a",
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
    assert all(f"| {FOUND[name]} |" in readme for name in FOUND if name.startswith("pypi/"))


def test_the_published_configs_say_what_the_scorers_assume():
    clip_l = json.loads((FIXTURES / "upstream" / "mlfoundations--open_clip" / "ViT-L-14.json").read_text())
    assert clip_l["vision_cfg"]["image_size"] == 224 and clip_l["text_cfg"]["context_length"] == 77
    assert clip_l["text_cfg"]["vocab_size"] == 49408  # CLIP's BPE: 256 bytes x 2 + 48894 merges + 2 specials
    for repo in ("openai--clip-vit-large-patch14", "laion--CLIP-ViT-H-14-laion2B-s32B-b79K"):
        processor = json.loads((FIXTURES / "hub" / repo / "preprocessor_config.json").read_text())
        assert (processor["size"], processor["crop_size"], processor["resample"]) == (224, 224, 3)  # PIL bicubic
    tokenizer = json.loads(
        (FIXTURES / "hub" / "laion--CLIP-ViT-H-14-laion2B-s32B-b79K" / "tokenizer_config.json").read_text()
    )
    assert tokenizer["do_lower_case"] and tokenizer["eos_token"]["content"] == tokenizer["pad_token"] == "<|endoftext|>"


# CLIP's ids for reference sentences, as documented outside this repository (and what open_clip's
# own SimpleTokenizer in open_clip_torch 3.3.0 returns for them):
KNOWN_CLIP_IDS = {
    # elixir-nx/bumblebee test/bumblebee/text/clip_text_test.exs (commit 5a5a611), openai/clip-vit-base-patch32
    "a photo of a cat": [49406, 320, 1125, 539, 320, 2368, 49407],
    "a photo of a dog": [49406, 320, 1125, 539, 320, 1929, 49407],
    # punctuation is its own token; upper case and repeated spaces normalise
    "Hello, world!": [49406, 3306, 267, 1002, 256, 49407],
    "A PHOTO of  a Cat!": [49406, 320, 1125, 539, 320, 2368, 256, 49407],
    # the contraction splits and each digit is a token
    "don't stop 42 times": [49406, 847, 713, 1691, 275, 273, 1661, 49407],
}


def test_clip_tokenizer_from_the_published_bpe_is_clips():
    from published import OPEN_CLIP_VIT_H_14, OPEN_CLIP_VIT_L_14, clip_bpe, clip_tokenizer, read_json

    vocab, merges = clip_bpe()
    tokenizer = clip_tokenizer()
    for architecture in (OPEN_CLIP_VIT_L_14, OPEN_CLIP_VIT_H_14):
        text = read_json(architecture)["text_cfg"]
        assert len(vocab) == len(tokenizer) == text["vocab_size"] == 49408, architecture  # no duplicate token
        assert text["context_length"] == 77
    assert len(merges) == 48894 and merges[0] == "i n" and vocab["in"] == 512  # the first merge follows 2 x 256 bytes
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (49406, 49407, 49407)
    assert {text: tokenizer(text)["input_ids"] for text in KNOWN_CLIP_IDS} == KNOWN_CLIP_IDS
    # truncation at the context keeps the end-of-text token last, where the text tower pools
    ids = tokenizer(" ".join(["a photo of a cat"] * 20), truncation=True, max_length=77)["input_ids"]
    assert len(ids) == 77 and ids[0] == 49406 and ids[-1] == 49407
    assert tokenizer.decode(KNOWN_CLIP_IDS["a photo of a cat"], skip_special_tokens=True) == "a photo of a cat"
