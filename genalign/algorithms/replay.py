"""Replay: re-score stored denoising steps under the current policy, with the rollout's kernel.

Where it fits: every consumer of a replayed log-prob goes through here — the algorithm's loss
(with grad), the parity preflight and the rollout-correction pass (no grad) — so they all
use the kernel name, σ's, guidance and noise level stored in the trajectory, and the same
`transition_step` the rollout sampled with. That is what keeps the on-policy ratio exactly 1
for every kernel and window (docs/algorithms.md §2.10).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.sampling.kernels import StepOutput, transition_step


class ReplayedStep(NamedTuple):
    step: StepOutput  # the kernel's output for the stored x_{j+1}: log_prob [b], mean [b, ...], std [b]
    velocity: torch.Tensor  # [b, ...] float32, with grad when replayed under grad
    sigma_batch: torch.Tensor  # [b] σ_j on the policy's device (the denoiser's σ input)


def score_stored_step(batch: TrajectoryBatch, j: int, velocity: torch.Tensor) -> StepOutput:
    """The rollout kernel's step j of `batch` scored at the stored x_{j+1}, for `velocity` [b, ...]."""
    device = velocity.device
    return transition_step(batch.kernel, batch.latents[:, j].to(device), velocity, float(batch.sigmas[j]),
                           float(batch.sigmas[j + 1]), batch.noise_level,
                           prev_latents=batch.latents[:, j + 1].to(device), sigma_max_guard=float(batch.sigmas[1]))


def replay_step(policy: FlowPolicy, batch: TrajectoryBatch, j: int, detach_uncond: bool = False) -> ReplayedStep:
    """One stored step j of micro-batch `batch` through `policy` (grad follows the caller's mode)."""
    device = policy.device
    latents = batch.latents[:, j].to(device)  # [b, ...]
    sigma_batch = torch.full((len(batch),), float(batch.sigmas[j]), device=device)  # [b], filled on the device
    velocity = policy.velocity(latents, sigma_batch, batch.condition.to(device), batch.guidance_scale,
                               detach_uncond=detach_uncond).float()  # [b, ...]
    return ReplayedStep(score_stored_step(batch, j, velocity), velocity, sigma_batch)


@torch.no_grad()
def replay_log_probs(policy: FlowPolicy, batch: TrajectoryBatch, step_indices: list[int],
                     chunk_size: int) -> torch.Tensor:
    """Log-probs [B, T] (CPU float32) of the stored steps `step_indices` under `policy`, replayed
    in chunks of `chunk_size` samples; 0 at steps not listed."""
    out = torch.zeros_like(batch.log_probs)  # [B, T]
    start = 0
    for chunk in batch.split(chunk_size):
        for j in step_indices:
            out[start:start + len(chunk), j] = replay_step(policy, chunk, j).step.log_prob.cpu()
        start += len(chunk)
    return out
