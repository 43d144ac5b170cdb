"""AWM (docs/algorithms.md §11): each formula against a transcription of the reference's
computation (scxue/advantage_weighted_matching `scripts/train_sd3_awm.py`, commit be51372,
restated here in our words), and the algorithm class on the linear test policy."""

from __future__ import annotations

import pytest
import torch
from support import make_groups

from genalign.algorithms.awm import AdvantageWeightedMatching
from genalign.algorithms.config import AlgorithmConfig, AWMConfig
from genalign.algorithms.forward_draws import strata, stratified_draws
from genalign.algorithms.forward_losses import (
    AWM_WEIGHTINGS,
    awm_advantages,
    awm_log_prob,
    awm_policy_loss,
    old_policy_decay,
)
from genalign.rollout.collector import SamplingSpec, generate

REFERENCE_WEIGHTING = {"uniform": "Uniform", "t": "t", "t_squared": "t**2", "huber": "huber", "ghuber": "ghuber"}


def reference_log_prob(noise_pred, random_noise, clean, timestep, weighting, power):
    """`compute_log_prob_awm` after the transformer call: timestep [B, 1, 1, 1] (σ), in float64."""
    log_prob = -((noise_pred.double() - (random_noise.double() - clean.double())) ** 2)
    log_prob = log_prob.mean(dim=tuple(range(1, log_prob.ndim)))
    if weighting == "t":
        log_prob = log_prob * timestep.view(-1)
    elif weighting == "t**2":
        log_prob = log_prob * timestep.view(-1) ** 2
    elif weighting == "huber":
        log_prob = -(torch.sqrt(-log_prob + 1e-10) - 1e-5) * timestep.view(-1)
    elif weighting == "ghuber":
        tiny = torch.tensor(1e-10, dtype=log_prob.dtype)
        log_prob = -(torch.pow(-log_prob + 1e-10, power) - torch.pow(tiny, power)) * timestep.view(-1) / power
    return log_prob


def reference_policy_loss(advantages, log_prob, adv_clip_max, advantage_max, clip_range=1.0):
    """The reference's on-policy exp_first surrogate: advantages clamped and rescaled, the old
    log-prob the same forward's detached value, the PPO clip at clip_range."""
    advantages = torch.clamp(advantages, -adv_clip_max, adv_clip_max) / adv_clip_max * advantage_max
    ratio = torch.exp(log_prob - log_prob.detach())
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    return torch.mean(torch.maximum(unclipped, clipped))


@pytest.mark.parametrize("weighting", AWM_WEIGHTINGS)
def test_log_prob_is_the_reference_s_weighted_matching_error(weighting):
    g = torch.Generator().manual_seed(0)
    velocity, noise, clean = (torch.randn(5, 4, 3, 3, generator=g) for _ in range(3))
    sigma = torch.tensor([0.05, 0.3, 0.55, 0.8, 0.97])
    ours = awm_log_prob(velocity, noise - clean, sigma, weighting, 0.25)
    theirs = reference_log_prob(velocity, noise, clean, sigma.view(-1, 1, 1, 1), REFERENCE_WEIGHTING[weighting], 0.25)
    assert ours.dtype == torch.float64
    # both float64; the target ε − x0 is formed once in float32 here, so the bound is float32's
    # rounding of a difference of O(1) values squared and averaged: ~1e-7 relative
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-9)


def test_ghuber_weighting_shrinks_the_gradient_of_large_errors():
    """d/de of σ·((e + 1e-10)^p − 1e-10^p)/p is σ·(e + 1e-10)^(p−1): at p = 0.25, e = 16 weighs
    1/8 of e = 1 (the reason for the robust weighting)."""
    error = torch.tensor([1.0, 16.0], dtype=torch.float64, requires_grad=True)
    sigma = torch.tensor([0.5, 0.5])
    velocity = error.sqrt().view(2, 1)  # e = v² against a zero target
    awm_log_prob(velocity, torch.zeros(2, 1), sigma, "ghuber", 0.25).sum().backward()
    expected = -0.5 * (torch.tensor([1.0, 16.0], dtype=torch.float64) + 1e-10) ** -0.75
    torch.testing.assert_close(error.grad, expected, rtol=1e-9, atol=0)


def test_policy_loss_value_and_gradient_are_the_reference_s():
    g = torch.Generator().manual_seed(1)
    raw = torch.randn(6, dtype=torch.float64, generator=g)
    advantages = torch.tensor([-7.0, -2.0, -0.5, 0.0, 1.5, 9.0], dtype=torch.float64)
    ours_lp, theirs_lp = raw.clone().requires_grad_(), raw.clone().requires_grad_()
    ours = awm_policy_loss(ours_lp, awm_advantages(advantages, 5.0, 1.0))
    theirs = reference_policy_loss(advantages, theirs_lp, 5.0, 1.0)
    ours.backward()
    theirs.backward()
    # the same operations in float64 on the same inputs: exact up to one rounding per op
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(ours_lp.grad, theirs_lp.grad, rtol=1e-12, atol=1e-15)
    # the gradient is −A/B: A clamped to ±5 and rescaled to ±1
    expected = -torch.tensor([-1.0, -0.4, -0.1, 0.0, 0.3, 1.0], dtype=torch.float64) / 6
    torch.testing.assert_close(ours_lp.grad, expected, rtol=1e-12, atol=1e-15)


def reference_indices(num_steps, fraction, train_timesteps, time_type, u):
    """`time_type` "discrete" / "discrete_wo_init": one index per stratum from uniforms u [K]."""
    first = 0 if time_type == "discrete" else 1
    boundaries = torch.linspace(first, int(num_steps * fraction), steps=train_timesteps + 1)
    lower, upper = boundaries[:-1].long(), boundaries[1:].long()
    return lower + (u * (upper - lower)).long()


@pytest.mark.parametrize(
    "num_steps, fraction, time_type",
    [(14, 0.9, "discrete_wo_init"), (14, 0.9, "discrete"), (10, 0.9, "discrete_wo_init")],
)
def test_stratified_draws_take_the_reference_s_strata(num_steps, fraction, time_type):
    first, last = (0 if time_type == "discrete" else 1), int(num_steps * fraction)
    lower, upper = strata(first, last, 6)
    for edge in (0.0, 0.999999):  # the ends of each stratum match the reference's for the same u
        u = torch.full((6,), edge)
        assert torch.equal(
            lower + (u * (upper - lower)).long(), reference_indices(num_steps, fraction, 6, time_type, u)
        )
    sigmas = torch.linspace(1.0, 0.0, num_steps + 1)
    seeds = torch.arange(400)
    for k in range(6):
        sigma, noise = stratified_draws(seeds, k, 6, first, last, sigmas, (2,), torch.device("cpu"))
        indices = torch.round((1.0 - sigma) * num_steps).long()
        allowed = set(range(int(lower[k]), max(int(upper[k]), int(lower[k]) + 1)))
        assert set(indices.tolist()) == allowed, k  # every index of the stratum, nothing else
        assert noise.shape == (400, 2)
    if time_type == "discrete_wo_init":
        assert int(lower[0]) == 1  # σ = 1 (pure noise) is never trained


def test_stratified_draws_do_not_depend_on_the_micro_batch():
    seeds, sigmas = torch.tensor([5, 6, 7]), torch.linspace(1.0, 0.0, 11)
    together = stratified_draws(seeds, 2, 6, 1, 9, sigmas, (3,), torch.device("cpu"))
    alone = stratified_draws(seeds[1:2], 2, 6, 1, 9, sigmas, (3,), torch.device("cpu"))
    assert torch.equal(together[0][1:2], alone[0]) and torch.equal(together[1][1:2], alone[1])
    with pytest.raises(ValueError, match="outside the 6 AWM strata"):
        stratified_draws(seeds, 6, 6, 1, 9, sigmas, (3,), torch.device("cpu"))


def test_anchor_decay_is_the_reference_s_linear_schedule():
    """`kl_ema_decay_type` linear: decay = min(kl_ema_decay, 0.001 · global_step)."""
    for steps in (0, 1, 150, 299, 300, 301, 5000):
        assert old_policy_decay(steps, 0, 0.001, 0.3) == min(0.3, 0.001 * steps)


def ode_rollout(policy):
    spec = SamplingSpec(height=4, width=4, num_steps=10, guidance_scale=1.0, noise_level=0.0, chunk_size=3)
    return generate(policy, make_groups(), spec)


def trainable(policy):
    return {name: p for name, p in policy.transformer.named_parameters() if p.requires_grad}


def test_anchor_equals_the_policy_at_start_and_lags_after_the_soft_update(linear_policy):
    batch = ode_rollout(linear_policy)
    params = trainable(linear_policy)
    algo = AdvantageWeightedMatching(AlgorithmConfig(name="awm", kl_beta=0.0), parameters=params)
    loss, stats = algo.compute_loss(linear_policy, batch, torch.zeros(len(batch)), 0)
    # anchor == θ and A = 0: no anchor KL and no gradient at all
    assert torch.equal(stats["awm_anchor_kl"], torch.zeros(len(batch)))
    loss.backward()
    assert max(p.grad.abs().max().item() for p in params.values()) == 0.0
    before = {n: p.detach().clone() for n, p in params.items()}
    with torch.no_grad():
        for p in params.values():
            p.add_(1.0)
    assert algo.after_update(2) == {"awm_anchor_decay": pytest.approx(0.002)}
    for name, p in params.items():  # the reference: tgt ← tgt·decay + src·(1 − decay)
        torch.testing.assert_close(algo.anchor.shadow[name], before[name] * 0.002 + p.detach() * 0.998)
    _, stats = algo.compute_loss(linear_policy, batch, torch.zeros(len(batch)), 0)
    assert (stats["awm_anchor_kl"] > 0).all()


def test_a_positive_advantage_lowers_the_sample_s_matching_error_and_a_negative_one_raises_it(linear_policy):
    """One small gradient step on one sample at one draw: the sign of its advantage decides
    whether its weighted flow-matching error falls or rises (a sign error anywhere fails)."""
    batch = ode_rollout(linear_policy).index(torch.tensor([0]))
    params = trainable(linear_policy)
    start = {n: p.detach().clone() for n, p in params.items()}
    cfg = AlgorithmConfig(name="awm", kl_beta=0.0, awm=AWMConfig(anchor_kl_beta=0.0))
    errors = {}
    for sign in (1.0, -1.0):
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(start[n])
        algo = AdvantageWeightedMatching(cfg, parameters=params)
        loss, stats = algo.compute_loss(linear_policy, batch, torch.tensor([sign]), 3)
        assert stats["awm_advantage"].item() == pytest.approx(sign / 5)
        for p in params.values():
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in params.values():
                p.sub_(1e-2 * p.grad)
        _, after = algo.compute_loss(linear_policy, batch, torch.tensor([sign]), 3)
        errors[sign] = (stats["awm_matching_loss"].item(), after["awm_matching_loss"].item())
    assert errors[1.0][1] < errors[1.0][0] and errors[-1.0][1] > errors[-1.0][0]


def test_anchor_state_round_trips(linear_policy):
    params = trainable(linear_policy)
    algo = AdvantageWeightedMatching(AlgorithmConfig(name="awm"), parameters=params)
    with torch.no_grad():
        params["latent.bias"].add_(0.5)
    algo.after_update(3)
    fresh = AdvantageWeightedMatching(AlgorithmConfig(name="awm"), parameters=params)
    fresh.load_state_dict(algo.state_dict())
    assert fresh.optimizer_steps == 3
    for name in params:
        assert torch.equal(fresh.anchor.shadow[name], algo.anchor.shadow[name])
    with pytest.raises(ValueError, match="algorithm.name=awm"):
        fresh.load_state_dict({})
