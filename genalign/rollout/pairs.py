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

import dataclasses
from dataclasses import dataclass

import torch

from genalign.models.base import Condition


@dataclass
class PreferencePairs:
    prompts: list[str]
    seeds: torch.Tensor  # [P] int64
    condition: Condition
    chosen: torch.Tensor  # [P, ...]
    rejected: torch.Tensor  # [P, ...]
    sigmas: torch.Tensor  # [T+1]

    def __len__(self) -> int:
        return len(self.prompts)

    def validate(self) -> None:
        size = len(self.prompts)
        bad = [
            name
            for name, ok in {
                "seeds": self.seeds.shape == (size,),
                "condition": len(self.condition) == size,
                "chosen": self.chosen.shape[0] == size,
                "rejected": self.rejected.shape == self.chosen.shape,
            }.items()
            if not ok
        ]
        if bad:
            raise ValueError(f"PreferencePairs fields {bad} disagree with P={size}")

    def index(self, idx: torch.Tensor | list[int]) -> "PreferencePairs":
        positions = torch.as_tensor(idx, dtype=torch.long)
        return PreferencePairs(
            [self.prompts[i] for i in positions.tolist()],
            self.seeds[positions],
            self.condition.index(positions.to(self.condition.device)),
            self.chosen[positions.to(self.chosen.device)],
            self.rejected[positions.to(self.rejected.device)],
            self.sigmas,
        )

    def to(self, device: torch.device | str) -> "PreferencePairs":
        return dataclasses.replace(
            self, condition=self.condition.to(device), chosen=self.chosen.to(device), rejected=self.rejected.to(device)
        )
