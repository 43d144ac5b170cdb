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
    images = torch.zeros(4, 3, 32, 32, dtype=torch.uint8)
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
    images = torch.zeros(1, 3, 32, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match="hexagon"):
        reward.score(images, ["a red hexagon"], [])
    with pytest.raises(ValueError, match="empty prompt"):
        reward.score(images, [""], [])
    with pytest.raises(ValueError, match=r"uint8 \[B, 3, 32, 32\]"):
        reward.score(torch.zeros(1, 3, 16, 16, dtype=torch.uint8), ["a red circle"], [])


def test_color_area_counts_pixels_near_the_prompted_colour():
    images = torch.full((2, 3, 32, 32), 128, dtype=torch.uint8)  # grey background
    red = torch.tensor(ts.COLORS["red"], dtype=torch.uint8)[:, None, None]
    images[0, :, :8, :] = red  # 256 of 1024 pixels exactly red
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


@pytest.mark.parametrize("reward_cls", [ToyShapeReward, ToyShapeJudgeReward])
def test_classifiers_give_their_non_shapes_little_shape_probability(reward_cls):
    """Noise, painted canvases, blobs, dirty backgrounds (what a hacked policy draws) are "none"
    to both classifiers; the judge also knows stripes and checkerboards."""
    from genalign.rewards.toy_classifier import JUDGE_SPEC, REWARD_SPEC, non_shapes

    kinds = (REWARD_SPEC if reward_cls is ToyShapeReward else JUDGE_SPEC).reject_kinds
    images = non_shapes(64, np.random.default_rng(5), kinds)
    for shape in ts.SHAPES:
        prompts = [f"a red {shape}"] * 64
        assert reward_cls().score(images, prompts, []).mean() < 0.1


def test_non_shape_kinds():
    from genalign.rewards.toy_classifier import non_shapes

    rng = np.random.default_rng(0)
    empty = non_shapes(2, rng, ("empty",))
    assert empty.shape == (2, 3, 32, 32) and bool((empty == torch.tensor(ts.BACKGROUND)[:, None, None]).all())
    blobs = non_shapes(16, rng, ("blob",))
    painted = (blobs != torch.tensor(ts.BACKGROUND, dtype=torch.uint8)[:, None, None]).any(dim=1)  # [16, S, S]
    assert painted.float().mean(dim=(1, 2)).min() > 0.5  # bigger than any render's bounding box allows
    dirty = non_shapes(16, rng, ("dirty",))
    deviation = [
        ts.canvas_quality(dirty, torch.full((16,), c))["background_deviation"] for c in range(len(ts.COLOR_NAMES))
    ]
    assert torch.stack(deviation).min() > 15  # speckle std >= 15 per channel, whatever the prompted colour
    with pytest.raises(ValueError, match="unknown kinds"):
        non_shapes(1, rng, ("spiral",))


def test_quality_measures_are_registered_scorers():
    images, _, colours = ts.random_batch(8, np.random.default_rng(1))
    prompts = [f"a {ts.COLOR_NAMES[c]} circle" for c in colours.tolist()]
    expected = ts.canvas_quality(images, colours)
    for name, measure in (
        ("toy_off_shape_fraction", "off_shape_fraction"),
        ("toy_background_deviation", "background_deviation"),
        ("toy_shape_area", "shape_area"),
        ("toy_patch_pattern", "patch_pattern"),
    ):
        torch.testing.assert_close(REWARDS.resolve(name)().score(images, prompts, []), expected[measure])
    with pytest.raises(TypeError, match="reward.kwargs.toy_shape_area.tolerance"):
        REWARDS.resolve("toy_shape_area")(tolerance=3)


@pytest.mark.parametrize("cls", [ToyShapeReward, ToyShapeJudgeReward])
def test_differentiable_score_is_the_score_of_the_same_pixels(cls):
    """`score_pixels` of uint8/255 is `score` of the uint8 image (the classifier sees 2p − 1
    where `to_unit_range` computes u/127.5 − 1: equal to float32 rounding), and it has a gradient."""
    images, shapes, colours = ts.random_batch(6, np.random.default_rng(7))
    prompts = [f"a {ts.COLOR_NAMES[c]} {ts.SHAPES[s]}" for s, c in zip(shapes, colours)]
    reward = cls()
    pixels = (images.float() / 255).requires_grad_()
    scores = reward.score_pixels(pixels, prompts, [{}] * 6)
    torch.testing.assert_close(scores.detach(), reward.score(images, prompts, [{}] * 6), rtol=0, atol=1e-5)
    (gradient,) = torch.autograd.grad(scores.sum(), pixels)
    assert gradient.abs().sum() > 0


def test_accuracy_score_has_no_gradient_and_is_refused():
    reward = ToyShapeReward(score="accuracy")
    with pytest.raises(ValueError, match="score='accuracy' has no gradient"):
        reward.score_pixels(torch.rand(1, 3, 32, 32), ["a red circle"], [{}])
