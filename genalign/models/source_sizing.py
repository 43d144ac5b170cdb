"""`model.source_resolution` for the editing families: the size each source image is encoded at.

Where it fits: an editing family's policy (FLUX.1 Kontext, Qwen-Image-Edit and -Plus) mixes in
`PipelineSizedSources`, which takes the `source_resolution` constructor option and resizes a
step's source pictures before the family's VAE (and, for Qwen-Image-Edit, Qwen2.5-VL) sees them.
The size itself is the family's: `FamilySpec.source_size` ("run": the picture as the manifest
holds it, the run's size; "pipeline": `FamilySpec.pipeline_source_size`, what the family's
diffusers pipeline resizes a source to). The memory plan counts the source tokens from the same
`source_size`, so the plan and the policy cannot disagree.

The resize goes through the pipeline's own `image_processor.resize` on PIL pictures, as the
pipelines resize a caller's image, so "pipeline" reproduces the unmodified pipeline call.
"""

from __future__ import annotations

from typing import Any, get_args

import numpy as np
import torch

from genalign.models.config import SourceResolution

SOURCE_RESOLUTIONS = get_args(SourceResolution)


def uint8_to_pil(images: torch.Tensor) -> list:
    """uint8 [N, 3, H, W] -> N RGB PIL images (what the pipelines' image processors take)."""
    from PIL import Image

    return [Image.fromarray(image.permute(1, 2, 0).contiguous().numpy()) for image in images.cpu()]


def pil_to_uint8(pictures: list) -> torch.Tensor:
    """N RGB PIL images of one size -> uint8 [N, 3, H, W]."""
    return torch.stack([torch.from_numpy(np.array(picture)).permute(2, 0, 1) for picture in pictures])


class PipelineSizedSources:
    """The `source_resolution` option of an editing family's policy (a mixin before the family's
    base class; its `spec` names the sizes and its `pipeline` the image processor)."""

    spec: Any
    pipeline: Any
    source_resolution: str = "run"

    def __init__(self, *args, source_resolution: str = "run", **kwargs):
        super().__init__(*args, **kwargs)
        if source_resolution not in SOURCE_RESOLUTIONS:
            raise ValueError(
                f"model.source_resolution={source_resolution!r}: choose one of {', '.join(SOURCE_RESOLUTIONS)}"
            )
        self.source_resolution = source_resolution

    def vae_images(self, sources: list) -> list:
        """One prompt's source PIL images at the size the VAE encodes them (model.source_resolution):
        as they are, or resized by the pipeline's own `image_processor.resize`."""
        resized = []
        for image in sources:
            height, width = self.spec.source_size(self.source_resolution, image.height, image.width)
            same = (height, width) == (image.height, image.width)
            resized.append(image if same else self.pipeline.image_processor.resize(image, height, width))
        return resized

    def vae_pixels(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 sources [N, 3, H, W] -> uint8 [N, 3, H', W'] at the size model.source_resolution
        gives (`vae_images`; "run" hands them back untouched)."""
        if self.source_resolution == "run":
            return images
        return pil_to_uint8(self.vae_images(uint8_to_pil(images)))
