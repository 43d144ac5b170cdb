"""Flow-DPPO (docs/algorithms.md §3.4): the per-step Gaussian KL against an independent closed
form and a Monte-Carlo estimate, the drop mask's truth table, the loss against a transcription of
UniRL's `_flowdppo_kl_adv_loss` on the same inputs, the step KL's σ scale against the
reference's, and the algorithm on a rollout (on-policy, then after the policy moved)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch
from support import make_groups

from genalign.algorithms.config import AlgorithmConfig, DPPOConfig
from genalign.algorithms.dppo import FlowDPPO
from genalign.algorithms.losses import kl_masked_surrogate, latent_mean_kl
from genalign.algorithms.replay import at_steps, replay_step
from genalign.preflight.algorithm_checks import algorithm_problems
from genalign.preflight.load import load_config
from genalign.rollout.collector import SamplingSpec, generate
from genalign.sampling.kernels import flow_sde_step, gaussian_log_prob, sde_noise_scale
from genalign.training.parity import replay_parity

TAU = 1e-5
FLOAT32_EPS = torch.finfo(torch.float32).eps


# ---------------------------------------------------------------- the Gaussian step KL
def test_step_kl_is_the_closed_form_gaussian_kl_per_dimension():
    """mean_dims (μ − μ_old)² / (2 std²) equals torch.distributions' KL of the two Gaussians,
    summed over dimensions and divided by their number (both directions: equal variances)."""
    g = torch.Generator().manual_seed(0)
    mean, old_mean = torch.randn(5, 2, 4, 4, generator=g), torch.randn(5, 2, 4, 4, generator=g)
    std = torch.rand(5, generator=g) + 0.1  # [B]
    ours = latent_mean_kl(mean, old_mean, std)  # [5]
    scale = std.view(-1, 1, 1, 1).expand_as(mean)
    old_to_new = torch.distributions.kl_divergence(
        torch.distributions.Normal(old_mean, scale), torch.distributions.Normal(mean, scale)
    )
    new_to_old = torch.distributions.kl_divergence(
        torch.distributions.Normal(mean, scale), torch.distributions.Normal(old_mean, scale)
    )
    for reference in (old_to_new, new_to_old):
        # float32 elementwise terms of size <= ~100, mean over 32: a few ulps of the largest
        torch.testing.assert_close(ours, reference.flatten(1).mean(1), rtol=1e-5, atol=1e-5)


def test_step_kl_matches_a_monte_carlo_estimate_from_the_kernels_log_density():
    """E_{x ~ N(μ_old, std²)}[ℓ_old(x) − ℓ_θ(x)] with ℓ the kernel's per-dimension log-density
    (`gaussian_log_prob`) is the per-dimension KL. Per draw the difference is
    KL − mean_d(ε_d·δ_d/std) (δ = μ − μ_old), so the estimate's standard error is
    sqrt(mean_d(δ_d²)/(D·N))/std; the bound is 5 of them."""
    g = torch.Generator().manual_seed(1)
    dims, draws, std = 16, 200_000, 0.3
    old_mean = torch.randn(dims, generator=g, dtype=torch.float64)
    mean = old_mean + 0.05 * torch.randn(dims, generator=g, dtype=torch.float64)
    x = old_mean + std * torch.randn(draws, dims, generator=g, dtype=torch.float64)  # [N, D]
    std_b = torch.full((draws,), std, dtype=torch.float64)
    difference = gaussian_log_prob(x, old_mean.expand_as(x), std_b) - gaussian_log_prob(x, mean.expand_as(x), std_b)
    estimate = difference.mean().item()
    exact = latent_mean_kl(mean[None], old_mean[None], torch.tensor([std])).item()
    standard_error = math.sqrt(((mean - old_mean) ** 2).mean().item() / (dims * draws)) / std
    assert exact > 10 * standard_error  # the check can tell the KL from 0
    assert abs(estimate - exact) <= 5 * standard_error


def test_the_kernels_transition_std_is_the_references_sigma_t_below_sigma_one():
    """UniRL's KL scale σ_t = sqrt(σ/(1 − min(σ, 0.99)))·η·sqrt(−Δσ) (`_compute_sigma_t`,
    transcribed) equals the flow SDE kernel's std s·sqrt(−Δσ) for every σ < 1 of a shifted
    10-step schedule; at σ = 1 the kernel's guard uses σ_1 (docs/algorithms.md §3.4 departures)."""
    sigmas = torch.tensor([1.0, 0.964, 0.92, 0.864, 0.794, 0.7, 0.571, 0.387, 0.1, 0.05, 0.0])
    eta = 0.7
    latents = torch.zeros(1, 2)
    for i in range(1, 10):
        s, s_next = sigmas[i], sigmas[i + 1]
        reference = torch.sqrt(s / (1.0 - torch.clamp(s, max=0.99))) * eta * torch.sqrt(-(s_next - s))
        ours = flow_sde_step(latents, latents, s, s_next, eta, prev_latents=latents, sigma_max_guard=sigmas[1]).std
        torch.testing.assert_close(ours, reference.expand(1), rtol=4 * FLOAT32_EPS, atol=0.0)
    guard = sde_noise_scale(torch.tensor(1.0), eta, sigmas[1]) * torch.sqrt(sigmas[0] - sigmas[1])
    at_one = flow_sde_step(latents, latents, 1.0, sigmas[1], eta, prev_latents=latents, sigma_max_guard=sigmas[1])
    torch.testing.assert_close(at_one.std, guard.expand(1))


# ---------------------------------------------------------------- the drop mask
KL_CASES = {"low": 0.5 * TAU, "at": TAU, "high": 2 * TAU}
RATIO_CASES = {"down": math.log(0.9), "one": 0.0, "up": math.log(1.1)}
ADV_CASES = {"neg": -1.0, "zero": 0.0, "pos": 1.0}
DROPPED = {("at", "up", "pos"), ("at", "down", "neg"), ("high", "up", "pos"), ("high", "down", "neg")}
"""The truth table written out: a step is dropped only with KL ≥ τ and a ratio that moved the way
its advantage pulls (r > 1 for Â > 0, r < 1 for Â < 0); every other of the 27 cases trains."""


def test_drop_mask_truth_table():
    cases = list(itertools.product(KL_CASES, RATIO_CASES, ADV_CASES))
    kl = torch.tensor([KL_CASES[k] for k, _, _ in cases])
    log_ratio = torch.tensor([RATIO_CASES[r] for _, r, _ in cases], requires_grad=True)
    advantages = torch.tensor([ADV_CASES[a] for _, _, a in cases])
    out = kl_masked_surrogate(log_ratio, advantages, kl, TAU)
    out.loss.backward()
    dropped = torch.tensor([case in DROPPED for case in cases])
    ratio = torch.exp(log_ratio.detach())
    # kept samples: d/dlog r of −Â·r/N is −Â·r/N; dropped ones: exactly 0
    expected_grad = torch.where(dropped, torch.zeros_like(ratio), -advantages * ratio / len(cases))
    assert torch.equal(log_ratio.grad == 0, dropped | (advantages == 0))
    torch.testing.assert_close(log_ratio.grad, expected_grad, rtol=2 * FLOAT32_EPS, atol=0.0)
    kept_sum = torch.where(dropped, torch.zeros_like(ratio), -advantages * ratio).sum()
    torch.testing.assert_close(out.loss, kept_sum / len(cases))  # the dropped count 0 in the mean
    n = len(cases)
    assert out.dropped_fraction.item() == pytest.approx(len(DROPPED) / n)
    assert out.dropped_fraction_high.item() == pytest.approx(2 / n)
    assert out.dropped_fraction_low.item() == pytest.approx(2 / n)
    assert out.kl_high_fraction.item() == pytest.approx(18 / n)


def test_a_dropped_overflowing_ratio_gives_no_nan_and_a_nan_kl_counts_as_high():
    log_ratio = torch.tensor([200.0, 0.1], requires_grad=True)  # exp(200) overflows float32
    out = kl_masked_surrogate(log_ratio, torch.tensor([1.0, 1.0]), torch.tensor([1.0, float("nan")]), TAU)
    out.loss.backward()
    assert out.loss.item() == 0.0 and torch.equal(log_ratio.grad, torch.zeros(2))  # both dropped
    with pytest.raises(ValueError, match="kl_threshold must be >= 0"):
        kl_masked_surrogate(log_ratio, torch.ones(2), torch.zeros(2), -1.0)


# ---------------------------------------------------------------- against the reference
def reference_flowdppo_loss(new_logp, old_logp, new_means, old_means, advantages, sigma_t, threshold):
    """UniRL `_flowdppo_kl_adv_loss` (unirl/algorithms/flowdppo.py at 1a7b501e), transcribed:
    [B, S] log-probs and advantages, [B, S, C, H, W] means, σ_t [1, S, 1, 1, 1]; the loss is the
    mean over all B·S elements."""
    ratio = torch.exp(new_logp - old_logp)
    kl = ((new_means - old_means) ** 2 / (2 * sigma_t**2)).mean(dim=(2, 3, 4))  # [B, S]
    low = kl < threshold
    remove = (~low & (ratio > 1.0) & (advantages > 0)) | (~low & (ratio < 1.0) & (advantages < 0))
    loss = torch.where(~remove, -advantages * ratio, torch.zeros(()))
    return loss.mean(), remove.float().mean()


def test_the_loss_and_its_gradient_equal_the_references_on_the_same_inputs():
    """Our per-step losses (each a mean over the micro-batch, the update loop averaging the trained
    steps) equal the reference's mean over [B, S], in value and in gradient w.r.t. the new
    log-probs and means. Inputs straddle τ and both ratio sides so that every branch fires."""
    g = torch.Generator().manual_seed(3)
    batch, steps, latent = 6, 3, (2, 4, 4)
    old_logp = torch.randn(batch, steps, generator=g)
    new_logp = (old_logp + 0.05 * torch.randn(batch, steps, generator=g)).requires_grad_()
    old_means = torch.randn(batch, steps, *latent, generator=g)
    sigma = torch.tensor([0.3, 0.2, 0.1])
    shift = 10 ** torch.empty(batch, steps, 1, 1, 1).uniform_(-4.5, -2.5, generator=g)  # KL around τ
    new_means = (old_means + shift * torch.randn(batch, steps, *latent, generator=g)).requires_grad_()
    advantages = torch.randn(batch, 1, generator=g).expand(batch, steps)
    ref_loss, ref_removed = reference_flowdppo_loss(
        new_logp, old_logp, new_means, old_means, advantages, sigma.view(1, -1, 1, 1, 1), TAU
    )
    ref_grads = torch.autograd.grad(ref_loss, (new_logp, new_means), allow_unused=True)
    per_step, dropped = [], []
    for j in range(steps):
        kl = latent_mean_kl(new_means[:, j].detach(), old_means[:, j], sigma[j].expand(batch))
        out = kl_masked_surrogate(new_logp[:, j] - old_logp[:, j], advantages[:, j], kl, TAU)
        per_step.append(out.loss)
        dropped.append(out.dropped_fraction)
    ours = torch.stack(per_step).mean()
    grads = torch.autograd.grad(ours, (new_logp, new_means), allow_unused=True)
    assert 0 < ref_removed.item() < 1  # both kinds of sample are present
    # the same float32 terms summed in another order: a few ulps of the sum of |terms|
    bound = 16 * FLOAT32_EPS * (advantages.abs() * torch.exp(new_logp - old_logp)).detach().mean().item()
    torch.testing.assert_close(ours, ref_loss, rtol=0.0, atol=bound)
    torch.testing.assert_close(torch.stack(dropped).mean(), ref_removed)
    torch.testing.assert_close(grads[0], ref_grads[0], rtol=4 * FLOAT32_EPS, atol=0.0)
    assert grads[1] is None and ref_grads[1] is None  # the means reach the loss only through the mask


# ---------------------------------------------------------------- the algorithm on a rollout
def rollout(policy, num_steps=6):
    spec = SamplingSpec(
        height=4, width=4, num_steps=num_steps, guidance_scale=1.0, noise_level=0.7, chunk_size=3, record_means=True
    )
    return generate(policy, make_groups(), spec.at_step(1))


def test_on_policy_the_ratio_is_one_the_kl_zero_and_nothing_is_dropped(linear_policy):
    batch = rollout(linear_policy)
    algo = FlowDPPO(AlgorithmConfig(name="flow_dppo"))
    steps = algo.train_step_indices(batch)
    assert max(replay_parity(linear_policy, batch, steps, chunk_size=3, replay=algo.replay_log_probs).values()) == 0
    advantages = torch.tensor([1.0, -1.0, 0.5])
    loss, stats = algo.compute_loss(linear_policy, batch.index(slice(0, 3)), advantages, steps[0])
    assert torch.equal(stats["ratio"], torch.ones(3)) and torch.equal(stats["step_kl"], torch.zeros(3))
    assert stats["dropped_frac"].sum() == 0 and stats["kl_high_frac"].sum() == 0
    assert loss.item() == pytest.approx(-advantages.mean().item(), abs=1e-7)


@pytest.mark.parametrize("normalize", [True, False])
def test_after_the_policy_moved_the_step_kl_is_the_kernels_gaussian_kl(linear_policy, normalize):
    """Perturb the weights: `step_kl` equals mean_dims (μ_θ − μ_old)²/(2 std²) with μ_old the
    recorded mean and std = s·sqrt(−Δσ) computed here from the schedule (1 with normalize_kl
    false), and the mask it feeds drops exactly the samples the rule names."""
    batch = rollout(linear_policy)
    with torch.no_grad():
        for parameter in linear_policy.transformer.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    cfg = AlgorithmConfig(name="flow_dppo", dppo=DPPOConfig(kl_threshold=TAU, normalize_kl=normalize))
    algo = FlowDPPO(cfg)
    micro = batch.index(slice(0, 6))
    advantages = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    position = algo.train_step_indices(micro)[1]
    j = algo.trained_steps(micro)[:, position]
    loss, stats = algo.compute_loss(linear_policy, micro, advantages, position)
    mean = replay_step(linear_policy, micro, j).step.mean
    sigma, sigma_next = micro.sigmas[j], micro.sigmas[j + 1]
    std = sde_noise_scale(sigma, 0.7, micro.sigmas[1]) * torch.sqrt(sigma - sigma_next) if normalize else 1.0
    expected = ((mean - at_steps(micro.means, j)) ** 2).flatten(1).mean(1) / (2 * torch.as_tensor(std) ** 2)
    torch.testing.assert_close(stats["step_kl"], expected.detach(), rtol=1e-5, atol=0.0)
    assert (stats["step_kl"] > 0).all()
    ratio = stats["ratio"]
    drop = (stats["step_kl"] >= TAU) & (((ratio > 1) & (advantages > 0)) | ((ratio < 1) & (advantages < 0)))
    assert stats["dropped_frac"][0].item() == pytest.approx(drop.float().mean().item())
    assert torch.isfinite(loss)


# ---------------------------------------------------------------- config
def test_config_checks_of_flow_dppo():
    cfg = load_config("experiment/toy/shapes_flow_dppo")
    assert algorithm_problems(cfg) == []
    assert FlowDPPO.needs_rollout_means and FlowDPPO.needs_old_logprob
    algorithm = cfg.algorithm
    cps = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, kernel="cps"))
    assert any("bounds each step's Gaussian KL" in p for p in FlowDPPO.config_problems(cps))
    clipped = dataclasses.replace(cfg, algorithm=dataclasses.replace(algorithm, clip_range=0.2))
    assert any("algorithm.clip_range=0.2 is the ratio clip" in p for p in FlowDPPO.config_problems(clipped))
    negative = dataclasses.replace(cfg, algorithm=dataclasses.replace(algorithm, dppo=DPPOConfig(kl_threshold=-1.0)))
    assert "algorithm.dppo.kl_threshold must be >= 0, got -1.0" in FlowDPPO.config_problems(negative)
    grpo = load_config("experiment/toy/shapes_grpo")
    dppo_option = dataclasses.replace(grpo.algorithm, dppo=DPPOConfig(kl_threshold=1.0))
    foreign = dataclasses.replace(grpo, algorithm=dppo_option)
    assert algorithm_problems(foreign) == [
        "algorithm.dppo.kl_threshold=1.0 is a Flow-DPPO option, but algorithm.name='grpo'; remove it or set "
        "algorithm.name=flow_dppo"
    ]
