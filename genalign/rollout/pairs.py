"""`PreferencePairs`: the training unit of Flow-DPO — (prompt, chosen x0, rejected x0).

Where it fits: DPO trains on pairs, not samples. Online, `FlowDPO.training_batch` cuts them
from a step's `TrajectoryBatch` (best vs worst of each prompt group); offline, the preference
source (`training/sources.py`) builds them from images on disk. The update loop
(`training/update.py`) only needs `len`, `index`, `to` and `prompts`, so it runs unchanged
over pairs.

Shapes (P pairs, latent shape `...`):
    chosen, rejected  [P, ...]  clean latents x0, float32
    seeds             [P]       int64: seed of the pair's forward-process draws (σ, ε)
    sigmas            [T+1]     schedule whose σ's training draws from
    condition                   `Condition` with [P, ...] tensors
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from genalign.rollout.units import CleanLatentUnits


@dataclass
class PreferencePairs(CleanLatentUnits):
    chosen: torch.Tensor  # [P, ...]
    rejected: torch.Tensor  # [P, ...]
    sigmas: torch.Tensor  # [T+1], shared by every pair

    latent_fields: ClassVar[tuple[str, ...]] = ("chosen", "rejected")

    def validate(self) -> None:
        super().validate()
        if self.rejected.shape != self.chosen.shape:
            raise ValueError(f"PreferencePairs fields ['rejected'] disagree with chosen {tuple(self.chosen.shape)}")
