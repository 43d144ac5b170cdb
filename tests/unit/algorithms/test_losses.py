"""Clipped surrogate and KL terms (docs/algorithms.md §2.5), with hand-worked values (torchtune style)."""

import math

import pytest
import torch

from genalign.algorithms.losses import clipped_policy_loss, latent_mean_kl, velocity_kl

RATIOS = [0.5, 0.9, 1.1, 1.5]  # two outside [0.8, 1.2], two inside


def _log_probs(ratios):
    old = torch.tensor([-1.0, -2.0, 0.5, 3.0] * (len(ratios) // 4))
    new = (old + torch.log(torch.tensor(ratios))).requires_grad_(True)
    return new, old


def test_on_policy_ratio_is_exactly_one():
    log_probs = torch.tensor([-1.3, 0.2, 4.0], requires_grad=True)
    advantages = torch.tensor([1.5, -0.5, 2.0])
    out = clipped_policy_loss(log_probs, log_probs.detach().clone(), advantages, 1e-4)
    assert torch.equal(out.ratio, torch.ones(3))
    assert out.loss.item() == pytest.approx(-advantages.mean().item())  # −(1.5 − 0.5 + 2)/3 = −1
    assert out.clipped_fraction.item() == 0.0 and out.approx_kl.item() == 0.0


def test_hand_computed_clipping_both_signs():
    # ε = 0.2, ratios r = 0.5, 0.9, 1.1, 1.5, first with A = +1 then with A = −1:
    # A=+1: max(−r, −clip(r)) = max(−0.5,−0.8)=−0.5, −0.9, −1.1, max(−1.5,−1.2)=−1.2 (clipped)
    # A=−1: max(r, clip(r))   = max(0.5, 0.8)=0.8 (clipped), 0.9, 1.1, max(1.5, 1.2)=1.5
    # loss = (−0.5 − 0.9 − 1.1 − 1.2 + 0.8 + 0.9 + 1.1 + 1.5) / 8 = 0.6 / 8 = 0.075
    log_probs, old = _log_probs(RATIOS * 2)
    advantages = torch.tensor([1.0] * 4 + [-1.0] * 4)
    out = clipped_policy_loss(log_probs, old, advantages, 0.2)
    assert out.loss.item() == pytest.approx(0.075, abs=1e-6)
    torch.testing.assert_close(out.ratio, torch.tensor(RATIOS * 2))
    assert out.clipped_fraction.item() == pytest.approx(0.5)  # 0.5 and 1.5 in both halves
    # approx_kl = ½ mean(log r²) = ½ (0.480453 + 0.011101 + 0.009084 + 0.164402) / 4 = 0.083130
    assert out.approx_kl.item() == pytest.approx(0.083130, abs=1e-5)
    assert not (out.ratio.requires_grad or out.clipped_fraction.requires_grad or out.approx_kl.requires_grad)

    # d loss / d ℓ_b = −A_b r_b / 8 where the unclipped term is the max, 0 on the clipped side:
    out.loss.backward()
    expected = torch.tensor([-0.5, -0.9, -1.1, 0.0, 0.0, 0.9, 1.1, 1.5]) / 8
    torch.testing.assert_close(log_probs.grad, expected)


def test_clipped_side_has_no_gradient_but_other_side_does():
    # A > 0 and r < 1 − ε: the surrogate still pushes r up (not clipped); A > 0 and r > 1 + ε: no gradient
    log_probs, old = _log_probs([0.5, 1.5, 0.5, 1.5])
    advantages = torch.tensor([2.0, 2.0, -2.0, -2.0])
    clipped_policy_loss(log_probs, old, advantages, 0.2).loss.backward()
    assert log_probs.grad[1].item() == 0.0 and log_probs.grad[2].item() == 0.0
    assert log_probs.grad[0].item() < 0 and log_probs.grad[3].item() > 0


def test_no_gradient_to_old_log_probs_or_advantages():
    log_probs = torch.tensor([0.1, 0.2], requires_grad=True)
    old = torch.tensor([0.0, 0.0], requires_grad=True)
    advantages = torch.tensor([1.0, -1.0], requires_grad=True)
    clipped_policy_loss(log_probs, old, advantages, 0.2).loss.backward()
    assert old.grad is None and advantages.grad is None and log_probs.grad is not None


def test_clip_range_must_be_positive():
    with pytest.raises(ValueError, match="algorithm.clip_range"):
        clipped_policy_loss(torch.zeros(2), torch.zeros(2), torch.ones(2), 0.0)


def test_latent_mean_kl():
    mean = torch.tensor([[1.0, 2.0], [0.5, 0.5]], requires_grad=True)
    ref = torch.tensor([[0.0, 0.0], [0.5, 0.5]])
    # sample 0, s = 0.5: mean(1² / 0.5, 2² / 0.5) = mean(2, 8) = 5 ; sample 1: equal means -> 0
    kl = latent_mean_kl(mean, ref, torch.tensor([0.5, 2.0]))
    torch.testing.assert_close(kl, torch.tensor([5.0, 0.0]))
    kl.sum().backward()
    assert mean.grad is not None  # d/dμ = (μ − μ_ref) / (s² · D) = [1, 2] / (0.25 · 2) = [2, 4]
    torch.testing.assert_close(mean.grad[0], torch.tensor([2.0, 4.0]))
    # a 0-d scale broadcasts; 4-d latents reduce over all non-batch dims
    latents = torch.randn(3, 4, 2, 2)
    assert torch.equal(latent_mean_kl(latents, latents.clone(), torch.tensor(0.3)), torch.zeros(3))
    shifted = latent_mean_kl(latents + 0.1, latents, torch.tensor(0.1))  # 0.01 / 0.02 = 0.5
    torch.testing.assert_close(shifted, torch.full((3,), 0.5))


def test_velocity_kl():
    velocity = torch.tensor([[1.0, -1.0, 3.0]], dtype=torch.bfloat16)
    ref = torch.tensor([[0.0, 1.0, 3.0]])
    # mean((1)², (−2)², 0) = 5/3
    kl = velocity_kl(velocity, ref)
    assert kl.dtype == torch.float32 and kl.item() == pytest.approx(5 / 3)
    assert velocity_kl(ref, ref).item() == 0.0
    assert math.isclose(velocity_kl(torch.ones(2, 3, 4), torch.zeros(2, 3, 4))[1].item(), 1.0)
