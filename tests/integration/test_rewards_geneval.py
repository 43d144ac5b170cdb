"""The geneval reward on a tiny random Mask2Former of GenEval's published detector config (mmdet's
Swin-S Mask2Former shrunk in width and depth) with the real COCO label set
(the checkpoints' id2label: "mouse", "remote", "keyboard", ...) and a tiny random CLIP built from
the published ViT-L/14 architecture with CLIP's real tokenizer, saved with save_pretrained and
loaded back through the scorer's real loading code."""

from __future__ import annotations

import json

import pytest
import torch
from published import TINY_DETECTOR_QUERIES

from genalign.rewards.geneval import (
    COLOR_TEMPLATES,
    COLORS,
    Detection,
    GenEvalAccuracyReward,
    GenEvalReward,
    geneval_classes,
)
from genalign.rewards.jpeg import jpeg_round_trip


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from published import save_tiny_clip, tiny_geneval_detector
    from transformers import Mask2FormerImageProcessorPil

    root = tmp_path_factory.mktemp("geneval")
    detector = tiny_geneval_detector(seed=0)
    detector.save_pretrained(root / "detector")
    mouse = tiny_geneval_detector(seed=0)  # the same detector, biased to say "mouse"
    with torch.no_grad():
        mouse.class_predictor.bias[mouse.config.label2id["mouse"]] += 30.0
    mouse.save_pretrained(root / "mouse_detector")
    Mask2FormerImageProcessorPil().save_pretrained(root / "mouse_detector")  # mean/std: the scorer reads only those
    Mask2FormerImageProcessorPil(size={"shortest_edge": 64, "longest_edge": 128}).save_pretrained(root / "detector")
    clip = str(save_tiny_clip(root / "clip"))
    return {"detector_name": str(root / "detector"), "clip_name": clip, "mouse": str(root / "mouse_detector")}


def scorer(models, **options):
    return GenEvalReward(detector_name=models["detector_name"], clip_name=models["clip_name"], **options)


@pytest.fixture(scope="module")
def images():
    generator = torch.Generator().manual_seed(3)
    return torch.randint(0, 256, (3, 3, 48, 40), generator=generator, dtype=torch.uint8)


META = [
    {"tag": "single_object", "include": [{"class": "dog", "count": 1}]},
    {"tag": "counting", "include": [{"class": "cup", "count": 2}], "exclude": [{"class": "cup", "count": 3}]},
    {
        "tag": "color_attr",
        "include": [{"class": "dog", "count": 1, "color": "red"}, {"class": "cup", "count": 1, "color": "blue"}],
    },
]


def test_detections_come_from_the_detector_and_scores_follow_them(models, images):
    # the raw pixels (no JPEG round trip), so the detections below are the ones the score reads
    reward = scorer(models, threshold=0.0, counting_threshold=0.0, jpeg_quality=None)
    raw = reward.detect(images)
    assert len(raw) == 3 and all(set(found) <= set(geneval_classes()) for found in raw)
    for found in raw:
        for dets in found.values():
            for d in dets:
                x0, y0, x1, y1 = d.box
                assert d.mask.shape == (48, 40) and d.mask.any() and 0 <= x0 < x1 <= 40 and 0 <= y0 < y1 <= 48
                assert 0 <= d.score <= 1
    scores = reward.score(
        images, ["a photo of a dog", "a photo of two cups", "a photo of a red dog and a blue cup"], META
    )
    assert scores.shape == (3,) and scores.dtype == torch.float32
    # single object with every detection kept: the partial credit is 1 - |1 - n_dogs| / 1
    dogs = len(raw[0].get("dog", []))
    assert scores[0].item() == pytest.approx(1 - abs(1 - dogs))
    strict = scorer(models, score="strict", threshold=0.0, counting_threshold=0.0, jpeg_quality=None)
    assert strict.score(images[:1], ["a photo of a dog"], META[:1]).item() == float(dogs == 1)


def test_scores_are_of_the_jpeg_round_trip_by_default(models, images, monkeypatch):
    """Flow-GRPO's client JPEG-encodes at Pillow's default quality (75) before its server scores;
    jpeg_quality=None hands the detector the raw pixels."""
    seen = []
    for options, expected in (({}, jpeg_round_trip(images, 75)), ({"jpeg_quality": None}, images)):
        reward = scorer(models, **options)
        detect = reward.detect
        monkeypatch.setattr(reward, "detect", lambda batch, detect=detect: seen.append(batch) or detect(batch))
        reward.score(images, ["a photo of a dog"] * 3, [META[0]] * 3)
        assert torch.equal(seen[-1], expected)
    assert scorer(models).options.jpeg_quality == 75
    with pytest.raises(ValueError, match="reward.kwargs.geneval.jpeg_quality=0"):
        scorer(models, jpeg_quality=0)


def test_detector_channels_flow_grpo_swap_by_default_rgb_for_genevals_benchmark(models, images):
    """Flow-GRPO's reward server hands mmdet RGB arrays, which mmdet reads as BGR and swaps: its
    detector sees red and blue exchanged (the default, "flow_grpo_swap"); GenEval reads PNG files
    and its detector sees the true colours ("rgb"). Only the detector's input differs."""
    assert scorer(models).options.detector_channels == "flow_grpo_swap"
    swapped = scorer(models, threshold=0.0, jpeg_quality=None)
    rgb = scorer(models, threshold=0.0, jpeg_quality=None, detector_channels="rgb")
    boxes = lambda found: {name: [(d.box, d.score) for d in dets] for name, dets in found.items()}  # noqa: E731
    assert [boxes(f) for f in swapped.detect(images)] == [boxes(f) for f in rgb.detect(images.flip(1))]
    assert [boxes(f) for f in swapped.detect(images)] != [boxes(f) for f in rgb.detect(images)]
    with pytest.raises(ValueError, match="detector_channels='bgr'"):
        scorer(models, detector_channels="bgr")


def test_the_detectors_mouse_is_genevals_computer_mouse(models, images):
    """The checkpoints' label "mouse" is GenEval's "computer mouse": a prompt naming it is scored
    (it used to stop the step), its detections found under GenEval's name."""
    reward = GenEvalReward(detector_name=models["mouse"], clip_name=models["clip_name"], threshold=0.0)
    for found in reward.detect(images):
        assert "mouse" not in found and set(found) <= set(geneval_classes())
        best = max(found, key=lambda name: max(d.score for d in found[name]))
        assert best == "computer mouse"
    row = {"tag": "single_object", "include": [{"class": "computer mouse", "count": 1}]}
    score = reward.score(images[:1], ["a photo of a computer mouse"], [row])
    detected = len(reward.detect(jpeg_round_trip(images[:1]))[0]["computer mouse"])  # every query says mouse
    found = min(detected, reward.options.max_objects)  # every one above threshold 0, at most 16 per class
    assert detected == TINY_DETECTOR_QUERIES and found == 16
    assert score.shape == (1,) and score.item() == 1 - abs(1 - found)  # the reference's count credit


def test_colour_is_zero_shot_clip_over_the_masked_crop(models, images):
    reward = scorer(models)
    # open_clip's `openai` preprocessing: Pillow's bicubic, the crop offset rounded as torchvision does
    transform = reward.clip.transform
    assert (transform.shortest_edge, transform.crop_hw, transform.crop_rounding, transform.resampler) == (
        224,
        (224, 224),
        "round",
        "pil",
    )
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
    accuracy = GenEvalAccuracyReward(detector_name=models["detector_name"], clip_name=models["clip_name"])
    assert accuracy.options.score == "accuracy" and accuracy.name == "geneval_accuracy"
    with pytest.raises(ValueError, match="always scores 'accuracy'"):
        GenEvalAccuracyReward(score="reward", detector_name=models["detector_name"], clip_name=models["clip_name"])
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
