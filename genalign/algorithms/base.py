"""The `Algorithm` protocol: what the trainer asks of an RL objective.

Where it fits: step 5 of the loop. The trainer never asks which algorithm it runs; it reads
what the algorithm declares and calls its hooks:
  * `needs_reference`, `needs_old_logprob` (the rollout must record SDE log-probs; the parity
    preflight runs only then), `supports_multi_update`;
  * `training_batch` turns the step's trajectories and advantages into the units the update
    loop trains on (the trajectories themselves, or DPO's preference pairs);
  * `train_step_indices` — the positions `compute_loss` is called at per micro-batch
    (denoising steps for Flow-GRPO, forward-process draws for NFT/DPO, the whole token
    sequence — one position — for AR-GRPO);
  * `replay_log_probs` — the stored trajectories' log-probs recomputed without grad, shaped
    like `batch.log_probs` (the parity preflight compares them);
  * `filler_unit` — one unit a rank with nothing to train replays with weight 0 (online DPO);
  * `rollout_weights` — the weights the rollout samples with (NFT: the old policy);
  * `after_update` — once per training step after the optimizer round (NFT's soft update);
  * `state_dict` / `load_state_dict` — algorithm state the checkpoint carries (NFT's old policy).
`AlgorithmBase` gives the defaults of an algorithm without extra state.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import torch

from genalign.algorithms.replay import replay_log_probs
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

    def training_batch(self, batch: TrajectoryBatch, advantages: torch.Tensor):
        """(units, unit advantages [U]) the update trains on; units support len/index/to/prompts."""
        ...

    def prepare_update(self, policy: FlowPolicy, batch, step_indices: list[int],
                       micro_batch_size: int):
        """Called once per optimizer round before any update (e.g. to record the current
        policy's log-probs for rollout correction); returns the batch to train on."""
        ...

    def train_step_indices(self, batch) -> list[int]:
        """Positions of this batch that are trained, in training order."""
        ...

    def replay_log_probs(self, policy, batch, step_indices: list[int], chunk_size: int) -> torch.Tensor:
        """`batch.log_probs` recomputed under `policy` at `step_indices` (no grad, CPU)."""
        ...

    def compute_loss(self, policy: FlowPolicy, batch, advantages: torch.Tensor,
                     step_index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Loss (scalar, with grad) of micro-batch `batch` at position `step_index`, and
        detached per-unit statistics ([b] tensors) for logging."""
        ...

    def filler_unit(self, batch: TrajectoryBatch):
        """One training unit built from the step's trajectories, replayed with weight 0 by a
        rank whose `training_batch` is empty, so that it still enters every collective."""
        ...

    def rollout_weights(self) -> AbstractContextManager:
        """Within the block the trained module holds the weights the rollout samples with."""
        ...

    def after_update(self, optimizer_steps: int) -> dict[str, float]:
        """Called once per training step after its `optimizer_steps` optimizer steps; metrics."""
        ...

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Tensors to checkpoint (empty: nothing beyond the trained weights)."""
        ...

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None: ...


class AlgorithmBase:
    """Defaults: train on the trajectories, sample with the live weights, no extra state."""

    needs_rollout_means = False

    def prepare_update(self, policy: FlowPolicy, batch, step_indices: list[int], micro_batch_size: int):
        return batch

    def training_batch(self, batch: TrajectoryBatch, advantages: torch.Tensor):
        return batch, advantages

    def filler_unit(self, batch: TrajectoryBatch):
        return batch.index(torch.tensor([0]))

    def replay_log_probs(self, policy: FlowPolicy, batch: TrajectoryBatch, step_indices: list[int],
                         chunk_size: int) -> torch.Tensor:
        """Stored SDE steps re-scored with the rollout's kernel (`algorithms.replay`)."""
        return replay_log_probs(policy, batch, step_indices, chunk_size)

    def rollout_weights(self) -> AbstractContextManager:
        return nullcontext()

    def after_update(self, optimizer_steps: int) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} keeps no algorithm state, got {sorted(state)[:5]}")


class ClippedRatioBase(AlgorithmBase):
    """What the clipped-ratio algorithms (Flow-GRPO and its variants, AR-GRPO) share: they train
    on the rollout's stored log-probs (so the parity preflight runs), allow several optimizer
    steps per rollout, and evaluate the reference only when algorithm.kl_beta > 0. `parameters`
    (the trained tensors) is part of the common constructor; these algorithms keep no copy."""

    needs_old_logprob = True
    supports_multi_update = True
    needs_rollout_means = False
    """True when the loss reads the rollout kernel means (`TrajectoryBatch.means`: GRPO-Guard)."""

    def __init__(self, cfg, reference=None, parameters: dict[str, torch.nn.Parameter] | None = None):
        self.cfg = cfg
        self.needs_reference = cfg.kl_beta > 0
        if self.needs_reference and reference is None:
            raise ValueError("algorithm.kl_beta > 0 needs a reference policy")
        self.reference = reference
