"""DiffusionNFT and Flow-DPO math against hand-computed values (docs/algorithms.md §4, §5.3)."""

import math

import pytest
import torch
from support import assert_close_reordered

from genalign.algorithms.forward_losses import (
    adaptive_x0_loss,
    flow_dpo_loss,
    implicit_velocities,
    nft_policy_loss,
    noised,
    old_policy_decay,
    optimality_probability,
    velocity_error,
)


def test_noised_sample_and_flow_target():
    # x_σ = (1 − σ)x0 + σε = 0.75·2 + 0.25·(−1) = 1.25;  v = ε − x0 = −3
    noisy, target = noised(torch.tensor([[2.0]]), torch.tensor([[-1.0]]), torch.tensor([0.25]))
    assert noisy.item() == 1.25 and target.item() == -3.0


def test_implicit_velocities_by_hand():
    # β = 0.5, v_θ = [1, 2], v_old = [0, 1]:  v⁺ = 0.5·v_old + 0.5·v_θ = [0.5, 1.5]
    #                                        v⁻ = 1.5·v_old − 0.5·v_θ = [−0.5, 0.5]
    positive, negative = implicit_velocities(torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 1.0]]), 0.5)
    assert torch.equal(positive, torch.tensor([[0.5, 1.5]]))
    assert torch.equal(negative, torch.tensor([[-0.5, 0.5]]))


@pytest.mark.parametrize("beta", [1.0, 0.5, 0.1])
def test_implicit_policies_coincide_when_old_equals_current(beta):
    """NFT's invariant: with θ_old == θ both implicit policies are v_old (the mixture weights sum to 1)."""
    velocity = torch.randn(4, 3, 2, 2, generator=torch.Generator().manual_seed(0))
    positive, negative = implicit_velocities(velocity, velocity.clone(), beta)
    assert_close_reordered(positive, velocity, length=1, depth=3)  # (1 ∓ β)·v ± β·v: three roundings
    assert_close_reordered(negative, velocity, length=1, depth=3)


def test_optimality_probability_modes():
    # r = clamp(0.5 + 0.5·A/5, 0, 1) after A ← clamp(A, ±5) and the mode's map
    advantages = torch.tensor([-7.0, -2.5, 0.0, 2.5, 7.0])
    expected = {
        "all": [0.0, 0.25, 0.5, 0.75, 1.0],
        "positive_only": [0.5, 0.5, 0.5, 0.75, 1.0],
        "negative_only": [0.0, 0.25, 0.5, 0.5, 0.5],
        "one_only": [0.5, 0.5, 0.5, 0.6, 0.6],
        "binary": [0.4, 0.4, 0.5, 0.6, 0.6],
    }
    for mode, values in expected.items():
        torch.testing.assert_close(optimality_probability(advantages, 5.0, mode), torch.tensor(values))
    with pytest.raises(ValueError, match="adv_mode"):
        optimality_probability(advantages, 5.0, "sign")


def test_adaptive_x0_loss_by_hand():
    # x̂0 = [0.75, 0.25], x0 = 0: w = mean|·| = 0.5, L = mean([0.5625, 0.0625]) / 0.5 = 0.625
    loss = adaptive_x0_loss(torch.tensor([[0.75, 0.25]]), torch.zeros(1, 2), 1e-5)
    assert loss.item() == pytest.approx(0.625)
    # the weight is clipped below: an exact prediction gives 0 / 1e-5 = 0, not NaN
    assert adaptive_x0_loss(torch.zeros(1, 2), torch.zeros(1, 2), 1e-5).item() == 0.0


def test_nft_policy_loss_by_hand():
    # v_θ=[1,2], v_old=[0,1], β=0.5 -> v⁺=[0.5,1.5], v⁻=[−0.5,0.5]; x_σ=[1,1], σ=0.5, x0=0
    # x̂0⁺ = x_σ − σv⁺ = [0.75, 0.25]: L⁺ = 0.3125 / 0.5 = 0.625
    # x̂0⁻ = [1.25, 0.75]: w⁻ = 1, L⁻ = mean([1.5625, 0.5625]) = 1.0625
    # A = 2.5 -> r = 0.75;  ℓ = 0.75·0.625/0.5 + 0.25·1.0625/0.5 = 1.46875;  loss = 5·ℓ = 7.34375
    velocity = torch.tensor([[1.0, 2.0]], requires_grad=True)
    r = optimality_probability(torch.tensor([2.5]), 5.0)
    out = nft_policy_loss(
        velocity,
        torch.tensor([[0.0, 1.0]]),
        torch.ones(1, 2),
        torch.zeros(1, 2),
        torch.tensor([0.5]),
        r,
        beta=0.5,
        adv_clip_max=5.0,
    )
    assert out.positive_loss.item() == pytest.approx(0.625)
    assert out.negative_loss.item() == pytest.approx(1.0625)
    assert out.loss.item() == pytest.approx(7.34375)
    out.loss.backward()
    assert velocity.grad is not None and torch.isfinite(velocity.grad).all()


def test_nft_gradient_vanishes_at_half_optimality_on_policy():
    """θ == θ_old and r = 0.5: the positive and negative terms pull with equal and opposite force."""
    old = torch.randn(3, 2, 2, 2, generator=torch.Generator().manual_seed(1))
    velocity = old.clone().requires_grad_(True)
    clean = torch.randn(3, 2, 2, 2, generator=torch.Generator().manual_seed(2))
    noisy, _ = noised(clean, torch.randn_like(clean), torch.tensor([0.3, 0.6, 0.9]))
    out = nft_policy_loss(velocity, old, noisy, clean, torch.tensor([0.3, 0.6, 0.9]), torch.full((3,), 0.5), 1.0, 5.0)
    out.loss.backward()
    assert velocity.grad.abs().max().item() < 1e-6
    # r = 1 pulls v_θ towards the data (the positive term alone): a descent step lowers L⁺
    velocity = old.clone().requires_grad_(True)
    nft_policy_loss(velocity, old, noisy, clean, torch.tensor([0.3, 0.6, 0.9]), torch.ones(3), 1.0, 5.0).loss.backward()
    stepped = (velocity - 1e-3 * velocity.grad).detach()
    before = nft_policy_loss(old, old, noisy, clean, torch.tensor([0.3, 0.6, 0.9]), torch.ones(3), 1.0, 5.0)
    after = nft_policy_loss(stepped, old, noisy, clean, torch.tensor([0.3, 0.6, 0.9]), torch.ones(3), 1.0, 5.0)
    assert after.positive_loss.mean() < before.positive_loss.mean()


def test_old_policy_decay_schedules():
    # official decay_type 1: flat 0, rate 0.001, max 0.5
    assert [old_policy_decay(s, 0, 0.001, 0.5) for s in (0, 1, 100, 499, 600)] == pytest.approx(
        [0, 0.001, 0.1, 0.499, 0.5]
    )
    # decay_type 2 (OCR): flat 75, rate 0.0075, max 0.999
    assert [old_policy_decay(s, 75, 0.0075, 0.999) for s in (74, 75, 100, 300)] == pytest.approx([0, 0, 0.1875, 0.999])
    # decay_type 0: η ≡ 0 (hard copy)
    assert old_policy_decay(1000, 0, 0.0, 0.0) == 0.0


def test_flow_dpo_loss_by_hand():
    # e_θ(w)=0.10, e_ref(w)=0.12, e_θ(l)=0.30, e_ref(l)=0.28, β=10
    # margin = (0.10−0.12) − (0.30−0.28) = −0.04; inside = −½·10·(−0.04) = 0.2; L = log(1 + e^{−0.2})
    chosen = torch.tensor([0.10], requires_grad=True)
    out = flow_dpo_loss(chosen, torch.tensor([0.30]), torch.tensor([0.12]), torch.tensor([0.28]), beta=10.0)
    assert out.loss.item() == pytest.approx(math.log(1 + math.exp(-0.2)), rel=1e-6)
    assert out.inside.item() == pytest.approx(0.2, rel=1e-5)
    assert out.implicit_accuracy.item() == 1.0
    out.loss.backward()
    assert chosen.grad.item() > 0  # lowering the chosen error lowers the loss
    # policy == reference: L = log 2 whatever β
    equal = torch.tensor([0.2, 0.5])
    assert flow_dpo_loss(equal, equal, equal, equal, 5000.0).loss.item() == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="algorithm.dpo.beta"):
        flow_dpo_loss(equal, equal, equal, equal, 0.0)


def test_velocity_error_is_per_sample_mean():
    # sample 0: mean([1, 4]) = 2.5;  sample 1: 0
    assert velocity_error(torch.tensor([[1.0, 2.0], [3.0, 3.0]]), torch.tensor([[0.0, 0.0], [3.0, 3.0]])).tolist() == [
        2.5,
        0.0,
    ]
