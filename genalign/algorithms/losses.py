"""Policy-gradient losses and KL terms (pure; ALGORITHMS §2.5).

Where it fits: `algorithms/grpo.py` composes these per (micro-batch, trained denoising step):
the replayed log-probs and stored rollout log-probs go into `clipped_policy_loss`, and the
optional β·KL to the reference policy uses `latent_mean_kl` or `velocity_kl`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class PolicyLossOutput(NamedTuple):
    loss: torch.Tensor  # scalar, with grad
    ratio: torch.Tensor  # [B] detached
    clipped_fraction: torch.Tensor  # scalar detached: mean(|r − 1| > ε)
    approx_kl: torch.Tensor  # scalar detached: ½·mean((ℓ − ℓ_old)²)
    clipped_fraction_high: torch.Tensor  # scalar detached: mean(r − 1 > ε)  (Flow-GRPO clipfrac_gt_one)
    clipped_fraction_low: torch.Tensor  # scalar detached: mean(1 − r > ε)  (Flow-GRPO clipfrac_lt_one)


def clipped_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                        clip_range: float) -> PolicyLossOutput:
    """PPO clipped surrogate (ALGORITHMS §2.5), all inputs [B]:

        r = exp(ℓ − ℓ_old),   loss = mean_b max(−Â·r, −Â·clip(r, 1 − ε, 1 + ε))

    `advantages` are expected already clamped to ±adv_clip_max (`clip_advantages`).
    ℓ_old and Â are treated as constants. With ℓ == ℓ_old the ratio is exactly 1 and the loss
    is −mean(Â). A sample whose ratio is outside [1 − ε, 1 + ε] on the side its advantage
    pushes towards gets zero gradient. The stats are detached: approx_kl = ½·mean((ℓ − ℓ_old)²),
    clipped_fraction = mean(|r − 1| > ε), and its one-sided parts mean(r − 1 > ε) and
    mean(1 − r > ε), which Flow-GRPO logs as clipfrac_gt_one / clipfrac_lt_one.
    """
    if clip_range <= 0:
        raise ValueError(f"algorithm.clip_range must be > 0, got {clip_range}")
    log_ratio = log_probs - old_log_probs.detach()  # [B]
    ratio = torch.exp(log_ratio)  # [B]
    advantages = advantages.detach()  # [B]
    unclipped = -advantages * ratio  # [B]
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)  # [B]
    loss = torch.maximum(unclipped, clipped).mean()  # []
    with torch.no_grad():
        clipped_fraction = ((ratio - 1.0).abs() > clip_range).float().mean()  # []
        approx_kl = 0.5 * (log_ratio ** 2).mean()  # []
        clipped_high = (ratio - 1.0 > clip_range).float().mean()  # []
        clipped_low = (1.0 - ratio > clip_range).float().mean()  # []
    return PolicyLossOutput(loss, ratio.detach(), clipped_fraction, approx_kl, clipped_high, clipped_low)


def latent_mean_kl(mean: torch.Tensor, ref_mean: torch.Tensor, std_dev_t: torch.Tensor) -> torch.Tensor:
    """KL_j = mean_{non-batch dims} (μ_θ − μ_ref)² / (2 s_j²)  -> float32 [B] (ALGORITHMS §2.5).

    The Flow-GRPO code convention: s_j is the noise scale `std_dev_t` from
    `kernels.sde_noise_scale` — *without* sqrt(−Δσ) — so this is the paper's per-step KL × Δt,
    as a per-dim mean (flow_grpo#78). β values quoted by Flow-GRPO are for this convention.
    `std_dev_t`: 0-d, [B], or broadcastable to `mean`. Gradient flows through `mean`.
    """
    scale = std_dev_t.float()
    scale = scale.view(-1, *([1] * (mean.dim() - 1))) if scale.dim() == 1 else scale  # [B, 1, ...]
    squared = (mean.float() - ref_mean.float()) ** 2  # [B, ...]
    return (squared / (2 * scale ** 2)).flatten(1).mean(dim=1)  # [B]


def velocity_kl(velocity: torch.Tensor, ref_velocity: torch.Tensor) -> torch.Tensor:
    """mean_{non-batch dims} (v_θ − v_ref)²  -> float32 [B]: the velocity-space regulariser the
    Flow-GRPO author recommends when training without CFG and testing with it (flow_grpo#198)."""
    return ((velocity.float() - ref_velocity.float()) ** 2).flatten(1).mean(dim=1)  # [B]
