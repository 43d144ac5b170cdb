"""Rollout/replay parity: replay stored steps with unchanged weights, compare log-probs.

With fp32 and the rollout's batch geometry the gap is exactly 0 and every importance ratio
is exactly 1 (ALGORITHMS §2.10 check 2, §9.1). A non-zero gap means the replay is not
scoring the policy that sampled: a different code path, dtype, batch shape or guidance.
"""

from __future__ import annotations

import torch

from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.sampling.kernels import flow_sde_step


@torch.no_grad()
def replay_parity(policy: FlowPolicy, batch: TrajectoryBatch, step_indices: list[int],
                  chunk_size: int) -> dict[int, float]:
    """Max |log_prob_replay - log_prob_rollout| per denoising step, over all samples."""
    gaps = {j: 0.0 for j in step_indices}
    sigma_guard = float(batch.sigmas[1])
    for chunk in batch.split(chunk_size):
        cond = chunk.condition.to(policy.device)
        for j in step_indices:
            latents = chunk.latents[:, j].to(policy.device)  # [b, ...]
            sigma = torch.full((len(chunk),), float(chunk.sigmas[j]), device=policy.device)  # [b]
            velocity = policy.velocity(latents, sigma, cond, chunk.guidance_scale).float()
            replay = flow_sde_step(latents, velocity, float(chunk.sigmas[j]), float(chunk.sigmas[j + 1]),
                                   chunk.noise_level, prev_latents=chunk.latents[:, j + 1].to(policy.device),
                                   sigma_max_guard=sigma_guard)
            gap = (replay.log_prob.cpu() - chunk.log_probs[:, j]).abs().max().item()
            gaps[j] = max(gaps[j], gap)
    return gaps
