"""`TrajectoryBatch`: what a rollout hands to rewards, advantages and replay.

Where it fits: the collector (in-process or a Ray worker) fills it, the reward runtime
reads `images`/`prompts`, the algorithm replays `latents` through the current policy and
compares with `log_probs`. Plain tensors + lists, so it pickles through Ray unchanged.

Shapes (B samples, T denoising steps, latent shape `...`):
    latents    [B, T+1, ...]  x_0 (noise) ... x_T (final), float32, as used by the kernel
    log_probs  [B, T]         rollout log-prob of x_{i+1} given x_i (0 where not stochastic)
    sigmas     [T+1]          the schedule used, float32, shared by the batch
    sde_mask   [B, T]         bool: which steps of each sample were stochastic (trainable); samples
                              of one step differ when their sampling batches drew different SDE windows
    images     [B, 3, H, W]   uint8 decoded final images ([B, F, 3, H, W] for a video family)
    condition                 `SharedCondition` (each distinct prompt stored once) or `Condition` [B, ...]
    means      [B, T, ...]    optional: the rollout kernel's mean μ_i per step (GRPO-Guard)
    proximal_log_probs [B, T] optional: the trained policy's log-probs recomputed at the start
                              of the update (rollout correction); log_probs stay the behaviour's
    kernel                    the transition kernel name, so replay scores with the rollout's kernel
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from genalign.models.base import Condition, SharedCondition


@dataclass
class TrajectoryBatch:
    prompts: list[str]
    prompt_ids: torch.Tensor  # [B] int64: index of the prompt in its manifest (group key)
    group_ids: torch.Tensor  # [B] int64: index of the group within this step
    seeds: torch.Tensor  # [B] int64: per-sample seed of the initial noise + SDE noise
    condition: Condition | SharedCondition
    latents: torch.Tensor  # [B, T+1, ...]
    log_probs: torch.Tensor  # [B, T]
    sigmas: torch.Tensor  # [T+1]
    sde_mask: torch.Tensor  # [B, T] bool
    images: torch.Tensor  # [B, 3, H, W] uint8 (video: [B, F, 3, H, W])
    guidance_scale: float = 1.0
    noise_level: float = 0.0
    kernel: str = "flow_sde"
    means: torch.Tensor | None = None  # [B, T, ...] float32
    proximal_log_probs: torch.Tensor | None = None  # [B, T] float32
    metadata: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def num_steps(self) -> int:
        return self.log_probs.shape[1]

    def validate(self) -> None:
        """Raise ValueError when fields disagree in batch size or step count."""
        batch_size = len(self.prompts)
        steps = self.sigmas.shape[0] - 1
        checks = {
            "prompt_ids": self.prompt_ids.shape == (batch_size,),
            "group_ids": self.group_ids.shape == (batch_size,),
            "seeds": self.seeds.shape == (batch_size,),
            "condition": len(self.condition) == batch_size,
            "latents": self.latents.shape[:2] == (batch_size, steps + 1),
            "log_probs": self.log_probs.shape == (batch_size, steps),
            "sde_mask": self.sde_mask.shape == (batch_size, steps) and self.sde_mask.dtype == torch.bool,
            "images": self.images.shape[0] == batch_size and self.images.dtype == torch.uint8,
            "means": self.means is None or self.means.shape[:2] == (batch_size, steps),
            "proximal_log_probs": self.proximal_log_probs is None
            or self.proximal_log_probs.shape == (batch_size, steps),
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"TrajectoryBatch fields {bad} disagree with B={batch_size}, T={steps}")
        if self.metadata and len(self.metadata) != batch_size:
            raise ValueError(f"TrajectoryBatch.metadata has {len(self.metadata)} rows for B={batch_size}")

    def index(self, idx: torch.Tensor | slice | list[int]) -> "TrajectoryBatch":
        """Select samples (the σ schedule is shared and kept whole)."""
        if isinstance(idx, slice):
            positions = list(range(len(self)))[idx]
        else:
            positions = torch.as_tensor(idx).tolist()
        tensor_idx = torch.as_tensor(positions, dtype=torch.long)
        return TrajectoryBatch(
            prompts=[self.prompts[i] for i in positions],
            prompt_ids=self.prompt_ids[tensor_idx],
            group_ids=self.group_ids[tensor_idx],
            seeds=self.seeds[tensor_idx],
            condition=self.condition.index(tensor_idx),
            latents=self.latents[tensor_idx],
            log_probs=self.log_probs[tensor_idx],
            sigmas=self.sigmas,
            sde_mask=self.sde_mask[tensor_idx],
            images=self.images[tensor_idx],
            guidance_scale=self.guidance_scale,
            noise_level=self.noise_level,
            kernel=self.kernel,
            means=_rows(self.means, tensor_idx),
            proximal_log_probs=_rows(self.proximal_log_probs, tensor_idx),
            metadata=[self.metadata[i] for i in positions] if self.metadata else [],
        )

    def to(self, device: torch.device | str) -> "TrajectoryBatch":
        """The replayed tensors (condition, latents, log-probs) on `device`, copied once per
        micro-batch rather than once per trained step; images and ids stay on the CPU."""
        return dataclasses.replace(
            self,
            condition=self.condition.to(device),
            latents=self.latents.to(device),
            log_probs=self.log_probs.to(device),
            means=_moved(self.means, device),
            proximal_log_probs=_moved(self.proximal_log_probs, device),
        )

    def split(self, chunk_size: int) -> list["TrajectoryBatch"]:
        return [self.index(slice(start, start + chunk_size)) for start in range(0, len(self), chunk_size)]

    @staticmethod
    def cat(batches: list["TrajectoryBatch"]) -> "TrajectoryBatch":
        first = batches[0]
        for other in batches[1:]:
            if not torch.equal(other.sigmas, first.sigmas):
                raise ValueError("cannot concatenate trajectories sampled with different σ schedules")
            if (other.guidance_scale, other.noise_level, other.kernel) != (
                first.guidance_scale,
                first.noise_level,
                first.kernel,
            ):
                raise ValueError(
                    "cannot concatenate trajectories sampled with different guidance, noise level or kernel"
                )
            if (other.means is None) != (first.means is None) or (other.proximal_log_probs is None) != (
                first.proximal_log_probs is None
            ):
                raise ValueError("cannot concatenate trajectories with and without rollout means / proximal log-probs")
        return TrajectoryBatch(
            prompts=[p for b in batches for p in b.prompts],
            prompt_ids=torch.cat([b.prompt_ids for b in batches]),
            group_ids=torch.cat([b.group_ids for b in batches]),
            seeds=torch.cat([b.seeds for b in batches]),
            condition=type(first.condition).cat([b.condition for b in batches]),
            latents=torch.cat([b.latents for b in batches]),
            log_probs=torch.cat([b.log_probs for b in batches]),
            sigmas=first.sigmas,
            sde_mask=torch.cat([b.sde_mask for b in batches]),
            images=torch.cat([b.images for b in batches]),
            guidance_scale=first.guidance_scale,
            noise_level=first.noise_level,
            kernel=first.kernel,
            means=None if first.means is None else torch.cat([b.means for b in batches]),
            proximal_log_probs=(
                None if first.proximal_log_probs is None else torch.cat([b.proximal_log_probs for b in batches])
            ),
            metadata=[m for b in batches for m in b.metadata],
        )


def _rows(tensor: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor | None:
    return None if tensor is None else tensor[rows]


def _moved(tensor: torch.Tensor | None, device: torch.device | str) -> torch.Tensor | None:
    return None if tensor is None else tensor.to(device)


BatchT = TypeVar("BatchT")
"""`TrajectoryBatch` or `TokenTrajectoryBatch` (which imports this module)."""


def cat_batches(batches: Sequence[BatchT]) -> BatchT:
    """Join trajectory batches of one kind (`TrajectoryBatch` or `TokenTrajectoryBatch`) with
    that kind's own `cat`: the evaluator, the async reward path and the Ray engine join chunks
    without asking which kind they hold."""
    if not batches:
        raise ValueError("no trajectory batches to concatenate")
    joined: BatchT = type(batches[0]).cat(batches)  # type: ignore[attr-defined]  # each kind has its own cat
    return joined
