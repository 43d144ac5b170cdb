"""Flow-GRPO SDE kernel (docs/algorithms.md §2.2): formulas, the std table, parity, guard, dtypes, grads."""

import math

import pytest
import torch
from support import assert_close_reordered

from genalign.sampling.kernels import flow_sde_step, gaussian_log_prob, ode_step, sde_noise_scale
from genalign.sampling.schedules import flow_match_sigmas

SHAPE = (3, 4, 2, 2)  # [B, C, H, W]


def _inputs(seed=0, shape=SHAPE):
    generator = torch.Generator().manual_seed(seed)
    latents = torch.randn(shape, generator=generator)
    velocity = torch.randn(shape, generator=generator)
    return latents, velocity


def test_gaussian_log_prob_hand_value():
    # one dim, x=1, μ=0, std=2: −1/8 − log 2 − ½ log 2π = −0.125 − 0.693147 − 0.918939 = −1.737086
    out = gaussian_log_prob(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([2.0]))
    assert out.item() == pytest.approx(-1.737086, abs=1e-6)


def test_log_prob_of_drawn_step_equals_normal_mean():
    latents, velocity = _inputs()
    out = flow_sde_step(latents, velocity, 0.8577, 0.7904, 0.7, generator=torch.Generator().manual_seed(1))
    std = out.std.view(-1, 1, 1, 1)  # [B, 1, 1, 1]
    per_dim = torch.distributions.Normal(out.mean, std).log_prob(out.prev_latents).flatten(1)  # [B, D]
    expected = per_dim.mean(1)  # [B]
    # torch's density vs ours: the same terms in another order, then a mean over D = 16
    assert_close_reordered(out.log_prob, expected, length=per_dim.shape[1], depth=2, scale=float(per_dim.abs().max()))
    assert out.log_prob.shape == (3,) and out.std.shape == (3,)


def test_mean_equals_alternative_form():
    latents, velocity = _inputs()
    sigma, sigma_next, a = 0.7073, 0.6022, 0.7
    out = flow_sde_step(latents, velocity, sigma, sigma_next, a, noise=torch.zeros(SHAPE))
    s2 = a**2 * sigma / (1 - sigma)
    dt = sigma_next - sigma
    alternative = latents + dt * (velocity + s2 / (2 * sigma) * (latents + (1 - sigma) * velocity))
    assert_close_reordered(out.mean, alternative, length=1, depth=6)  # the same formula, rearranged: ~6 roundings
    assert torch.equal(out.prev_latents, out.mean)  # zero noise lands on the mean


def test_std_matches_worked_table():
    # docs/algorithms.md §2.2: a = 0.7 on the SD3.5 shift-3 10-step schedule; step 0 uses the σ_1 guard:
    # s_0 = 0.7·sqrt(1 / (1 − 0.9601)) = 3.504, h_0 = sqrt(0.0399) = 0.1997 -> 0.700
    table = [0.700, 0.743, 0.536, 0.446, 0.392, 0.353, 0.319, 0.282, 0.225, 0.006]
    sigmas = flow_match_sigmas(10, 3.0)
    latents, velocity = _inputs()
    for i, expected in enumerate(table):
        out = flow_sde_step(
            latents, velocity, sigmas[i], sigmas[i + 1], 0.7, noise=torch.zeros(SHAPE), sigma_max_guard=sigmas[1]
        )
        assert out.std.tolist() == pytest.approx([expected] * 3, abs=5e-4)


def test_noise_scale_formula_and_guard():
    # σ = 0.5: 0.7·sqrt(0.5 / 0.5) = 0.7 ; σ = 1 with guard 0.75: 0.7·sqrt(1 / 0.25) = 1.4
    assert sde_noise_scale(0.5, 0.7).item() == pytest.approx(0.7)
    scales = sde_noise_scale(torch.tensor([1.0, 0.5]), 0.7, sigma_max_guard=0.75)
    torch.testing.assert_close(scales, torch.tensor([1.4, 0.7]))
    with pytest.raises(ValueError, match="sigma_max_guard"):
        sde_noise_scale(1.0, 0.7)
    latents, velocity = _inputs()
    with pytest.raises(ValueError, match="sigmas\\[1\\]"):
        flow_sde_step(latents, velocity, 1.0, 0.96, 0.7)
    out = flow_sde_step(latents, velocity, 1.0, 0.96, 0.7, sigma_max_guard=0.96, noise=torch.zeros(SHAPE))
    assert bool(torch.isfinite(out.log_prob).all()) and bool(torch.isfinite(out.mean).all())


def test_noise_level_zero_is_the_ode_step():
    latents, velocity = _inputs()
    out = flow_sde_step(latents, velocity, 1.0, 0.9601, 0.0)  # no guard needed: nothing is divided
    expected = ode_step(latents, velocity, 1.0, 0.9601)
    assert torch.equal(out.mean, expected) and torch.equal(out.prev_latents, expected)
    assert torch.equal(out.std, torch.zeros(3)) and torch.equal(out.log_prob, torch.zeros(3))
    # hand value of the Euler step: x=1, v=2, Δσ=−0.25 -> 0.5
    one = ode_step(torch.ones(1, 2), torch.full((1, 2), 2.0), 0.75, 0.5)
    assert one.tolist() == [[0.5, 0.5]]


def test_scoring_the_drawn_sample_is_bitwise_equal():
    """Rollout draws, replay scores the stored latent with the same inputs: identical log-prob."""
    latents, velocity = _inputs()
    sigmas = flow_match_sigmas(10, 3.0)
    for i in (0, 4, 8):
        drawn = flow_sde_step(
            latents,
            velocity,
            sigmas[i],
            sigmas[i + 1],
            0.7,
            generator=torch.Generator().manual_seed(i),
            sigma_max_guard=sigmas[1],
        )
        scored = flow_sde_step(
            latents,
            velocity,
            float(sigmas[i]),
            float(sigmas[i + 1]),
            0.7,
            prev_latents=drawn.prev_latents.clone(),
            sigma_max_guard=float(sigmas[1]),
        )
        assert torch.equal(scored.log_prob, drawn.log_prob)
        assert torch.equal(scored.mean, drawn.mean)


def test_generator_and_explicit_noise_agree():
    latents, velocity = _inputs()
    from_generator = flow_sde_step(latents, velocity, 0.5, 0.4, 0.7, generator=torch.Generator().manual_seed(7))
    noise = torch.randn(SHAPE, generator=torch.Generator().manual_seed(7))
    from_noise = flow_sde_step(latents, velocity, 0.5, 0.4, 0.7, noise=noise)
    assert torch.equal(from_generator.prev_latents, from_noise.prev_latents)
    # the drawn sample is mean + std·ε: std = 0.7·sqrt(0.5/0.5)·sqrt(0.1) = 0.221359
    torch.testing.assert_close(from_noise.prev_latents, from_noise.mean + 0.7 * math.sqrt(0.1) * noise)


def test_gradient_flows_to_velocity_not_prev():
    latents, velocity = _inputs()
    velocity.requires_grad_(True)
    prev = torch.randn(SHAPE, requires_grad=True)
    out = flow_sde_step(latents, velocity, 0.6, 0.45, 0.7, prev_latents=prev)
    out.log_prob.sum().backward()
    assert velocity.grad is not None and velocity.grad.abs().sum() > 0
    assert prev.grad is None and not out.prev_latents.requires_grad
    assert out.mean.requires_grad


def test_per_sample_sigma_tensors_broadcast():
    latents, velocity = _inputs()
    sigmas = torch.tensor([0.9, 0.6, 0.3])  # [B]
    sigmas_next = torch.tensor([0.8, 0.5, 0.0])  # [B]
    noise = torch.randn(SHAPE, generator=torch.Generator().manual_seed(3))
    batched = flow_sde_step(latents, velocity, sigmas, sigmas_next, 0.7, noise=noise)
    for b in range(3):
        single = flow_sde_step(
            latents[b : b + 1],
            velocity[b : b + 1],
            float(sigmas[b]),
            float(sigmas_next[b]),
            0.7,
            noise=noise[b : b + 1],
        )
        torch.testing.assert_close(batched.prev_latents[b : b + 1], single.prev_latents)
        torch.testing.assert_close(batched.log_prob[b : b + 1], single.log_prob)
        torch.testing.assert_close(batched.std[b : b + 1], single.std)
    torch.testing.assert_close(
        ode_step(latents, velocity, sigmas, sigmas_next), latents + (sigmas_next - sigmas).view(-1, 1, 1, 1) * velocity
    )
    with pytest.raises(ValueError, match="batch of 3"):
        flow_sde_step(latents, velocity, torch.tensor([0.9, 0.6]), 0.5, 0.7)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_low_and_high_precision_inputs_compute_in_float32(dtype):
    latents, velocity = _inputs()
    latents, velocity = latents.to(dtype), velocity.to(dtype)
    noise = torch.randn(SHAPE, generator=torch.Generator().manual_seed(5), dtype=dtype)
    out = flow_sde_step(latents, velocity, torch.tensor(0.7, dtype=torch.float64), 0.6, 0.7, noise=noise)
    reference = flow_sde_step(latents.float(), velocity.float(), 0.7, 0.6, 0.7, noise=noise.float())
    for got, want in zip(out, reference):
        assert got.dtype == torch.float32
        assert torch.equal(got, want)
    assert ode_step(latents, velocity, 0.7, 0.6).dtype == torch.float32
    scored = flow_sde_step(latents, velocity, 0.7, 0.6, 0.7, prev_latents=out.prev_latents.to(dtype))
    assert scored.prev_latents.dtype == torch.float32


def test_negative_noise_level_is_an_error():
    latents, velocity = _inputs()
    with pytest.raises(ValueError, match="noise_level"):
        flow_sde_step(latents, velocity, 0.5, 0.4, -0.1)
