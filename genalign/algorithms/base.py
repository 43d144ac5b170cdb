"""The `Algorithm` protocol: what the trainer asks of an RL objective.

Where it fits: step 5 of the loop. The trainer never asks which algorithm it runs; it reads
what the algorithm declares (`needs_reference`, `train_step_indices`) and calls
`compute_loss` once per (micro-batch, trained denoising step).
"""

from __future__ import annotations

from typing import Protocol

import torch

from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch


class Algorithm(Protocol):
    needs_reference: bool
    """True when compute_loss evaluates the reference policy (KL term)."""
    needs_old_logprob: bool
    """True when compute_loss uses the rollout log-probs stored in the batch."""
    supports_multi_update: bool
    """True when several optimizer steps per rollout are valid (importance ratio / clipping)."""
    needs_rollout_means: bool
    """True when compute_loss reads the rollout kernel means (the rollout then records them)."""

    def train_step_indices(self, batch: TrajectoryBatch) -> list[int]:
        """Denoising steps of this batch that are trained, in training order."""
        ...

    def prepare_update(self, policy: FlowPolicy, batch: TrajectoryBatch, step_indices: list[int],
                       micro_batch_size: int) -> TrajectoryBatch:
        """Called once per optimizer round before any update (e.g. to record the current
        policy's log-probs for rollout correction); returns the batch to train on."""
        ...

    def compute_loss(self, policy: FlowPolicy, batch: TrajectoryBatch, advantages: torch.Tensor,
                     step_index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Loss (scalar, with grad) of micro-batch `batch` at denoising step `step_index`, and
        detached per-sample statistics ([b] tensors) for logging."""
        ...
