"""GenEval's class names against the detector's real COCO label set, the prompt manifests the
recipes ship, the checks before a run starts, and the detector's input and post-processing
against GenEval's published mmdet config and OpenCV."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from genalign.data.prompts import PACKAGED_DATASETS, load_manifest
from genalign.rewards.geneval import (
    DETECTOR_SYNONYMS,
    MAX_PER_IMAGE,
    MMDET_TEST_SCALE,
    OBJECT_NAMES_FILE,
    PAD_LEVEL,
    SIZE_DIVISOR,
    GenEvalOptions,
    detector_input,
    detector_input_size,
    detector_names,
    geneval_classes,
)

ROOT = Path(__file__).resolve().parents[3]
COCO_LABELS = (
    (ROOT / "tests" / "fixtures" / "upstream" / "open-mmlab--mmdetection" / "coco_classes.txt").read_text().splitlines()
)
"""The Mask2Former COCO instance checkpoints' label set, in class order (tests/fixtures/README.md)."""
SHIPPED_MANIFESTS = [PACKAGED_DATASETS / "geneval" / name for name in ("train.jsonl", "test.jsonl")]


def test_object_names_is_genevals_file():
    """GenEval's evaluation/object_names.txt (djghosh13/geneval af4902f), unchanged."""
    digest = hashlib.sha256(OBJECT_NAMES_FILE.read_bytes()).hexdigest()
    assert digest == "608f6a0e5c8ca1c7a92b818430141fe268c85b7930b50f4160f1d65893b5bacd"
    assert len(geneval_classes()) == len(set(geneval_classes())) == 80


def test_synonyms_name_the_detector_label_of_the_same_class_index():
    """GenEval reads the detector's class i as line i of object_names.txt; the table must give,
    for every class, the checkpoint's label at the same index, and hold only the names that differ."""
    assert len(COCO_LABELS) == 80
    assert [DETECTOR_SYNONYMS.get(name, name) for name in geneval_classes()] == COCO_LABELS
    assert set(DETECTOR_SYNONYMS) == {name for name, label in zip(geneval_classes(), COCO_LABELS) if name != label}
    names = detector_names(dict(enumerate(COCO_LABELS)), "test")
    assert (
        names["mouse"] == "computer mouse"
        and names["remote"] == "tv remote"
        and names["keyboard"] == "computer keyboard"
        and names["dog"] == "dog"
        and len(names) == 80
    )


@pytest.mark.parametrize("manifest", SHIPPED_MANIFESTS, ids=lambda p: p.name)
def test_every_class_of_the_shipped_manifests_is_a_detector_label(manifest):
    labels = set(COCO_LABELS)
    synonym_rows = 0
    for example in load_manifest(str(manifest)):
        clauses = example.metadata["include"] + example.metadata.get("exclude", [])
        assert all(DETECTOR_SYNONYMS.get(c["class"], c["class"]) in labels for c in clauses), example.source
        synonym_rows += any(c["class"] in DETECTOR_SYNONYMS for c in clauses)
    assert synonym_rows > 0  # the rows that stopped the step before the table existed are in the set
    assert GenEvalOptions().manifest_problems(load_manifest(str(manifest))) == []


def test_a_detector_without_a_geneval_class_fails_when_the_reward_is_built():
    labels = dict(enumerate(label for label in COCO_LABELS if label != "remote"))
    with pytest.raises(ValueError, match=r"reward.kwargs.geneval.detector_name='x'.*\['tv remote'\].*\['remote'\]"):
        detector_names(labels, "reward.kwargs.geneval.detector_name='x'")


def test_rows_the_reward_cannot_score_are_named_by_file_and_line(tmp_path):
    manifest = tmp_path / "prompts.jsonl"
    rows = [
        {"tag": "single_object", "include": [{"class": "computer mouse", "count": 1}], "prompt": "a mouse"},
        {"tag": "single_object", "include": [{"class": "mouse", "count": 1}], "prompt": "a mouse"},
        {"prompt": "no metadata"},
    ]
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    problems = GenEvalOptions().manifest_problems(load_manifest(str(manifest)))
    assert len(problems) == 2
    assert (
        problems[0].startswith(f"{manifest}:2: ") and "'mouse'" in problems[0] and "GenEval's 80 classes" in problems[0]
    )  # the detector's spelling is not a GenEval class: the manifest must use GenEval's
    assert problems[1].startswith(f"{manifest}:3: ") and "no GenEval metadata" in problems[1]


def test_preflight_refuses_a_manifest_the_geneval_reward_cannot_score(tmp_path):
    from genalign.preflight.files import reward_manifest_problems
    from genalign.preflight.load import load_config

    recipe = "experiment/diffusion/sd3_5/online_grpo_geneval"
    assert reward_manifest_problems(load_config(recipe, [], check_files=False), ("manifest", "eval_manifest")) == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"tag": "single_object", "include": [{"class": "unicorn", "count": 1}], "prompt": "a unicorn"})
        + "\n"
    )
    cfg = load_config(recipe, [f"data.eval_manifest={bad}"], check_files=False)
    problems = reward_manifest_problems(cfg, ("manifest", "eval_manifest"))
    # the training reward and the gold reward both score the eval manifest; data.manifest is fine
    assert [p.split(" cannot")[0] for p in problems] == [
        "reward.components.geneval",
        "eval.gold_rewards.geneval_accuracy",
    ]
    assert all(f"data.eval_manifest: {bad}:1: " in p and "unicorn" in p for p in problems)


def detector_test_pipeline() -> dict[str, dict]:
    """The transforms of GenEval's detector config (mmdet 2.28.2, tests/fixtures/README.md) that
    `inference_detector` runs, by type, in order."""
    from published import GENEVAL_DETECTOR, mmdet_config

    load, multiscale = mmdet_config(GENEVAL_DETECTOR)["data"]["test"]["pipeline"]
    assert load["type"] == "LoadImageFromFile" and multiscale["type"] == "MultiScaleFlipAug"
    assert tuple(multiscale["img_scale"]) == MMDET_TEST_SCALE and multiscale["flip"] is False
    return {step["type"]: step for step in multiscale["transforms"]}


def test_the_detector_is_genevals_published_config():
    """What geneval.py implements of GenEval's mmdet config: the test pipeline (keep-ratio resize
    into 1333 x 800, pad to 32 with 128 before normalising with ImageNet's mean/std), the 100
    instances kept per image, the 80 COCO thing classes in the label set's order."""
    from published import GENEVAL_DETECTOR, mmdet_config
    from transformers import Mask2FormerImageProcessor

    steps = detector_test_pipeline()
    assert list(steps) == ["Resize", "RandomFlip", "Pad", "Normalize", "ImageToTensor", "Collect"]
    assert steps["Resize"]["keep_ratio"] is True
    assert steps["Pad"]["size_divisor"] == SIZE_DIVISOR and steps["Pad"]["pad_val"]["img"] == (PAD_LEVEL,) * 3
    # genalign reads mean/std from the checkpoint's preprocessor_config.json, which transformers'
    # converter writes with its Mask2Former processor's (ImageNet's) values: mmdet's x 255
    processor = Mask2FormerImageProcessor()
    normalize = steps["Normalize"]
    np.testing.assert_allclose(normalize["mean"], np.array(processor.image_mean) * 255, rtol=1e-12)
    np.testing.assert_allclose(normalize["std"], np.array(processor.image_std) * 255, rtol=1e-12)
    assert normalize["to_rgb"] is True  # mmcv reads files as BGR: the network sees RGB, as genalign feeds it
    model = mmdet_config(GENEVAL_DETECTOR)["model"]
    assert model["test_cfg"]["instance_on"] and not model["test_cfg"]["panoptic_on"]
    assert model["test_cfg"]["max_per_image"] == MAX_PER_IMAGE
    head = model["panoptic_head"]
    assert head["num_things_classes"] == len(COCO_LABELS) == len(geneval_classes()) and head["num_stuff_classes"] == 0
    assert head["num_queries"] == 100
    assert model["backbone"]["type"] == "SwinTransformer" and model["backbone"]["depths"] == [2, 2, 18, 2]  # Swin-S


@pytest.mark.parametrize("height, width", [(48, 48), (30, 52), (52, 30)])
def test_detector_input_is_the_mmdet_pipeline_within_opencv_rounding(height, width):
    """The config's test pipeline: mmcv.imrescale into (1333, 800) (cv2.INTER_LINEAR on uint8),
    Pad to a multiple of 32 with its pad level, Normalize. OpenCV's bilinear weights are 11-bit
    fixed point: its uint8 result is within one level of the exact bilinear value rounded."""
    import cv2

    steps = detector_test_pipeline()
    mean_255 = torch.tensor(steps["Normalize"]["mean"]).view(3, 1, 1)
    std_255 = torch.tensor(steps["Normalize"]["std"]).view(3, 1, 1)
    images = torch.randint(0, 256, (1, 3, height, width), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    pixels, resized = detector_input(images, tuple(mean_255.flatten() / 255), tuple(std_255.flatten() / 255))
    assert resized == detector_input_size(height, width)
    divisor = steps["Pad"]["size_divisor"]
    assert pixels.shape[-2] % divisor == 0 and pixels.shape[-1] % divisor == 0
    assert pixels.shape[-2] - resized[0] < divisor and pixels.shape[-1] - resized[1] < divisor
    expected = cv2.resize(images[0].permute(1, 2, 0).numpy(), (resized[1], resized[0]), interpolation=cv2.INTER_LINEAR)
    levels = pixels[0] * std_255 + mean_255  # back to pixel levels
    difference = (levels[:, : resized[0], : resized[1]] - torch.from_numpy(expected).permute(2, 0, 1).float()).abs()
    assert difference.max() <= 1.0 + 1e-3  # one level plus float32 normalisation round-off
    pad_level = torch.tensor(steps["Pad"]["pad_val"]["img"], dtype=torch.float32).view(3, 1, 1)
    # padded in pixel levels before normalising: (pad - mean) / std, to float32 round-off
    torch.testing.assert_close(
        levels[:, resized[0] :, :], pad_level.expand_as(levels[:, resized[0] :, :]), atol=1e-3, rtol=0
    )
    torch.testing.assert_close(
        levels[:, :, resized[1] :], pad_level.expand_as(levels[:, :, resized[1] :]), atol=1e-3, rtol=0
    )
    assert np.isfinite(pixels.numpy()).all()
