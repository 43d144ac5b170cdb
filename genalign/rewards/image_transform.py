"""Image preprocessing of the model-backed scorers, in torch on uint8 batches, as each reference computes it.

Where it fits: every model-backed scorer turns decoded rollout images (uint8 [B, 3, H, W]) into
model inputs here, at train and eval time alike, on the scorer's device. The references resize
in two different ways, and both are reproduced, not approximated:

- resampler "pil": Pillow's `Image.resize` of a uint8 image. This is what transformers' image
  processors of Flow-GRPO's pinned transformers 4.40 run (PickScore, aesthetic: the PIL path of
  `CLIPImageProcessor`) and what torchvision's transforms run on a PIL image (ImageReward's and
  open_clip's `Resize`, GenEval's colour classifier). Pillow (`src/libImaging/Resample.c`)
  resamples separably, horizontal pass first, with filter weights normalised per output pixel,
  rounded to 22-bit fixed point, and the sum rounded and clamped to uint8 after each pass. Here
  the same integer weights are applied as integer-valued float64 matrix products (exact: every
  partial sum is an integer far below 2^53), so the result is Pillow's bytes on any device.
  (Pillow 10, which the references pin (Flow-GRPO 10.4, GenEval 9.4), always resizes
  horizontally first; Pillow 13 goes vertically first when the height shrinks much more than
  the width, a level or two apart. The scorers keep the aspect, where the two agree.)
- resampler "tensor": `torch.nn.functional.interpolate` with antialias on float pixels in [0, 1],
  no clamping: torchvision's tensor path, which HPSv2 takes (it resizes after `ToTensor`).

Geometry: `shortest_edge` resizes the short side (the long side truncated, as transformers and
torchvision compute it) and centre-crops `crop_hw`, the crop offset floored (transformers'
`center_crop`) or rounded half to even (torchvision's `CenterCrop`: `int(round(...))`);
`longest_edge` letterboxes (HPSv2's `ResizeMaxSize`: the long side to N, the other `round()`ed,
padded to N x N with `pad_fill`, the odd pixel at the bottom/right); `resize_hw` resizes to a
fixed size. Numbers come from the model's `preprocessor_config.json` where it has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import torch
import torch.nn.functional as F

from genalign.rewards.pretrained import read_json_file

RESAMPLE_MODES = {2: "bilinear", 3: "bicubic"}
"""PIL resample ids used by CLIP-family processor configs -> filter names."""
RESAMPLERS = ("pil", "tensor")
CROP_ROUNDINGS = ("floor", "round")
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
"""CLIP's normalisation (open_clip `constants.py`), which open_clip, HPSv2 and ImageReward hard-code."""
PIL_PRECISION_BITS = 32 - 8 - 2
"""Pillow's fixed-point precision of 8-bit resampling weights (Resample.c PRECISION_BITS)."""


@dataclass(frozen=True)
class ImageTransform:
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    shortest_edge: int | None = None
    """Resize so the short side has this length (aspect kept, long side truncated)."""
    longest_edge: int | None = None
    """Letterbox: resize so the long side has this length, pad to longest_edge x longest_edge."""
    resize_hw: tuple[int, int] | None = None
    """Resize to exactly (height, width)."""
    crop_hw: tuple[int, int] | None = None
    """Centre crop (height, width) after resizing; None: no crop."""
    crop_rounding: str = "floor"
    """Crop offset: "floor" ((H - h) // 2, transformers) or "round" (int(round((H - h) / 2)), torchvision)."""
    mode: str = "bicubic"
    """Resampling filter: "bicubic" or "bilinear"."""
    resampler: str = "pil"
    """"pil" (Pillow's uint8 resampling, exactly) or "tensor" (torch interpolate, antialias, floats in [0, 1])."""
    pad_fill: float = 0.0
    """Letterbox fill in [0, 1] pixel units (before normalising): 0 is black, as HPSv2 pads."""

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.shortest_edge, self.longest_edge, self.resize_hw)) != 1:
            raise ValueError("ImageTransform: set exactly one of shortest_edge, longest_edge, resize_hw")
        if self.resampler not in RESAMPLERS or self.crop_rounding not in CROP_ROUNDINGS:
            raise ValueError(f"ImageTransform: resampler in {RESAMPLERS}, crop_rounding in {CROP_ROUNDINGS}")
        if self.mode not in PIL_FILTERS:
            raise ValueError(f"ImageTransform: mode {self.mode!r} is not one of {sorted(PIL_FILTERS)}")

    @classmethod
    def from_processor_config(cls, config: dict[str, Any]) -> "ImageTransform":
        """Read a CLIP-style `preprocessor_config.json` (size, crop_size, image_mean/std, resample):
        what transformers' `CLIPImageProcessor` computes with PIL."""
        size = config.get("size", 224)
        resize: dict[str, Any]
        if isinstance(size, int):
            resize = {"shortest_edge": size}
        elif "shortest_edge" in size:
            resize = {"shortest_edge": int(size["shortest_edge"])}
        else:
            resize = {"resize_hw": (int(size["height"]), int(size["width"]))}
        crop = config.get("crop_size", size if isinstance(size, int) else None)
        crop_hw = None
        if config.get("do_center_crop", True) and crop is not None:
            crop_hw = (crop, crop) if isinstance(crop, int) else (int(crop["height"]), int(crop["width"]))
        resample = config.get("resample", 3)
        if resample not in RESAMPLE_MODES:
            raise ValueError(
                f"preprocessor_config.json resample={resample} is not supported (supported PIL ids: {RESAMPLE_MODES})"
            )
        return cls(
            mean=tuple(config["image_mean"]),
            std=tuple(config["image_std"]),
            crop_hw=crop_hw,
            mode=RESAMPLE_MODES[resample],
            **resize,
        )

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, reward: str, key: str) -> "ImageTransform":
        return cls.from_processor_config(
            read_json_file(name_or_path, "preprocessor_config.json", reward=reward, key=key)
        )

    def output_hw(self, height: int, width: int) -> tuple[int, int]:
        """Size after resizing (before crop or pad)."""
        if self.resize_hw is not None:
            return self.resize_hw
        if self.shortest_edge is not None:  # transformers / torchvision: the long side truncated
            short, long = min(height, width), max(height, width)
            new_short, new_long = self.shortest_edge, int(self.shortest_edge * long / short)
            return (new_short, new_long) if height <= width else (new_long, new_short)
        scale = self.longest_edge / float(max(height, width))  # HPSv2's ResizeMaxSize: round() each side
        return round(height * scale), round(width * scale)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, 3, H, W] -> float32 [B, 3, h, w], normalised with the processor's mean/std."""
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected uint8 images [B, 3, H, W], got {images.dtype} {tuple(images.shape)}")
        out_hw = self.output_hw(*images.shape[-2:])
        if self.resampler == "pil":
            pixels = pil_resize(images, out_hw, self.mode).float() / 255.0  # [B, 3, h, w]
        else:
            pixels = images.float() / 255.0  # torchvision's ToTensor, then its tensor resize
            if tuple(pixels.shape[-2:]) != out_hw:
                pixels = F.interpolate(pixels, size=out_hw, mode=self.mode, align_corners=False, antialias=True)
        return self._crop_pad_normalise(pixels)

    def differentiable(self, pixels: torch.Tensor) -> torch.Tensor:
        """Float pixels [B, 3, H, W] in [0, 1] (carrying grad) -> [B, 3, h, w] normalised, every
        operation differentiable: the reward-feedback algorithms back-propagate through it.

        The same geometry, filter and normalisation as `__call__`, resized by torch's antialiased
        `interpolate` (its bicubic is Pillow's a = −0.5 kernel with the same support scaling)
        without the uint8 rounding and clamping Pillow applies after each pass: on a "pil"
        transform the two differ by those roundings (≤ 1/255 before normalising, plus Pillow's
        clamp of over- and undershoot at hard edges), on a "tensor" transform only by the uint8
        input. This is how the reward-feedback references preprocess (ImageReward's ReFL and
        AlignProp resize the decoder's float output with torchvision's tensor `Resize`)."""
        if not pixels.is_floating_point() or pixels.ndim != 4 or pixels.shape[1] != 3:
            raise ValueError(f"expected float pixels [B, 3, H, W] in [0, 1], got {pixels.dtype} {tuple(pixels.shape)}")
        out_hw = self.output_hw(*pixels.shape[-2:])
        if tuple(pixels.shape[-2:]) != out_hw:
            pixels = F.interpolate(pixels, size=out_hw, mode=self.mode, align_corners=False, antialias=True)
        return self._crop_pad_normalise(pixels)

    def _crop_pad_normalise(self, pixels: torch.Tensor) -> torch.Tensor:
        """Resized pixels [B, 3, H', W'] in [0, 1] -> cropped or padded, normalised [B, 3, h, w]."""
        if self.crop_hw is not None:
            pixels = center_crop(pixels, self.crop_hw, self.crop_rounding)  # [B, 3, h, w]
        if self.longest_edge is not None:
            pixels = pad_to_square(pixels, self.longest_edge, self.pad_fill)
        mean = pixels.new_tensor(self.mean).view(1, 3, 1, 1)
        std = pixels.new_tensor(self.std).view(1, 3, 1, 1)
        return (pixels - mean) / std  # [B, 3, h, w]


def center_crop(pixels: torch.Tensor, crop_hw: tuple[int, int], rounding: str = "floor") -> torch.Tensor:
    """[B, C, H, W] -> [B, C, h, w]; offset (H - h) // 2 ("floor", transformers) or
    int(round((H - h) / 2)) ("round", torchvision: Python rounds halves to even)."""
    height, width = pixels.shape[-2:]
    crop_h, crop_w = crop_hw
    if crop_h > height or crop_w > width:
        raise ValueError(f"center crop {crop_hw} is larger than the resized image {(height, width)}")
    if rounding == "floor":
        top, left = (height - crop_h) // 2, (width - crop_w) // 2
    else:
        top, left = int(round((height - crop_h) / 2.0)), int(round((width - crop_w) / 2.0))
    return pixels[..., top : top + crop_h, left : left + crop_w]


def pad_to_square(pixels: torch.Tensor, size: int, fill: float) -> torch.Tensor:
    """[B, C, h, w] with max(h, w) == size -> [B, C, size, size], HPSv2's split: (pad // 2) at the
    top/left, the rest at the bottom/right."""
    pad_h, pad_w = size - pixels.shape[-2], size - pixels.shape[-1]
    return F.pad(pixels, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2), value=fill)


# ------------------------------------------------------------------ Pillow's resampling, exactly


def _pil_bicubic(x: float) -> float:
    """Pillow's bicubic filter (a = -0.5)."""
    a = -0.5
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def _pil_bilinear(x: float) -> float:
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


PIL_FILTERS: dict[str, tuple[Callable[[float], float], float]] = {
    "bicubic": (_pil_bicubic, 2.0),
    "bilinear": (_pil_bilinear, 1.0),
}
"""Filter name -> (Pillow's filter function, its support)."""


@lru_cache(maxsize=64)
def pil_weights(in_size: int, out_size: int, mode: str) -> torch.Tensor:
    """[out, in] float64 matrix of Pillow's fixed-point weights (integers, scale 2^22) for one
    axis: Resample.c `precompute_coeffs` then `normalize_coeffs_8bpc`, in the same double
    arithmetic and the same order."""
    function, filter_support = PIL_FILTERS[mode]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = filter_support * filterscale
    inverse = 1.0 / filterscale
    weights = torch.zeros(out_size, in_size, dtype=torch.float64)
    for out in range(out_size):
        center = (out + 0.5) * scale
        first = max(int(center - support + 0.5), 0)  # C's (int) truncates toward zero, as int() does
        count = min(int(center + support + 0.5), in_size) - first
        taps = [function((x + first - center + 0.5) * inverse) for x in range(count)]
        total = 0.0
        for tap in taps:
            total += tap
        for x, tap in enumerate(taps):
            k = tap / total if total != 0.0 else tap
            weights[out, first + x] = (
                int(-0.5 + k * (1 << PIL_PRECISION_BITS)) if k < 0 else int(0.5 + k * (1 << PIL_PRECISION_BITS))
            )
    return weights


def _pil_pass(pixels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """One separable pass along the last axis: float64 integers [..., in] -> [..., out], each
    sum offset by half a unit, floored at 2^22 and clamped to [0, 255] (Pillow's clip8)."""
    total = pixels @ weights.T.to(pixels.device) + float(1 << (PIL_PRECISION_BITS - 1))
    return torch.floor(total / float(1 << PIL_PRECISION_BITS)).clamp_(0, 255)


def pil_resize(images: torch.Tensor, size_hw: tuple[int, int], mode: str = "bicubic") -> torch.Tensor:
    """uint8 [B, C, H, W] -> uint8 [B, C, h, w], byte for byte what Pillow's `Image.resize((w, h),
    resample)` returns for each image (no reducing_gap): the horizontal pass first, each pass
    skipped when its size does not change."""
    height, width = images.shape[-2:]
    out_h, out_w = size_hw
    pixels = images.to(torch.float64)
    if out_w != width:
        pixels = _pil_pass(pixels, pil_weights(width, out_w, mode))  # [B, C, H, w]
    if out_h != height:
        pixels = _pil_pass(pixels.transpose(-1, -2), pil_weights(height, out_h, mode)).transpose(-1, -2)
    return pixels.to(torch.uint8)
