"""`CleanLatentUnits`: what the forward-process training units share — prompts, per-unit seeds,
the prompt condition, and clean latents x0 — and the `len` / `index` / `to` the update loop asks
of any training unit (`algorithms/base.py:TrainingUnits`).

Where it fits: Flow-DPO's pairs (`pairs.py`) and SFT's samples (`samples.py`) are such units with
different latent fields; each names them in `latent_fields` (indexed by unit and moved with the
condition), and any other field is shared by every unit (a σ schedule) and kept as is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Self

import torch

from genalign.models.base import Condition


@dataclass
class CleanLatentUnits:
    prompts: list[str]
    seeds: torch.Tensor  # [N] int64: each unit's forward-process draws (σ, ε), kept on the CPU
    condition: Condition

    latent_fields: ClassVar[tuple[str, ...]] = ()
    """The [N, ...] latent tensors of the subclass: indexed per unit, moved to the device."""

    def __len__(self) -> int:
        return len(self.prompts)

    def validate(self) -> None:
        """Every per-unit field has one row per prompt (a ValueError naming those that do not)."""
        size = len(self.prompts)
        checks = {
            "seeds": self.seeds.shape == (size,),
            "condition": len(self.condition) == size,
            **{name: getattr(self, name).shape[0] == size for name in self.latent_fields},
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"{type(self).__name__} fields {bad} disagree with {size} units")

    def index(self, idx: torch.Tensor | list[int]) -> Self:
        positions = torch.as_tensor(idx, dtype=torch.long)
        latents = {name: getattr(self, name) for name in self.latent_fields}
        return dataclasses.replace(
            self,
            prompts=[self.prompts[i] for i in positions.tolist()],
            seeds=self.seeds[positions],
            condition=self.condition.index(positions.to(self.condition.device)),
            **{name: tensor[positions.to(tensor.device)] for name, tensor in latents.items()},
        )

    def to(self, device: torch.device | str) -> Self:
        latents = {name: getattr(self, name).to(device) for name in self.latent_fields}
        return dataclasses.replace(self, condition=self.condition.to(device), **latents)
