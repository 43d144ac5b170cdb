"""Policy-gradient losses and KL terms (pure; docs/algorithms.md §2.5).

Where it fits: `algorithms/grpo.py` composes these per (micro-batch, trained denoising step):
the replayed log-probs and stored rollout log-probs go into `clipped_policy_loss`, and the
optional β·KL to the reference policy uses `latent_mean_kl` or `velocity_kl`.
`algorithms/token_grpo.py` feeds the same `clipped_surrogate` per-token [B, N] tensors and
uses `token_kl` for its KL.
"""

from __future__ import annotations

from typing import NamedTuple, get_args

import torch

from genalign.algorithms.config import RolloutCorrectionMode


class PolicyLossOutput(NamedTuple):
    loss: torch.Tensor  # scalar, with grad
    ratio: torch.Tensor  # [B] detached
    clipped_fraction: torch.Tensor  # scalar detached: mean(|r − 1| > ε)
    approx_kl: torch.Tensor  # scalar detached: ½·mean((ℓ − ℓ_old)²)
    clipped_fraction_high: torch.Tensor  # scalar detached: mean(r − 1 > ε)  (Flow-GRPO clipfrac_gt_one)
    clipped_fraction_low: torch.Tensor  # scalar detached: mean(1 − r > ε)  (Flow-GRPO clipfrac_lt_one)


def clipped_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float,
    sample_weights: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """PPO clipped surrogate (docs/algorithms.md §2.5), all inputs [B]:

        r = exp(ℓ − ℓ_old),   loss = mean_b w_b·max(−Â·r, −Â·clip(r, 1 − ε, 1 + ε))

    `advantages` are expected already clamped to ±adv_clip_max (`clip_advantages`).
    ℓ_old, Â and the optional per-sample weights w (rollout correction; default 1) are treated
    as constants. With ℓ == ℓ_old the ratio is exactly 1 and the loss is −mean(w·Â). A sample
    whose ratio is outside [1 − ε, 1 + ε] on the side its advantage pushes towards gets zero
    gradient. The stats are detached: approx_kl = ½·mean((ℓ − ℓ_old)²),
    clipped_fraction = mean(|r − 1| > ε), and its one-sided parts mean(r − 1 > ε) and
    mean(1 − r > ε), which Flow-GRPO logs as clipfrac_gt_one / clipfrac_lt_one.
    """
    return clipped_surrogate(log_probs - old_log_probs.detach(), advantages, clip_range, sample_weights)


def clipped_surrogate(
    log_ratio: torch.Tensor, advantages: torch.Tensor, clip_range: float, sample_weights: torch.Tensor | None = None
) -> PolicyLossOutput:
    """`clipped_policy_loss` from a log-ratio [B] (with grad): the form GRPO-Guard's normalised
    log-ratio plugs into. Every operation is elementwise until the final mean, so per-token
    inputs [B, N] (AR-GRPO) give the mean over all B·N tokens, and ratio [B, N]."""
    if clip_range <= 0:
        raise ValueError(f"algorithm.clip_range must be > 0, got {clip_range}")
    ratio = torch.exp(log_ratio)  # [B]
    advantages = advantages.detach()  # [B]
    unclipped = -advantages * ratio  # [B]
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)  # [B]
    per_sample = torch.maximum(unclipped, clipped)  # [B]
    if sample_weights is not None:
        per_sample = per_sample * sample_weights.detach()  # [B]
    loss = per_sample.mean()  # []
    with torch.no_grad():
        clipped_fraction = ((ratio - 1.0).abs() > clip_range).float().mean()  # []
        approx_kl = 0.5 * (log_ratio**2).mean()  # []
        clipped_high = (ratio - 1.0 > clip_range).float().mean()  # []
        clipped_low = (1.0 - ratio > clip_range).float().mean()  # []
    return PolicyLossOutput(loss, ratio.detach(), clipped_fraction, approx_kl, clipped_high, clipped_low)


def ratio_norm_log_ratio(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    mean: torch.Tensor,
    old_mean: torch.Tensor,
    std: torch.Tensor,
    per_sample_bias: bool = False,
) -> torch.Tensor:
    """GRPO-Guard RatioNorm (docs/algorithms.md §3.3, flow_grpo `train_sd3_GRPO_Guard.py`), [B] with grad:

        S = mean_b(std),   log r̃ = (ℓ − ℓ_old + bias)·S
        bias = mean_{b,dims} (μ_θ − μ_old)² / (2 S²)   (one scalar per micro-batch: the reference)
        bias_b = mean_dims (μ_θ − μ_old)²_b / (2 S²)   (per_sample_bias)

    The reference reduces `.mean(dim=tuple(range(1, log_prob.ndim)))` with a [B] log-prob,
    i.e. over an empty tuple, which torch reads as every dimension: one bias for the whole
    micro-batch. With the per-sample bias, a Gaussian step (ℓ the per-dim mean log-density with
    std S, x = μ_old + S·ε) gives exactly mean_dims(ε ⊙ (μ_θ − μ_old)): each sample's ratio is
    zero-mean under the rollout policy and independent of which samples share its
    micro-batch; the reference's scalar centres the micro-batch on average instead. The
    reference writes S = mean_b(s)·mean_b(h); with one σ per step (all samples share it) that is
    the transition std s·h, taken here directly so it holds for any Gaussian kernel.
    log_probs, old_log_probs, std [B]; mean, old_mean [B, ...]. The gradient flows through
    ℓ and μ_θ; ℓ_old, μ_old and S are constants.
    """
    scale = std.detach().float().mean()  # [] S
    drift = ((mean - old_mean.detach()) ** 2).flatten(1).mean(dim=1)  # [B]
    bias = (drift if per_sample_bias else drift.mean()) / (2 * scale**2)  # [B] or []
    return (log_probs - old_log_probs.detach() + bias) * scale  # [B]


ROLLOUT_CORRECTION_MODES = get_args(RolloutCorrectionMode)


def rollout_correction_weights(
    proximal_log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor, mode: RolloutCorrectionMode, threshold: float
) -> torch.Tensor:
    """Importance weights [B] for samples drawn by a behaviour policy other than the one trained
    (a stale rollout worker, a different numeric path), detached:

        ρ = exp(ℓ_proximal − ℓ_behaviour)
        truncate (TIS): w = min(ρ, C)
        mask (MIS):     w = ρ where 1/C ≤ ρ ≤ C, else 0

    ℓ_proximal is the trained policy's log-prob at the start of the update, ℓ_behaviour the one
    the rollout recorded; C = `threshold` (verl's rollout_is_threshold, default 2). The PPO
    ratio is then taken against ℓ_proximal (decoupled PPO), so clipping bounds the update and
    w corrects for who sampled. "off" returns ones.
    """
    if mode not in ROLLOUT_CORRECTION_MODES:
        raise ValueError(f"algorithm.rollout_correction.mode={mode!r}: choose one of {ROLLOUT_CORRECTION_MODES}")
    if threshold <= 1:
        raise ValueError(f"algorithm.rollout_correction.threshold must be > 1, got {threshold}")
    ratio = torch.exp(proximal_log_probs.detach().float() - behaviour_log_probs.detach().float())  # [B]
    if mode == "off":
        return torch.ones_like(ratio)
    if mode == "truncate":
        return ratio.clamp(max=threshold)
    inside = (ratio >= 1.0 / threshold) & (ratio <= threshold)  # [B]
    return torch.where(inside, ratio, torch.zeros_like(ratio))


def latent_mean_kl(mean: torch.Tensor, ref_mean: torch.Tensor, std_dev_t: torch.Tensor) -> torch.Tensor:
    """KL_j = mean_{non-batch dims} (μ_θ − μ_ref)² / (2 s_j²)  -> float32 [B] (docs/algorithms.md §2.5).

    The Flow-GRPO code convention: s_j is the noise scale `std_dev_t` from
    `kernels.sde_noise_scale` — *without* sqrt(−Δσ) — so this is the paper's per-step KL × Δt,
    as a per-dim mean (flow_grpo#78). β values quoted by Flow-GRPO are for this convention.
    `std_dev_t`: 0-d, [B], or broadcastable to `mean`. Gradient flows through `mean`.
    """
    scale = std_dev_t.float()
    scale = scale.view(-1, *([1] * (mean.dim() - 1))) if scale.dim() == 1 else scale  # [B, 1, ...]
    squared = (mean.float() - ref_mean.float()) ** 2  # [B, ...]
    return (squared / (2 * scale**2)).flatten(1).mean(dim=1)  # [B]


def velocity_kl(velocity: torch.Tensor, ref_velocity: torch.Tensor) -> torch.Tensor:
    """mean_{non-batch dims} (v_θ − v_ref)²  -> float32 [B]: the velocity-space regulariser the
    Flow-GRPO author recommends when training without CFG and testing with it (flow_grpo#198)."""
    return ((velocity.float() - ref_velocity.float()) ** 2).flatten(1).mean(dim=1)  # [B]


def token_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Per-token KL estimate to the reference, k3 = exp(ℓ_ref − ℓ) − (ℓ_ref − ℓ) − 1 ≥ 0 (float32,
    the shape of the inputs, e.g. [B, N]): Schulman's unbiased low-variance estimator of
    KL(π_θ ‖ π_ref) at tokens drawn from π_θ, as GRPO (DeepSeekMath), trl's GRPOTrainer and
    T2I-R1's Janus trainer use it. Gradient flows through ℓ; ℓ_ref is a constant."""
    delta = ref_log_probs.detach().float() - log_probs.float()  # [B, N]
    return torch.exp(delta) - delta - 1.0


class KLMaskedLossOutput(NamedTuple):
    loss: torch.Tensor  # scalar, with grad
    ratio: torch.Tensor  # [B] detached
    kl_high_fraction: torch.Tensor  # scalar detached: mean(KL ≥ τ)
    dropped_fraction: torch.Tensor  # scalar detached: mean(drop)
    dropped_fraction_high: torch.Tensor  # scalar detached: mean(KL ≥ τ ∧ r > 1 ∧ Â > 0)
    dropped_fraction_low: torch.Tensor  # scalar detached: mean(KL ≥ τ ∧ r < 1 ∧ Â < 0)
    approx_kl: torch.Tensor  # scalar detached: ½·mean((ℓ − ℓ_old)²)


def kl_masked_surrogate(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    step_kl: torch.Tensor,
    kl_threshold: float,
    sample_weights: torch.Tensor | None = None,
) -> KLMaskedLossOutput:
    """Flow-DPPO's surrogate (docs/algorithms.md §3.4; UniRL `unirl/algorithms/flowdppo.py`), all [B]:

        r = exp(log r),   drop = (KL ≥ τ) ∧ [(r > 1 ∧ Â > 0) ∨ (r < 1 ∧ Â < 0)]
        loss = mean_b w_b·(−Â·r)·1[¬drop]

    The unclipped ratio surrogate with a trust region on the step's KL instead of on r: a step
    whose old→new Gaussian transition KL (`step_kl`, treated as a constant) is below τ always
    trains; above τ it still trains when it moves back towards the old policy (r < 1 with Â > 0,
    r > 1 with Â < 0) and is dropped when it pushes further the way its advantage pulls. A
    dropped sample has zero gradient and counts 0 in the mean (the reference's `torch.where` then
    `.mean()` over every element, so the mean's denominator keeps it). `torch.where`, not a
    product, so an overflowing ratio of a dropped sample cannot turn into inf·0 = nan. Â and
    the optional weights w (rollout correction; default 1) are constants."""
    if kl_threshold < 0:
        raise ValueError(f"algorithm.dppo.kl_threshold must be >= 0, got {kl_threshold}")
    ratio = torch.exp(log_ratio)  # [B]
    advantages = advantages.detach()  # [B]
    with torch.no_grad():
        kl_high = ~(step_kl.detach() < kl_threshold)  # [B] a nan KL counts as high, as the reference's ~(kl < τ)
        pushes_up = kl_high & (ratio > 1.0) & (advantages > 0)  # [B]
        pushes_down = kl_high & (ratio < 1.0) & (advantages < 0)  # [B]
        drop = pushes_up | pushes_down  # [B]
    # the surrogate of a dropped sample sees log r = 0, so that an overflowing ratio it does not
    # use cannot send 0·inf = nan back through exp (the reference's where() guards the value only)
    kept_ratio = torch.exp(torch.where(drop, torch.zeros_like(log_ratio), log_ratio))  # [B]
    per_sample = torch.where(drop, torch.zeros_like(ratio), -advantages * kept_ratio)  # [B]
    if sample_weights is not None:
        per_sample = per_sample * sample_weights.detach()  # [B]
    loss = per_sample.mean()  # []
    with torch.no_grad():
        fractions = [mask.float().mean() for mask in (kl_high, drop, pushes_up, pushes_down)]
        approx_kl = 0.5 * (log_ratio.detach() ** 2).mean()  # []
    return KLMaskedLossOutput(loss, ratio.detach(), *fractions, approx_kl)
