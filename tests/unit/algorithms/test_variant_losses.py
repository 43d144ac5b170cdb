"""GRPO-Guard RatioNorm, rollout-correction weights and the weighted surrogate, by hand."""

import math

import pytest
import torch

from genalign.algorithms.losses import (
    clipped_policy_loss,
    clipped_surrogate,
    ratio_norm_log_ratio,
    rollout_correction_weights,
)
from genalign.sampling.kernels import gaussian_log_prob


def test_ratio_norm_equals_mean_noise_times_mean_shift():
    # x = μ_old + S·ε with S = 0.5; ℓ's are per-dim Gaussian log-densities with std S.
    # log r̃ = (ℓ − ℓ_old + mean(δ²)/(2S²))·S = mean(ε ⊙ δ)  (docs/algorithms.md §3.3)
    old_mean = torch.tensor([[0.0, 1.0], [2.0, -1.0]])
    eps = torch.tensor([[1.0, -2.0], [0.5, 0.0]])
    std = torch.tensor([0.5, 0.5])
    sample = old_mean + 0.5 * eps
    delta = torch.tensor([[0.2, 0.1], [-0.4, 0.3]])
    mean = (old_mean + delta).requires_grad_(True)
    log_probs = gaussian_log_prob(sample, mean, std)
    old_log_probs = gaussian_log_prob(sample, old_mean, std)
    out = ratio_norm_log_ratio(log_probs, old_log_probs, mean, old_mean, std, per_sample_bias=True)
    # sample 0: mean(1·0.2, −2·0.1) = 0; sample 1: mean(0.5·(−0.4), 0) = −0.1
    torch.testing.assert_close(out, torch.tensor([0.0, -0.1]), atol=1e-6, rtol=0)
    out.sum().backward()  # d/dμ mean(ε ⊙ (μ − μ_old)) = ε / D
    torch.testing.assert_close(mean.grad, eps / 2, atol=1e-6, rtol=0)
    # on-policy (δ = 0): exactly 0
    same = ratio_norm_log_ratio(old_log_probs, old_log_probs, old_mean, old_mean, std)
    assert torch.equal(same, torch.zeros(2))
    # the reference's bias (default): one scalar, mean over samples and dims of δ²/(2S²) =
    # mean(0.04, 0.01, 0.16, 0.09)/0.5 = 0.15, shared by both samples, instead of each
    # sample's own mean(δ²)/(2S²) = (0.025, 0.125)/0.5
    shared = ratio_norm_log_ratio(log_probs, old_log_probs, mean, old_mean, std)
    own_bias = torch.tensor([0.025, 0.125]) / 0.5
    torch.testing.assert_close(shared, out + (0.15 - own_bias) * 0.5, atol=1e-6, rtol=0)


def test_rollout_correction_weight_modes():
    proximal = torch.tensor([0.0, math.log(3.0), math.log(0.25), math.log(1.5)])
    behaviour = torch.zeros(4)
    # ρ = [1, 3, 0.25, 1.5]; C = 2
    torch.testing.assert_close(
        rollout_correction_weights(proximal, behaviour, "truncate", 2.0), torch.tensor([1.0, 2.0, 0.25, 1.5])
    )
    torch.testing.assert_close(
        rollout_correction_weights(proximal, behaviour, "mask", 2.0), torch.tensor([1.0, 0.0, 0.0, 1.5])
    )
    assert torch.equal(rollout_correction_weights(proximal, behaviour, "off", 2.0), torch.ones(4))
    with pytest.raises(ValueError, match="threshold"):
        rollout_correction_weights(proximal, behaviour, "truncate", 1.0)
    with pytest.raises(ValueError, match="mode"):
        rollout_correction_weights(proximal, behaviour, "clip", 2.0)


def test_weighted_surrogate_and_log_ratio_form_agree_with_the_plain_loss():
    log_probs = torch.tensor([0.1, -0.2, 0.0], requires_grad=True)
    old = torch.tensor([0.0, 0.0, 0.0])
    adv = torch.tensor([1.0, -2.0, 0.5])
    plain = clipped_policy_loss(log_probs, old, adv, 0.2)
    from_ratio = clipped_surrogate(log_probs - old, adv, 0.2)
    assert torch.equal(plain.loss, from_ratio.loss)
    weights = torch.tensor([2.0, 0.5, 0.0])
    weighted = clipped_policy_loss(log_probs, old, adv, 0.2, sample_weights=weights)
    # per-sample max(−A r, −A clip(r)): r = [e^0.1, e^−0.2, 1], all inside [0.8, 1.2] -> [−1.105171, 1.637462, −0.5]
    per_sample = torch.maximum(-adv * torch.exp(log_probs - old), -adv * torch.exp(log_probs - old).clamp(0.8, 1.2))
    torch.testing.assert_close(weighted.loss, (weights * per_sample).mean())
    assert weighted.loss.item() == pytest.approx((2 * -1.105171 + 0.5 * 1.637462 + 0) / 3, abs=1e-5)
