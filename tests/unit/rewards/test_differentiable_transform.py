"""`ImageTransform.differentiable`: the scorers' preprocessing that reward feedback
back-propagates through, against the uint8 path on the published preprocessor configs
(tests/fixtures/hub: laion CLIP-ViT-H-14 for PickScore, OpenAI CLIP ViT-L/14 for CLIPScore and
the aesthetic head), HPSv2's letterbox and ImageReward's transform.

Bound for a "pil" transform: Pillow resamples in two passes and rounds each to uint8 (≤ ½ level
each); the second pass's bicubic weights (a = −0.5, L1 norm below 1.3 for these scales) carry
the first rounding, so the two paths differ by at most (½·1.3 + ½) = 1.15 levels before
normalising, plus Pillow's 22-bit weight rounding (2⁻²² of the 255 range: negligible) —
on a smooth image whose resampling never over- or undershoots [0, 255] (no clamp). A "tensor"
transform runs the same torch code on both paths: they agree to float32 rounding.
"""

import math
from pathlib import Path

import pytest
import torch

from genalign.rewards.hps import hps_transform
from genalign.rewards.image_reward import image_reward_transform
from genalign.rewards.image_transform import OPENAI_CLIP_STD, ImageTransform

HUB = Path(__file__).resolve().parents[2] / "fixtures" / "hub"
PUBLISHED = ["laion--CLIP-ViT-H-14-laion2B-s32B-b79K", "openai--clip-vit-large-patch14"]
SIZES = [(512, 512), (480, 832), (37, 53)]
PIL_BOUND = 1.15 / 255 / min(OPENAI_CLIP_STD)
"""1.15 uint8 levels in normalised units (see the module docstring)."""


def smooth(height: int, width: int, seed: int = 0) -> torch.Tensor:
    """uint8 [2, 3, H, W]: a few low-frequency waves in 40..215, so no resampling leaves 0..255."""
    generator = torch.Generator().manual_seed(seed)
    ys = torch.linspace(0, 1, height).view(1, 1, height, 1)
    xs = torch.linspace(0, 1, width).view(1, 1, 1, width)
    field = torch.zeros(2, 3, height, width)
    for _ in range(3):
        fy, fx, phase = (torch.rand(3, generator=generator) * torch.tensor([3.0, 3.0, 6.28])).tolist()
        field = field + torch.rand(2, 3, 1, 1, generator=generator) * torch.sin(
            2 * math.pi * (fy * ys + fx * xs) + phase
        )
    field = field / field.abs().amax(dim=(2, 3), keepdim=True).clamp(min=1e-6)  # [-1, 1]
    return (127.5 + 87.5 * field).round().to(torch.uint8)


@pytest.mark.parametrize("repo", PUBLISHED)
@pytest.mark.parametrize("height, width", SIZES)
def test_published_processor_differentiable_path_is_the_pil_path_within_its_rounding(repo, height, width):
    transform = ImageTransform.from_pretrained(str(HUB / repo), reward="pickscore", key="processor_name")
    images = smooth(height, width)
    exact = transform(images)
    pixels = (images.float() / 255).requires_grad_()
    ours = transform.differentiable(pixels)
    assert ours.shape == exact.shape == (2, 3, 224, 224)
    assert (ours.detach() - exact).abs().max() <= PIL_BOUND
    (gradient,) = torch.autograd.grad(ours.sum(), pixels)
    assert torch.isfinite(gradient).all() and gradient.abs().sum() > 0


@pytest.mark.parametrize("height, width", SIZES)
def test_tensor_transforms_agree_to_float_rounding(height, width):
    """HPSv2's letterbox resamples floats in torch on both paths."""
    transform = hps_transform(224)
    images = smooth(height, width, seed=1)
    exact = transform(images)
    ours = transform.differentiable(images.float() / 255)
    torch.testing.assert_close(ours, exact, rtol=0, atol=1e-5)  # |values| <= 4: a few float32 ulps


def test_image_reward_crop_rounding_is_kept():
    transform = image_reward_transform(224)
    images = smooth(227, 300, seed=2)
    assert (transform.differentiable(images.float() / 255) - transform(images)).abs().max() <= PIL_BOUND


def test_gradient_of_the_differentiable_transform_matches_finite_differences():
    transform = ImageTransform.from_pretrained(str(HUB / PUBLISHED[0]), reward="pickscore", key="processor_name")
    pixels = (smooth(9, 12).double() / 255)[:1].requires_grad_()  # upscaled to 224 x 298, cropped
    torch.autograd.gradcheck(lambda p: transform.differentiable(p).sum(dim=(2, 3)), (pixels,), eps=1e-6, atol=1e-6)
