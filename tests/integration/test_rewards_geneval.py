"""The geneval reward on a tiny random Mask2Former and a tiny random CLIP, built from configs,
saved with save_pretrained and loaded back through the scorer's real loading code."""

from __future__ import annotations

import json

import pytest
import torch

from genalign.rewards.geneval import COLOR_TEMPLATES, COLORS, Detection, GenEvalAccuracyReward, GenEvalReward

CLASSES = ["person", "dog", "cup", "stop sign"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from transformers import (Mask2FormerConfig, Mask2FormerForUniversalSegmentation, Mask2FormerImageProcessorPil,
                              SwinConfig)

    from support import save_tiny_clip

    root = tmp_path_factory.mktemp("geneval")
    backbone = SwinConfig(image_size=64, patch_size=4, embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 1, 2, 2],
                          window_size=4, out_features=["stage1", "stage2", "stage3", "stage4"])
    config = Mask2FormerConfig(backbone_config=backbone, feature_size=32, mask_feature_size=32, hidden_dim=32,
                               encoder_feedforward_dim=64, dim_feedforward=64, encoder_layers=1, decoder_layers=2,
                               num_attention_heads=2, num_queries=12, num_labels=len(CLASSES),
                               id2label=dict(enumerate(CLASSES)), label2id={c: i for i, c in enumerate(CLASSES)})
    torch.manual_seed(0)
    Mask2FormerForUniversalSegmentation(config).save_pretrained(root / "detector")
    Mask2FormerImageProcessorPil(size={"shortest_edge": 64, "longest_edge": 128}).save_pretrained(root / "detector")
    return {"detector_name": str(root / "detector"), "clip_name": str(save_tiny_clip(root / "clip"))}


@pytest.fixture(scope="module")
def images():
    generator = torch.Generator().manual_seed(3)
    return torch.randint(0, 256, (3, 3, 48, 40), generator=generator, dtype=torch.uint8)


META = [
    {"tag": "single_object", "include": [{"class": "dog", "count": 1}]},
    {"tag": "counting", "include": [{"class": "cup", "count": 2}], "exclude": [{"class": "cup", "count": 3}]},
    {"tag": "color_attr", "include": [{"class": "dog", "count": 1, "color": "red"},
                                      {"class": "cup", "count": 1, "color": "blue"}]},
]


def test_detections_come_from_the_detector_and_scores_follow_them(models, images):
    reward = GenEvalReward(threshold=0.0, counting_threshold=0.0, **models)
    raw = reward.detect(images)
    assert len(raw) == 3 and all(set(found) <= set(CLASSES) for found in raw)
    for found in raw:
        for dets in found.values():
            for d in dets:
                x0, y0, x1, y1 = d.box
                assert d.mask.shape == (48, 40) and d.mask.any() and 0 <= x0 < x1 <= 40 and 0 <= y0 < y1 <= 48
                assert 0 <= d.score <= 1
    scores = reward.score(images, ["a photo of a dog", "a photo of two cups", "a photo of a red dog and a blue cup"],
                          META)
    assert scores.shape == (3,) and scores.dtype == torch.float32
    # single object with every detection kept: the partial credit is 1 - |1 - n_dogs| / 1
    dogs = len(raw[0].get("dog", []))
    assert scores[0].item() == pytest.approx(1 - abs(1 - dogs))
    strict = GenEvalReward(score="strict", threshold=0.0, counting_threshold=0.0, **models)
    assert strict.score(images[:1], ["a photo of a dog"], META[:1]).item() == float(dogs == 1)


def test_colour_is_zero_shot_clip_over_the_masked_crop(models, images):
    reward = GenEvalReward(**models)
    mask = torch.zeros(48, 40, dtype=torch.bool)
    mask[10:30, 5:25] = True
    detection = Detection((5.0, 10.0, 25.0, 30.0), 0.9, mask)
    got = reward.colors_of(images[0], "dog", [detection])
    # by hand: the crop of the masked image, and per colour the mean of the normalised template embeddings
    crop = images[0][None, :, 10:30, 5:25]
    image_embed = reward.clip.image_embeds(crop)[0]
    best, best_name = None, None
    for color in COLORS:
        texts = [t.format(c=color, object="dog") for t in COLOR_TEMPLATES]
        text = torch.nn.functional.normalize(reward.clip.text_embeds(texts).mean(0), dim=-1)
        value = float(image_embed @ text)
        if best is None or value > best:
            best, best_name = value, color
    assert got == [best_name]


def test_accuracy_variant_and_missing_metadata_and_weights(models, images, tmp_path):
    accuracy = GenEvalAccuracyReward(**models)
    assert accuracy.options.score == "accuracy" and accuracy.name == "geneval_accuracy"
    with pytest.raises(ValueError, match="always scores 'accuracy'"):
        GenEvalAccuracyReward(score="reward", **models)
    with pytest.raises(ValueError, match=r"sample 0 \(prompt 'a dog'\) has no GenEval metadata"):
        accuracy.score(images[:1], ["a dog"], [{}])
    missing = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"reward.kwargs.geneval.detector_name="):
        GenEvalReward(detector_name=missing, clip_name=models["clip_name"])


def test_shipped_prompt_set_loads_with_its_metadata():
    from genalign.data.prompts import PACKAGED_DATASETS, load_manifest

    root = PACKAGED_DATASETS / "geneval"
    for split in ("train.jsonl", "test.jsonl"):
        rows = [json.loads(line) for line in (root / split).read_text().splitlines()]
        examples = load_manifest(str(root / split))
        assert len(examples) == len(rows) > 0
        assert examples[0].metadata == {k: v for k, v in rows[0].items() if k != "prompt"}
