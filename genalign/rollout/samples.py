"""`CleanSamples`: the training unit of flow-matching SFT — (prompt, clean x0).

Where it fits: SFT trains on clean latents, not trajectories. Online (best of N), `FlowSFT.
training_batch` cuts them from a step's `TrajectoryBatch`; from a dataset, the image source
(`training/sources.py`) builds them from images on disk encoded by the family's encoder. The
update loop only needs `len`, `index`, `to` and `prompts`, so it runs unchanged over them.

Shapes (B samples, latent shape `...`):
    latents  [B, ...]  clean latents x0, float32
    seeds    [B]       int64: seed of the sample's forward-process draws (σ, ε)
    condition          `Condition` with [B, ...] tensors
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from genalign.rollout.units import CleanLatentUnits


@dataclass
class CleanSamples(CleanLatentUnits):
    latents: torch.Tensor  # [B, ...]

    latent_fields: ClassVar[tuple[str, ...]] = ("latents",)
