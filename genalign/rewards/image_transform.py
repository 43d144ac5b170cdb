"""CLIP-style image preprocessing in torch on uint8 batches: resize, center-crop, normalise.

Where it fits: CLIP-backed scorers turn decoded rollout images (uint8 [B, 3, H, W]) into model
inputs here, at train and eval time alike. The numbers (shortest edge, crop size, mean, std,
resampling) are read from the model's `preprocessor_config.json`, so the tensors match what
the PIL image processor would produce (up to resampling round-off) without a per-image PIL
round trip, and the same code runs on GPU batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from genalign.rewards.pretrained import read_json_file

RESAMPLE_MODES = {2: "bilinear", 3: "bicubic"}
"""PIL resample ids used by CLIP-family processor configs -> torch interpolate modes."""


@dataclass(frozen=True)
class ImageTransform:
    shortest_edge: int | None
    """Resize so the short side has this length (aspect kept); None: resize to `resize_hw`."""
    resize_hw: tuple[int, int] | None
    crop_hw: tuple[int, int] | None
    """Center crop (height, width) after resizing; None: no crop."""
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    mode: str = "bicubic"

    @classmethod
    def from_processor_config(cls, config: dict[str, Any]) -> "ImageTransform":
        """Read a CLIP-style `preprocessor_config.json` (size, crop_size, image_mean/std, resample)."""
        size = config.get("size", 224)
        shortest_edge, resize_hw = None, None
        if isinstance(size, int):
            shortest_edge = size
        elif "shortest_edge" in size:
            shortest_edge = int(size["shortest_edge"])
        else:
            resize_hw = (int(size["height"]), int(size["width"]))
        crop = config.get("crop_size", size if isinstance(size, int) else None)
        crop_hw = None
        if config.get("do_center_crop", True) and crop is not None:
            crop_hw = (crop, crop) if isinstance(crop, int) else (int(crop["height"]), int(crop["width"]))
        resample = config.get("resample", 3)
        if resample not in RESAMPLE_MODES:
            raise ValueError(f"preprocessor_config.json resample={resample} is not supported "
                             f"(supported PIL ids: {RESAMPLE_MODES})")
        return cls(shortest_edge=shortest_edge, resize_hw=resize_hw, crop_hw=crop_hw,
                   mean=tuple(config["image_mean"]), std=tuple(config["image_std"]), mode=RESAMPLE_MODES[resample])

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, reward: str, key: str) -> "ImageTransform":
        return cls.from_processor_config(read_json_file(name_or_path, "preprocessor_config.json",
                                                        reward=reward, key=key))

    def output_hw(self, height: int, width: int) -> tuple[int, int]:
        """Size after resizing; for shortest_edge, as transformers computes it (long side truncated)."""
        if self.shortest_edge is None:
            return self.resize_hw
        short, long = min(height, width), max(height, width)
        new_short, new_long = self.shortest_edge, int(self.shortest_edge * long / short)
        return (new_short, new_long) if height <= width else (new_long, new_short)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 [B, 3, H, W] -> float32 [B, 3, h, w], normalised with the processor's mean/std."""
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected uint8 images [B, 3, H, W], got {images.dtype} {tuple(images.shape)}")
        pixels = images.float()  # [B, 3, H, W] in [0, 255]
        out_hw = self.output_hw(*pixels.shape[-2:])
        if tuple(pixels.shape[-2:]) != out_hw:
            pixels = F.interpolate(pixels, size=out_hw, mode=self.mode, align_corners=False, antialias=True)
            pixels = pixels.clamp(0, 255)  # bicubic overshoots; PIL clamps to uint8
        if self.crop_hw is not None:
            pixels = center_crop(pixels, self.crop_hw)  # [B, 3, h, w]
        mean = pixels.new_tensor(self.mean).view(1, 3, 1, 1)
        std = pixels.new_tensor(self.std).view(1, 3, 1, 1)
        return (pixels / 255.0 - mean) / std  # [B, 3, h, w]


def center_crop(pixels: torch.Tensor, crop_hw: tuple[int, int]) -> torch.Tensor:
    """[B, C, H, W] -> [B, C, h, w], offsets (H - h) // 2 and (W - w) // 2 as transformers does."""
    height, width = pixels.shape[-2:]
    crop_h, crop_w = crop_hw
    if crop_h > height or crop_w > width:
        raise ValueError(f"center crop {crop_hw} is larger than the resized image {(height, width)}")
    top, left = (height - crop_h) // 2, (width - crop_w) // 2
    return pixels[..., top:top + crop_h, left:left + crop_w]
