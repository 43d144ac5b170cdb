"""DanceGRPO and CPS kernels (docs/algorithms.md §2.3, §3.1) and the shared `transition_step`."""

import math
from typing import get_args

import pytest
import torch
from support import assert_close_reordered

from genalign.rollout.config import Kernel
from genalign.sampling.kernels import (
    GAUSSIAN_KERNELS,
    KERNELS,
    cps_step,
    dance_sde_step,
    em_sde_step,
    flow_sde_step,
    ode_step,
    transition_step,
)

SHAPE = (3, 4, 2, 2)  # [B, C, H, W]


def _inputs(seed=0, shape=SHAPE):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)


def test_every_kernel_choice_has_a_step_and_nothing_else_does():
    # rollout.kernel's `Kernel` Literal is the one list of names: the loader accepts exactly these
    assert list(KERNELS) == list(get_args(Kernel))
    assert set(GAUSSIAN_KERNELS) < set(KERNELS)


def test_dance_mean_is_the_flow_mean_with_constant_scale():
    # μ = x + Δσ·[v + η²/(2σ)·(x + (1 − σ)·v)], std = η·sqrt(−Δσ) (DanceGRPO code flux_step)
    latents, velocity = _inputs()
    sigma, sigma_next, eta = 0.7073, 0.6022, 0.3
    out = dance_sde_step(latents, velocity, sigma, sigma_next, eta, noise=torch.zeros(SHAPE))
    dt = sigma_next - sigma
    expected = latents + dt * (velocity + eta**2 / (2 * sigma) * (latents + (1 - sigma) * velocity))
    assert_close_reordered(out.mean, expected, length=1, depth=6)  # the same formula, rearranged
    # std = 0.3·sqrt(0.1051) = 0.3·0.324191 = 0.097257
    assert out.std[0].item() == pytest.approx(0.097257, abs=1e-5)
    assert torch.equal(out.noise_scale, torch.full((3,), 0.3))


def test_dance_scalar_hand_value_and_sigma_one_needs_no_guard():
    # x = 1, v = 2, σ = 1, σ_next = 0.9, η = 0.3: μ = 1 − 0.1·(2 + 0.045·(1 + 0)) = 0.7955
    out = dance_sde_step(torch.ones(1, 1), torch.full((1, 1), 2.0), 1.0, 0.9, 0.3, noise=torch.zeros(1, 1))
    assert out.mean.item() == pytest.approx(0.7955, abs=1e-6)
    # log-prob of x = μ with std 0.3·sqrt(0.1) = 0.0948683: −log std − ½ log 2π = 2.355287 − 0.918939
    assert out.log_prob.item() == pytest.approx(-math.log(0.3 * math.sqrt(0.1)) - 0.5 * math.log(2 * math.pi), abs=1e-5)


def test_cps_coefficients_preserve_the_schedule_variance():
    # c = σ_next·sin(aπ/2); predicted-noise coefficient sqrt(σ_next² − c²): squares sum to σ_next²
    sigma_next, a = 0.6022, 0.8
    c = sigma_next * math.sin(a * math.pi / 2)
    assert c == pytest.approx(0.951057 * sigma_next, abs=1e-6)  # §2.3: c ≈ 0.951 σ_next at a = 0.8
    x0 = torch.zeros(1, 1)
    # on the interpolation, with the exact velocity v = x1 − x0: x̂0 = x0 and x̂1 = x1
    for x1_value in (1.0, -2.0):
        x1 = torch.full((1, 1), x1_value)
        sigma = 0.7073
        latents = (1 - sigma) * x0 + sigma * x1
        out = cps_step(latents, x1 - x0, sigma, sigma_next, a, noise=torch.zeros(1, 1))
        predicted = math.sqrt(sigma_next**2 - c**2)
        assert out.mean.item() == pytest.approx((1 - sigma_next) * 0 + predicted * x1_value, abs=1e-6)
        assert out.std.item() == pytest.approx(c, abs=1e-6)
    # empirically: x_next − (1 − σ_next)·x0 has variance σ_next² when x1 and ε are independent N(0, 1)
    generator = torch.Generator().manual_seed(3)
    x0 = torch.randn(20000, 1, generator=generator)
    x1 = torch.randn(20000, 1, generator=generator)
    sigma = 0.7073
    out = cps_step((1 - sigma) * x0 + sigma * x1, x1 - x0, sigma, sigma_next, a, generator=generator)
    residual = out.prev_latents - (1 - sigma_next) * x0  # [N, 1]
    assert residual.var().item() == pytest.approx(sigma_next**2, rel=0.03)


def test_cps_log_prob_forms_hand_values():
    latents, velocity = _inputs()
    prev = latents + 0.1
    out = cps_step(latents, velocity, 0.6, 0.45, 0.8, prev_latents=prev)
    # "unnormalized" (flow_grpo): −mean((x − μ)²), no constants
    torch.testing.assert_close(out.log_prob, -((prev - out.mean) ** 2).flatten(1).mean(1))
    gaussian = cps_step(latents, velocity, 0.6, 0.45, 0.8, prev_latents=prev, log_prob_form="gaussian")
    std = 0.45 * math.sin(0.4 * math.pi)
    per_dim = torch.distributions.Normal(gaussian.mean, std).log_prob(prev).flatten(1)  # [B, D]
    expected = per_dim.mean(1)
    scale = float(per_dim.abs().max())
    assert_close_reordered(gaussian.log_prob, expected, length=per_dim.shape[1], depth=2, scale=scale)
    # the two differ by the per-step factor 2c² plus constants (§2.3)
    constant = -math.log(std) - 0.5 * math.log(2 * math.pi)
    assert_close_reordered(
        gaussian.log_prob, out.log_prob / (2 * std**2) + constant, length=per_dim.shape[1], depth=3, scale=scale
    )


def test_cps_final_step_and_zero_noise_are_deterministic_euler_steps():
    latents, velocity = _inputs()
    for form in ("unnormalized", "gaussian"):
        last = cps_step(latents, velocity, 0.0089, 0.0, 0.8, log_prob_form=form)
        assert torch.equal(last.log_prob, torch.zeros(3)) and torch.equal(last.std, torch.zeros(3))
        torch.testing.assert_close(last.prev_latents, ode_step(latents, velocity, 0.0089, 0.0))
    still = cps_step(latents, velocity, 0.6, 0.45, 0.0)
    assert_close_reordered(still.prev_latents, ode_step(latents, velocity, 0.6, 0.45), length=1, depth=4)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_every_kernel_scores_its_own_draw_bitwise(kernel):
    latents, velocity = _inputs()
    drawn = transition_step(
        kernel,
        latents,
        velocity,
        0.8577,
        0.7904,
        0.7,
        generator=torch.Generator().manual_seed(1),
        sigma_max_guard=0.9601,
    )
    scored = transition_step(
        kernel, latents, velocity, 0.8577, 0.7904, 0.7, prev_latents=drawn.prev_latents, sigma_max_guard=0.9601
    )
    assert torch.equal(drawn.log_prob, scored.log_prob) and torch.isfinite(scored.log_prob).all()


def test_transition_step_flow_sde_is_flow_sde_step_and_unknown_kernel_is_an_error():
    latents, velocity = _inputs()
    noise = torch.randn(SHAPE)
    a = transition_step("flow_sde", latents, velocity, 0.7, 0.6, 0.7, noise=noise)
    b = flow_sde_step(latents, velocity, 0.7, 0.6, 0.7, noise=noise)
    assert torch.equal(a.prev_latents, b.prev_latents) and torch.equal(a.log_prob, b.log_prob)
    with pytest.raises(ValueError, match="rollout.kernel='ddim'"):
        transition_step("ddim", latents, velocity, 0.7, 0.6, 0.7)


def test_em_sde_is_the_nextstep_head_sampler_step():
    # NextStep-1's head (stepfun-ai/NextStep-1 6e49bae, FlowMatchingHead.sample), in its own
    # time t = 1 − σ (t = 0 noise) with its velocity u = −v: score = (t·u − x) / (1 − t),
    # drift = u + (1 − t)·score, x' = x + drift·dt + sqrt(2(1 − t))·sqrt(dt)·w, dt = t' − t
    latents, velocity = _inputs(3)
    noise = torch.randn(SHAPE, generator=torch.Generator().manual_seed(4))
    sigma, sigma_next = 0.8137, 0.6519
    t, dt, u = 1 - sigma, sigma - sigma_next, -velocity
    score = (t * u - latents) / (1 - t)
    theirs = latents + (u + (1 - t) * score) * dt + math.sqrt(2 * (1 - t)) * math.sqrt(dt) * noise
    out = em_sde_step(latents, velocity, sigma, sigma_next, 1.0, noise=noise)
    torch.testing.assert_close(out.prev_latents, theirs, rtol=1e-5, atol=1e-5)  # fp32 rounding of unit values
    assert out.std[0].item() == pytest.approx(math.sqrt(2 * sigma * dt), rel=1e-6)
    # noise level a scales the noise scale: s = a·sqrt(2σ), the Flow-GRPO mean with that s
    half = em_sde_step(latents, velocity, sigma, sigma_next, 0.5, noise=torch.zeros(SHAPE))
    flow_form = latents + (sigma_next - sigma) * (velocity + 0.25 * (latents + (1 - sigma) * velocity))
    torch.testing.assert_close(half.mean, flow_form, rtol=1e-6, atol=1e-6)
    assert em_sde_step(latents, velocity, 1.0, 0.9, 1.0).std[0].item() == pytest.approx(math.sqrt(0.2), rel=1e-6)
