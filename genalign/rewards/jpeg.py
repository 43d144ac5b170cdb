"""JPEG (in)compressibility: the size of the image saved as a JPEG (DDPO's toy reward); and the
JPEG round trip that remote scorers see.

Where it fits: a rule reward scored by the reward runtime on decoded uint8 rollout images.
`jpeg_round_trip` is what a scorer applies first when its reference scores JPEG files (the
GenEval reward: Flow-GRPO's client JPEG-encodes every image for its reward server).

size_kB  = len(PIL JPEG bytes at quality 95) / 1000
compressibility   = -size_kB / 500      (smaller files score higher)
incompressibility = +size_kB / 500      (busier images score higher)
The /500 scale is Flow-GRPO's (`flow_grpo/rewards.py`); DDPO used the raw size. A 512x512
image at quality 95 is roughly 20-200 kB, so scores lie around 0.04-0.4 in magnitude; a
128x128 test image is a few kB (~0.005). The sign makes both "higher is better".
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from genalign.rewards.options import parse_options

JPEG_QUALITY = 95
KB_SCALE = 500.0


@dataclass
class JpegOptions:
    """The JPEG rewards take no options (quality and scale are fixed to match Flow-GRPO)."""

    def device_models(self, reward: str) -> tuple[()]:
        """Models on the scorer's device (the memory plan counts them): none, a rule on the CPU."""
        return ()


def jpeg_sizes_kb(images: torch.Tensor, quality: int = JPEG_QUALITY) -> torch.Tensor:
    """uint8 [B, 3, H, W] -> float32 [B]: PIL JPEG file size in kB (1 kB = 1000 bytes)."""
    pixels = images.permute(0, 2, 3, 1).cpu().numpy()  # [B, H, W, 3]
    sizes = []
    for image_hwc in pixels:
        buffer = io.BytesIO()
        Image.fromarray(image_hwc).save(buffer, format="JPEG", quality=quality)
        sizes.append(buffer.tell() / 1000.0)
    return torch.tensor(sizes, dtype=torch.float32)


PIL_DEFAULT_JPEG_QUALITY = 75
"""Pillow's JPEG quality when `save` is given none (libjpeg's default)."""


def jpeg_round_trip(images: torch.Tensor, quality: int = PIL_DEFAULT_JPEG_QUALITY) -> torch.Tensor:
    """uint8 [B, 3, H, W] -> uint8 [B, 3, H, W]: each image saved by Pillow as a JPEG at `quality`
    (Pillow's default chroma subsampling) and decoded again, on the images' device."""
    pixels = images.permute(0, 2, 3, 1).cpu().numpy()  # [B, H, W, 3]
    decoded = []
    for image_hwc in pixels:
        buffer = io.BytesIO()
        Image.fromarray(image_hwc).save(buffer, format="JPEG", quality=quality)
        buffer.seek(0)
        with Image.open(buffer, formats=["JPEG"]) as jpeg:
            decoded.append(torch.from_numpy(np.array(jpeg.convert("RGB"))))
    return torch.stack(decoded).permute(0, 3, 1, 2).contiguous().to(images.device)


class JpegCompressibility:
    """-kB/500 of the quality-95 JPEG: rewards images that compress well."""

    name = "jpeg_compressibility"
    sign = -1.0

    def __init__(self, device: str = "cpu", **kwargs: Any):
        self.options = parse_options(self.name, JpegOptions, kwargs)
        self.device = device

    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict[str, Any]]) -> torch.Tensor:
        return self.sign * jpeg_sizes_kb(images) / KB_SCALE  # [B]


class JpegIncompressibility(JpegCompressibility):
    """+kB/500 of the quality-95 JPEG: rewards images that compress badly (detail, noise)."""

    name = "jpeg_incompressibility"
    sign = 1.0
