"""Rewards of the toy shapes world (the CPU demo): two shape classifiers and a colour rule.

Where it fits: scored by the reward runtime on decoded 32x32 rollout images (uint8
[B, 3, 32, 32]) with their prompts ("a red circle").

- `toy_shape`        P(prompted shape) under the reward classifier, in [0, 1]: the training reward.
- `toy_shape_judge`  the same under an independently trained classifier (other seed, width and
                     augmentations): the eval-only "gold" second opinion. A gain that only the
                     training classifier sees is reward hacking, not better shapes.
- `toy_color_area`   fraction of pixels within `max_distance` (RGB) of the prompted colour, in
                     [0, 1]: a rule reward that is easy to game by painting the whole canvas —
                     the demo of the gold monitor firing (recipe `color_area_hacking`).
- `toy_off_shape_fraction`, `toy_background_deviation`, `toy_shape_area`, `toy_patch_pattern`:
                     the image-quality guard (`data.toy_shapes.canvas_quality`; lower is cleaner for the first two),
                     logged by the evaluator via `eval.quality_metrics`, never part of a reward
                     total there.

Options (`reward.kwargs.<name>`): `path` ("builtin" = genalign/assets/toy, or a directory written
by `genalign pretrain-demo --what classifiers --out DIR`) and `score` ("probability" or
"accuracy" = 1 when the argmax is the prompted shape) for the classifiers; `max_distance` for
the colour rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import torch

from genalign.data.toy_shapes import IMAGE_SIZE, canvas_quality, color_distance, parse_prompt
from genalign.rewards.model_sizes import DeviceModel
from genalign.rewards.options import parse_options
from genalign.rewards.toy_classifier import builtin_classifier_dir, load_classifier

ToyScore = Literal["probability", "accuracy"]
SCORE_KINDS = get_args(ToyScore)


@dataclass
class ToyShapeOptions:
    path: str = "builtin"
    """Directory holding <name>.safetensors + <name>.json; "builtin" = the shipped classifiers."""
    score: ToyScore = "probability"
    """"probability": P(prompted shape); "accuracy": 1.0 when the argmax is the prompted shape."""

    def device_models(self, reward: str) -> tuple[DeviceModel, ...]:
        """Models on the scorer's device (the memory plan counts them): the classifier named after the reward."""
        directory = builtin_classifier_dir() if self.path == "builtin" else Path(self.path)
        return (DeviceModel("path", str(directory / f"{reward}.safetensors"), "float32"),)


@dataclass
class ToyColorAreaOptions:
    max_distance: float = 60.0
    """A pixel counts when its RGB distance to the prompted colour is below this (the palette's
    closest pair is ~87 apart, the grey background >= 100 from every colour)."""

    def device_models(self, reward: str) -> tuple[()]:
        """Models on the scorer's device (the memory plan counts them): none, a rule."""
        return ()


@dataclass
class NoOptions:
    """The image-quality measures take no options."""

    def device_models(self, reward: str) -> tuple[()]:
        """Models on the scorer's device (the memory plan counts them): none, rules."""
        return ()


def prompt_labels(prompts: list[str], reward: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(shape indices long [B], colour indices long [B]); an empty or unknown prompt is an error."""
    parsed = [parse_prompt(p) for p in prompts]
    empty = [i for i, p in enumerate(parsed) if p.shape is None]
    if empty:
        raise ValueError(
            f"reward {reward!r}: sample {empty[0]} has an empty prompt; toy rewards need 'a <colour> <shape>'"
        )
    return (
        torch.tensor([p.shape_index for p in parsed], dtype=torch.long),
        torch.tensor([p.color_index for p in parsed], dtype=torch.long),
    )


def check_toy_images(images: torch.Tensor, reward: str) -> None:
    if images.dtype != torch.uint8 or images.ndim != 4 or tuple(images.shape[1:]) != (3, IMAGE_SIZE, IMAGE_SIZE):
        raise ValueError(
            f"reward {reward!r} scores uint8 [B, 3, {IMAGE_SIZE}, {IMAGE_SIZE}] toy images; got {images.dtype} "
            f"{tuple(images.shape)}"
        )


class ToyShapeReward:
    """P(prompted shape) under the reward classifier (see the module docstring)."""

    name = "toy_shape"
    classifier_name = "toy_shape"
    differentiable = True

    def __init__(self, device: str = "cpu", **kwargs: Any):
        self.options = parse_options(self.name, ToyShapeOptions, kwargs)
        if self.options.score not in SCORE_KINDS:
            raise ValueError(f"reward.kwargs.{self.name}.score={self.options.score!r}: choose one of {SCORE_KINDS}")
        directory = builtin_classifier_dir() if self.options.path == "builtin" else Path(self.options.path)
        self.device = torch.device(device)
        self.classifier = load_classifier(directory, self.classifier_name, self.device)

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        check_toy_images(images, self.name)
        shapes, _ = prompt_labels(prompts, self.name)  # [B]
        probabilities = self.classifier.probabilities(images)  # [B, 4]
        if self.options.score == "accuracy":
            return (probabilities.argmax(dim=-1) == shapes).float()  # [B]
        return probabilities.gather(1, shapes[:, None]).squeeze(1)  # [B]

    def score_pixels(self, pixels: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        """P(prompted shape) of float pixels [B, 3, 32, 32] in [0, 1], differentiable in them
        (the classifier sees 2·p − 1, what `to_unit_range` makes of uint8). "accuracy" (an
        argmax) has no gradient: it is refused here rather than trained on as zeros."""
        if self.options.score != "probability":
            raise ValueError(
                f"reward.kwargs.{self.name}.score={self.options.score!r} has no gradient; reward feedback "
                "needs score=probability"
            )
        if pixels.ndim != 4 or tuple(pixels.shape[1:]) != (3, IMAGE_SIZE, IMAGE_SIZE):
            raise ValueError(
                f"reward {self.name!r} scores [B, 3, {IMAGE_SIZE}, {IMAGE_SIZE}] pixels, got {tuple(pixels.shape)}"
            )
        shapes, _ = prompt_labels(prompts, self.name)  # [B]
        device = self.classifier.head.weight.device
        logits = self.classifier(pixels.to(device, self.classifier.head.weight.dtype) * 2 - 1)  # [B, C]
        return logits.softmax(dim=-1).gather(1, shapes.to(device)[:, None]).squeeze(1)  # [B]

    def offload(self) -> None:
        self.classifier.to("cpu")

    def onload(self) -> None:
        self.classifier.to(self.device)


class ToyShapeJudgeReward(ToyShapeReward):
    """The independent judge classifier: the gold reward of the toy recipes."""

    name = "toy_shape_judge"
    classifier_name = "toy_shape_judge"


class RuleScorer:
    """A rule (no model): nothing to move between devices."""


class ToyColorAreaReward(RuleScorer):
    """Fraction of pixels painted in the prompted colour (a deliberately hackable rule)."""

    name = "toy_color_area"

    def __init__(self, device: str = "cpu", **kwargs: Any):
        self.options = parse_options(self.name, ToyColorAreaOptions, kwargs)
        self.device = device

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        check_toy_images(images, self.name)
        _, colors = prompt_labels(prompts, self.name)  # [B]
        close = color_distance(images, colors) < self.options.max_distance  # [B, H, W]
        return close.float().mean(dim=(1, 2))  # [B]


class ToyCanvasQuality(RuleScorer):
    """One measure of `canvas_quality` (the image-quality guard) as a scorer; `measure` names it."""

    name = "toy_canvas_quality"
    measure = ""

    def __init__(self, device: str = "cpu", **kwargs: Any):
        parse_options(self.name, NoOptions, kwargs)
        self.device = device

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        check_toy_images(images, self.name)
        _, colors = prompt_labels(prompts, self.name)  # [B]
        return canvas_quality(images, colors)[self.measure]  # [B]


class ToyOffShapeFraction(ToyCanvasQuality):
    name = "toy_off_shape_fraction"
    measure = "off_shape_fraction"


class ToyBackgroundDeviation(ToyCanvasQuality):
    name = "toy_background_deviation"
    measure = "background_deviation"


class ToyShapeArea(ToyCanvasQuality):
    name = "toy_shape_area"
    measure = "shape_area"


class ToyPatchPattern(ToyCanvasQuality):
    name = "toy_patch_pattern"
    measure = "patch_pattern"
