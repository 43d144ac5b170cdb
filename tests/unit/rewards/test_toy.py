"""Toy rewards: classifier plumbing (probability of the prompted shape), options, the colour
rule, and the shipped classifiers' accuracy and independence on fresh renders."""

import numpy as np
import pytest
import torch

from genalign.data import toy_shapes as ts
from genalign.rewards.registry import REWARDS
from genalign.rewards.toy import ToyColorAreaReward, ToyShapeJudgeReward, ToyShapeReward
from genalign.rewards.toy_classifier import ShapeClassifier, save_classifier


@pytest.fixture
def biased_classifier_dir(tmp_path):
    """A classifier whose logits ignore the image: [0, log 2, log 3, log 4] -> P = [1, 2, 3, 4] / 10."""
    model = ShapeClassifier(width=4, num_classes=4)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.head.bias.copy_(torch.log(torch.tensor([1.0, 2.0, 3.0, 4.0])))
    save_classifier(model, tmp_path, "toy_shape", {"note": "test"})
    return tmp_path


def test_registered_names_resolve_to_the_classes():
    assert REWARDS.resolve("toy_shape") is ToyShapeReward
    assert REWARDS.resolve("toy_shape_judge") is ToyShapeJudgeReward
    assert REWARDS.resolve("toy_color_area") is ToyColorAreaReward


def test_shape_reward_is_probability_of_the_prompted_shape(biased_classifier_dir):
    reward = ToyShapeReward(path=str(biased_classifier_dir))
    images = torch.zeros(4, 3, 16, 16, dtype=torch.uint8)
    prompts = ["a red circle", "a blue square", "a green triangle", "a purple cross"]
    scores = reward.score(images, prompts, [])
    assert scores.dtype == torch.float32
    torch.testing.assert_close(scores, torch.tensor([0.1, 0.2, 0.3, 0.4]))
    accuracy = ToyShapeReward(path=str(biased_classifier_dir), score="accuracy").score(images, prompts, [])
    assert accuracy.tolist() == [0.0, 0.0, 0.0, 1.0]  # argmax is always "cross"


def test_options_are_checked(biased_classifier_dir, tmp_path):
    with pytest.raises(TypeError, match=r"reward.kwargs.toy_shape.scor \(did you mean 'score'\?\)"):
        ToyShapeReward(path=str(biased_classifier_dir), scor="accuracy")
    with pytest.raises(ValueError, match="reward.kwargs.toy_shape.score='logit'"):
        ToyShapeReward(path=str(biased_classifier_dir), score="logit")
    with pytest.raises(FileNotFoundError, match="toy_shape_judge"):
        ToyShapeJudgeReward(path=str(tmp_path / "missing"))


def test_bad_prompts_and_images_are_errors(biased_classifier_dir):
    reward = ToyShapeReward(path=str(biased_classifier_dir))
    images = torch.zeros(1, 3, 16, 16, dtype=torch.uint8)
    with pytest.raises(ValueError, match="hexagon"):
        reward.score(images, ["a red hexagon"], [])
    with pytest.raises(ValueError, match="empty prompt"):
        reward.score(images, [""], [])
    with pytest.raises(ValueError, match=r"uint8 \[B, 3, 16, 16\]"):
        reward.score(torch.zeros(1, 3, 32, 32, dtype=torch.uint8), ["a red circle"], [])


def test_color_area_counts_pixels_near_the_prompted_colour():
    images = torch.full((2, 3, 16, 16), 128, dtype=torch.uint8)  # grey background
    red = torch.tensor(ts.COLORS["red"], dtype=torch.uint8)[:, None, None]
    images[0, :, :4, :] = red  # 64 of 256 pixels exactly red
    images[1] = red  # all red, but prompted blue
    scores = ToyColorAreaReward().score(images, ["a red circle", "a blue circle"], [])
    torch.testing.assert_close(scores, torch.tensor([0.25, 0.0]))
    full = ToyColorAreaReward().score(images[1:], ["a red square"], [])
    assert full.item() == 1.0
    # orange is ~104 from red: outside the default 60, inside a loose 120
    assert ToyColorAreaReward(max_distance=120.0).score(images[1:], ["an orange cross"], []).item() == 1.0


def test_shipped_classifiers_are_accurate_and_agree_on_clean_renders():
    images, shapes, _ = ts.random_batch(256, np.random.default_rng(2024))
    prompts = [f"a red {ts.SHAPES[s]}" for s in shapes.tolist()]  # colour is ignored by the classifiers
    reward = ToyShapeReward(score="accuracy").score(images, prompts, [])
    judge = ToyShapeJudgeReward(score="accuracy").score(images, prompts, [])
    assert reward.mean() >= 0.97 and judge.mean() >= 0.97
    # probabilities of the wrong shape are low for both
    wrong = [f"a red {ts.SHAPES[(s + 1) % 4]}" for s in shapes.tolist()]
    assert ToyShapeReward().score(images, wrong, []).mean() < 0.05
    assert ToyShapeJudgeReward().score(images, wrong, []).mean() < 0.05


def test_judge_gives_non_shapes_little_shape_probability():
    """Noise, painted canvases and stripes (what a hacked policy draws) are "none" to the judge."""
    from genalign.rewards.toy_classifier import non_shapes

    images = non_shapes(64, np.random.default_rng(5))
    for shape in ts.SHAPES:
        prompts = [f"a red {shape}"] * 64
        assert ToyShapeJudgeReward().score(images, prompts, []).mean() < 0.1
