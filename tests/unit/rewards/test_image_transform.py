"""Every scorer's preprocessing against a transcription of its reference, on square and
non-square images: Pillow's resampling (what transformers' PIL processors, ImageReward and
open_clip run on PIL images), transformers' CLIP processor on the published
preprocessor_config.json, HPSv2's letterbox and ImageReward's torchvision transform."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from genalign.rewards.hps import hps_transform
from genalign.rewards.image_reward import image_reward_transform
from genalign.rewards.image_transform import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImageTransform, pil_resize

HUB = Path(__file__).resolve().parents[2] / "fixtures" / "hub"
SIZES = [(512, 512), (480, 832), (832, 480), (224, 227), (37, 53)]
"""Square, Wan's 480p both ways, an odd crop offset (floor and round differ), a small upscale."""
ONE_LEVEL = 1 / 255 / min(OPENAI_CLIP_STD)
"""One uint8 level in normalised units (0.0146): what a resampling difference costs."""
FLOAT_NORMALISE = 8 * torch.finfo(torch.float32).eps * (1 / min(OPENAI_CLIP_STD))
"""Two float32 normalisations of the same uint8 value ((x / 255 - m) / s in different orders)
agree to a few ulps of |values| <= 1 / s = 3.8: 8 ulps bound it."""


def noise(height: int, width: int, seed: int = 0) -> torch.Tensor:
    """uint8 [2, 3, H, W]: pixel noise, the worst case for resampling."""
    return torch.randint(
        0, 256, (2, 3, height, width), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8
    )


def pil(image: torch.Tensor) -> Image.Image:
    return Image.fromarray(image.permute(1, 2, 0).numpy())


def to_tensor(image: Image.Image) -> torch.Tensor:
    """torchvision's ToTensor on an RGB PIL image."""
    return torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1).float().div(255)


def normalize(pixels: torch.Tensor) -> torch.Tensor:
    """torchvision's Normalize with CLIP's mean/std."""
    mean = torch.tensor(OPENAI_CLIP_MEAN).view(3, 1, 1)
    std = torch.tensor(OPENAI_CLIP_STD).view(3, 1, 1)
    return (pixels - mean) / std


@pytest.mark.parametrize(
    "in_hw, out_hw",
    [
        ((512, 512), (224, 224)),
        ((480, 832), (224, 388)),
        ((832, 480), (388, 224)),
        ((48, 40), (32, 26)),
        ((37, 53), (224, 320)),
        ((64, 64), (800, 800)),
        ((100, 50), (100, 26)),
        ((100, 50), (32, 50)),
    ],
)
@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_pil_resampler_is_pillow_byte_for_byte(in_hw, out_hw, mode):
    """The resizes the scorers make (the aspect kept, or one axis): Pillow's bytes exactly."""
    resample = {"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR}[mode]
    images = noise(*in_hw)
    expected = torch.stack(
        [to_tensor(pil(image).resize(out_hw[::-1], resample)).mul(255).round().to(torch.uint8) for image in images]
    )
    assert torch.equal(pil_resize(images, out_hw, mode), expected)


def pillow10_resize(channel: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Transcription of Pillow 10's Resample.c for one uint8 channel, bicubic (the Pillow the
    references pin: Flow-GRPO 10.4, GenEval 9.4): coefficients per output pixel, 22-bit
    fixed point, the horizontal pass first into a uint8 image, then the vertical pass."""

    def bicubic(x):
        x = abs(x)
        return ((1.5 * x - 2.5) * x * x + 1) if x < 1 else ((((x - 5) * x + 8) * x - 4) * -0.5 if x < 2 else 0.0)

    def coefficients(in_size, out_size):
        scale = in_size / out_size
        filterscale = max(scale, 1.0)
        support, inverse = 2.0 * filterscale, 1.0 / filterscale
        result = []
        for out in range(out_size):
            center = (out + 0.5) * scale
            xmin = max(int(center - support + 0.5), 0)
            xmax = min(int(center + support + 0.5), in_size) - xmin
            weights = [bicubic((x + xmin - center + 0.5) * inverse) for x in range(xmax)]
            total = sum(weights)
            fixed = [int(w / total * (1 << 22) + (0.5 if w >= 0 else -0.5)) for w in weights]
            result.append((xmin, fixed))
        return result

    def clip8(value):
        return min(max(value >> 22, 0), 255)

    rows, cols = channel.shape
    horizontal = np.zeros((rows, out_w), dtype=np.int64)
    for y in range(rows):
        for x, (xmin, fixed) in enumerate(coefficients(cols, out_w)):
            horizontal[y, x] = clip8((1 << 21) + sum(int(channel[y, xmin + i]) * k for i, k in enumerate(fixed)))
    out = np.zeros((out_h, out_w), dtype=np.uint8)
    for y, (ymin, fixed) in enumerate(coefficients(rows, out_h)):
        for x in range(out_w):
            out[y, x] = clip8((1 << 21) + sum(int(horizontal[ymin + i, x]) * k for i, k in enumerate(fixed)))
    return out


def test_pil_resampler_is_pillow_10_when_both_axes_shrink_unequally():
    """Pillow 13 (PR #9549) resizes vertically first when the height shrinks much more than the
    width, which moves pixels by a level or two; the references' Pillow 10 always goes
    horizontal first, and so does this resampler."""
    images = noise(100, 50)[:1]
    expected = np.stack([pillow10_resize(channel.numpy(), 32, 26) for channel in images[0]])
    assert np.array_equal(pil_resize(images, (32, 26), "bicubic")[0].numpy(), expected)


@pytest.mark.parametrize("repo", ["openai--clip-vit-large-patch14", "laion--CLIP-ViT-H-14-laion2B-s32B-b79K"])
@pytest.mark.parametrize("height, width", SIZES)
def test_clip_processor_path_equals_transformers_on_the_published_config(repo, height, width):
    """PickScore, clip_score, aesthetic: transformers' CLIPImageProcessor (the PIL path Flow-GRPO's
    pinned transformers 4.40 runs) on the published preprocessor_config.json."""
    from transformers import CLIPImageProcessorPil

    processor = CLIPImageProcessorPil.from_pretrained(HUB / repo)
    transform = ImageTransform.from_pretrained(str(HUB / repo), reward="pickscore", key="processor_name")
    assert (transform.shortest_edge, transform.crop_hw, transform.mode, transform.resampler) == (
        224,
        (224, 224),
        "bicubic",
        "pil",
    )
    images = noise(height, width)
    expected = processor([image.permute(1, 2, 0).numpy() for image in images], return_tensors="pt")["pixel_values"]
    actual = transform(images)
    assert actual.shape == expected.shape == (2, 3, 224, 224)
    torch.testing.assert_close(actual, expected, atol=FLOAT_NORMALISE, rtol=0)


def hpsv2_preprocess(image: Image.Image, image_size: int = 224) -> torch.Tensor:
    """Transcription of HPSv2's evaluation transform (tgxs002/HPSv2 commit 866735e,
    hpsv2/src/open_clip/transform.py: image_transform(is_train=False, resize_longest_max=True)):
    ToTensor, ResizeMaxSize on the tensor (torchvision's tensor resize: interpolate, bicubic,
    antialias, no clamp), F.pad with [left, top, right, bottom], Normalize."""
    tensor = to_tensor(image)
    height, width = tensor.shape[1:]
    scale = image_size / float(max(height, width))
    if scale != 1.0:
        new_size = tuple(round(dim * scale) for dim in (height, width))
        tensor = F.interpolate(tensor[None], size=new_size, mode="bicubic", align_corners=False, antialias=True)[0]
        pad_h, pad_w = image_size - new_size[0], image_size - new_size[1]
        tensor = F.pad(tensor, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2), value=0)
    return normalize(tensor)


@pytest.mark.parametrize("height, width", SIZES)
def test_hps_letterbox_equals_hpsv2(height, width):
    images = noise(height, width)
    expected = torch.stack([hpsv2_preprocess(pil(image)) for image in images])
    actual = hps_transform(224)(images)
    assert actual.shape == expected.shape == (2, 3, 224, 224)
    torch.testing.assert_close(actual, expected, atol=FLOAT_NORMALISE, rtol=0)
    if height != width:  # the letterbox keeps the whole image: black bands, not a crop
        black = normalize(torch.zeros(3, 1, 1))
        band = actual[..., :1, :] if width > height else actual[..., :, :1]
        torch.testing.assert_close(band, black.expand_as(band[0]).expand_as(band), atol=FLOAT_NORMALISE, rtol=0)


def test_hps_letterbox_is_not_the_processors_crop_on_wan_frames():
    """The issue's case: at 480 x 832 the shortest-side crop genalign used differs from HPSv2 by
    whole normalised units (the letterboxed frame's bands and its whole width)."""
    images = noise(480, 832)
    crop = ImageTransform.from_pretrained(
        str(HUB / "laion--CLIP-ViT-H-14-laion2B-s32B-b79K"), reward="hpsv21", key="base_model"
    )(images)
    assert (crop - hps_transform(224)(images)).abs().max() > 1.0


def imagereward_preprocess(image: Image.Image, n_px: int = 224) -> torch.Tensor:
    """Transcription of ImageReward's `_transform(n_px)` (THUDM/ImageReward commit c1392c6) on a
    PIL image: torchvision Resize(n_px, BICUBIC) (Pillow, the long side truncated), CenterCrop
    (offsets int(round((H - h) / 2))), RGB, ToTensor, Normalize."""
    width, height = image.size
    short, long = min(width, height), max(width, height)
    new_long = int(n_px * long / short)
    size = (n_px, new_long) if width <= height else (new_long, n_px)  # (w, h)
    image = image.resize(size, Image.BICUBIC)
    top = int(round((image.size[1] - n_px) / 2.0))
    left = int(round((image.size[0] - n_px) / 2.0))
    image = image.crop((left, top, left + n_px, top + n_px))
    return normalize(to_tensor(image))


@pytest.mark.parametrize("height, width", SIZES)
def test_image_reward_transform_equals_imagereward(height, width):
    images = noise(height, width)
    expected = torch.stack([imagereward_preprocess(pil(image)) for image in images])
    actual = image_reward_transform(224)(images)
    torch.testing.assert_close(actual, expected, atol=FLOAT_NORMALISE, rtol=0)


def test_crop_rounding_is_the_references_where_floor_and_round_differ():
    """224 x 227: the crop offset is 1.5; transformers floors it (1), torchvision rounds it to even (2)."""
    images = noise(224, 227)
    floor = ImageTransform(OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, shortest_edge=224, crop_hw=(224, 224))(images)
    rounded = image_reward_transform(224)(images)
    torch.testing.assert_close(floor, normalize(images.float() / 255)[..., 1:225], atol=FLOAT_NORMALISE, rtol=0)
    torch.testing.assert_close(rounded, normalize(images.float() / 255)[..., 2:226], atol=FLOAT_NORMALISE, rtol=0)
    assert (floor - rounded).abs().max() > ONE_LEVEL


def test_transform_needs_exactly_one_geometry():
    with pytest.raises(ValueError, match="exactly one of"):
        ImageTransform(OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, shortest_edge=224, longest_edge=224)
    with pytest.raises(ValueError, match="resampler"):
        ImageTransform(OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, shortest_edge=224, resampler="cv2")
