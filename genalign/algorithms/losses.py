"""Policy-gradient losses and KL terms (pure; ALGORITHMS §2.5).

Where it fits: `algorithms/grpo.py` composes these per (micro-batch, denoising step).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class PolicyLossOutput(NamedTuple):
    loss: torch.Tensor  # scalar, with grad
    ratio: torch.Tensor  # [B] detached
    clipped_fraction: torch.Tensor  # scalar detached: mean(|r − 1| > ε)
    approx_kl: torch.Tensor  # scalar detached: ½·mean((ℓ − ℓ_old)²)


def clipped_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                        clip_range: float) -> PolicyLossOutput:
    """PPO clipped surrogate: mean_b max(−Â·r, −Â·clip(r, 1 − ε, 1 + ε)), r = exp(ℓ − ℓ_old).

    `advantages` are expected already clamped (`clip_advantages`). With ℓ == ℓ_old the ratio
    is exactly 1 and the loss is −mean(Â).
    """
    log_ratio = log_probs - old_log_probs.detach()  # [B]
    ratio = torch.exp(log_ratio)  # [B]
    unclipped = -advantages * ratio  # [B]
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)  # [B]
    loss = torch.maximum(unclipped, clipped).mean()
    with torch.no_grad():
        clipped_fraction = ((ratio - 1.0).abs() > clip_range).float().mean()
        approx_kl = 0.5 * (log_ratio ** 2).mean()
    return PolicyLossOutput(loss, ratio.detach(), clipped_fraction, approx_kl)


def latent_mean_kl(mean: torch.Tensor, ref_mean: torch.Tensor, std_dev_t: torch.Tensor) -> torch.Tensor:
    """KL_j = mean_dims (μ_θ − μ_ref)² / (2 s_j²) [B], the Flow-GRPO code convention: s_j is the
    noise scale (without sqrt(−Δσ)), so this is the paper's KL × Δt as a per-dim mean
    (ALGORITHMS §2.5; flow_grpo#78). β values quoted by Flow-GRPO are for this convention."""
    s = std_dev_t.float()
    s = s.view(-1, *([1] * (mean.dim() - 1))) if s.dim() == 1 else s
    return ((mean - ref_mean) ** 2 / (2 * s ** 2)).flatten(1).mean(dim=1)  # [B]


def velocity_kl(velocity: torch.Tensor, ref_velocity: torch.Tensor) -> torch.Tensor:
    """mean_dims (v_θ − v_ref)² [B]: the velocity-space regulariser (flow_grpo#198)."""
    return ((velocity.float() - ref_velocity.float()) ** 2).flatten(1).mean(dim=1)  # [B]
