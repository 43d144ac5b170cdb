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

import dataclasses
from dataclasses import dataclass

import torch

from genalign.models.base import Condition


@dataclass
class CleanSamples:
    prompts: list[str]
    seeds: torch.Tensor  # [B] int64
    condition: Condition
    latents: torch.Tensor  # [B, ...]

    def __len__(self) -> int:
        return len(self.prompts)

    def validate(self) -> None:
        size = len(self.prompts)
        bad = [
            name
            for name, ok in {
                "seeds": self.seeds.shape == (size,),
                "condition": len(self.condition) == size,
                "latents": self.latents.shape[0] == size,
            }.items()
            if not ok
        ]
        if bad:
            raise ValueError(f"CleanSamples fields {bad} disagree with B={size}")

    def index(self, idx: torch.Tensor | list[int]) -> "CleanSamples":
        positions = torch.as_tensor(idx, dtype=torch.long)
        return CleanSamples(
            [self.prompts[i] for i in positions.tolist()],
            self.seeds[positions],
            self.condition.index(positions.to(self.condition.device)),
            self.latents[positions.to(self.latents.device)],
        )

    def to(self, device: torch.device | str) -> "CleanSamples":
        return dataclasses.replace(self, condition=self.condition.to(device), latents=self.latents.to(device))
