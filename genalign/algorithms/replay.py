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


def at_steps(stored: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Row b of `stored` [b, T(+1), ...] at its own step `steps[b]` -> [b, ...]: the samples of
    one micro-batch may train different denoising steps (per-batch SDE windows)."""
    return stored[torch.arange(len(steps), device=stored.device), steps.to(stored.device)]


def score_stored_step(batch: TrajectoryBatch, steps: torch.Tensor, velocity: torch.Tensor) -> StepOutput:
    """The rollout kernel's step steps[b] of each sample of `batch` scored at its stored
    x_{j+1}, for `velocity` [b, ...]; `steps` [b] int64 (CPU), σ_j and σ_{j+1} per sample."""
    device = velocity.device
    return transition_step(
        batch.kernel,
        at_steps(batch.latents, steps).to(device),
        velocity,
        batch.sigmas[steps],
        batch.sigmas[steps + 1],
        batch.noise_level,
        prev_latents=at_steps(batch.latents, steps + 1).to(device),
        sigma_max_guard=float(batch.sigmas[1]),
    )


def replay_step(
    policy: FlowPolicy, batch: TrajectoryBatch, steps: torch.Tensor, detach_uncond: bool = False
) -> ReplayedStep:
    """Stored step steps[b] of each sample of micro-batch `batch` through `policy` (grad follows
    the caller's mode); `steps` [b] int64 on the CPU."""
    device = policy.device
    latents = at_steps(batch.latents, steps).to(device)  # [b, ...]
    sigma_batch = batch.sigmas[steps].to(device)  # [b]
    velocity = policy.velocity(
        latents, sigma_batch, batch.condition.to(device), batch.guidance_scale, detach_uncond=detach_uncond
    ).float()  # [b, ...]
    return ReplayedStep(score_stored_step(batch, steps, velocity), velocity, sigma_batch)


def step_table(batch: TrajectoryBatch, steps: list[int] | torch.Tensor) -> torch.Tensor:
    """[B, K] int64: the same steps for every sample (a list) or each sample's own ([B, K])."""
    table = torch.as_tensor(steps, dtype=torch.long)
    return table.expand(len(batch), -1) if table.dim() == 1 else table


@torch.no_grad()
def replay_log_probs(
    policy: FlowPolicy, batch: TrajectoryBatch, steps: list[int] | torch.Tensor, chunk_size: int
) -> torch.Tensor:
    """`batch.log_probs` [B, T] (CPU float32) with the entries of `steps` recomputed under
    `policy`, replayed in chunks of `chunk_size` samples; every other entry is the stored
    value. `steps`: steps every sample trains (a list) or each sample's own [B, K]."""
    table = step_table(batch, steps)  # [B, K]
    out = batch.log_probs.clone()  # [B, T]
    for start in range(0, len(batch), chunk_size):
        chunk = batch.index(slice(start, start + chunk_size))
        rows = torch.arange(start, start + len(chunk))  # [b]
        for column in table[start : start + len(chunk)].T:  # [b]: one training position
            out[rows, column] = replay_step(policy, chunk, column).step.log_prob.cpu()
    return out
