"""The whole reward-feedback chain's gradient against finite differences, in float64.

The chain is the one `RewardFeedback.compute_loss` runs, piece by piece: K denoising steps
with grad (`denoise_with_grad`) through a tiny random SD3 transformer (diffusers'
`SD3Transformer2DModel`, the tiny config of `models/sd3/tiny.py`), the frozen VAE decode
(`vae_decode_pixels`, the tiny `AutoencoderKL`: a 4x4 latent is a 32x32 image), the toy
reward classifier's differentiable score (`ToyShapeReward.score_pixels`) and the loss. The
autograd directional derivative along a random direction d in the transformer's weights must
equal the central difference (L(θ + h·d) − L(θ − h·d)) / 2h. Its error is the truncation term
O(h²·L‴) plus rounding O(ε·|L| / h). The truncation term is large here (d moves every weight:
the relative gap was 9e-2, 5e-3, 8e-6, 1e-7 at h = 1e-2 … 1e-5, falling as h²), so h = 1e-6:
truncation ~1e-9, rounding ε·|L|/h < 1e-15 relative, both far below the 1e-6 tolerance, unless
a ReLU, max-pool or clamp kink lies within h of the evaluation point (fixed seeds: none does).
"""

import pytest
import torch

from genalign.algorithms.reward_feedback import chain_bounds, denoise_with_grad, reward_feedback_loss
from genalign.models.diffusers_common import vae_decode_pixels
from genalign.rewards.toy import ToyShapeReward

PROMPTS = ["a red circle", "a blue square"]


@pytest.fixture(scope="module")
def tiny_sd3():
    from genalign.models.sd3.tiny import build_tiny_sd3_pipeline

    pipeline = build_tiny_sd3_pipeline(seed=0)
    return pipeline.transformer.double().eval(), pipeline.vae.double().eval()


def chain_inputs(transformer):
    """(x_s [2, C, 4, 4], σ's of T = 4 steps, the transformer's velocity) in float64, fixed seeds."""
    generator = torch.Generator().manual_seed(0)
    config = transformer.config
    embeds = torch.randn(2, 6, config.joint_attention_dim, generator=generator, dtype=torch.float64)
    pooled = torch.randn(2, config.pooled_projection_dim, generator=generator, dtype=torch.float64)
    first = torch.randn(2, config.in_channels, 4, 4, generator=generator, dtype=torch.float64)
    sigmas = torch.linspace(1.0, 0.0, 5, dtype=torch.float64)  # T = 4

    def velocity(latents, sigma, rows):
        return transformer(
            hidden_states=latents,
            timestep=1000 * sigma,
            encoder_hidden_states=embeds[rows],
            pooled_projections=pooled[rows],
            return_dict=False,
        )[0]

    return first, sigmas, velocity


def central_difference(parameters, direction, loss_fn, step: float = 1e-6) -> float:
    """(L(θ + h·d) − L(θ − h·d)) / 2h, the weights restored after."""
    values = []
    with torch.no_grad():
        for sign in (1, -1):
            for p, d in zip(parameters, direction):
                p.add_(sign * step * d)
            values.append(float(loss_fn()))
            for p, d in zip(parameters, direction):
                p.sub_(sign * step * d)
    return (values[0] - values[1]) / (2 * step)


def chain_loss(transformer, vae, reward, truncation: int, grad_steps: int, checkpointed: bool) -> torch.Tensor:
    first, sigmas, velocity = chain_inputs(transformer)
    start, end = chain_bounds(torch.tensor([truncation, truncation]), 4, grad_steps)
    x0 = denoise_with_grad(velocity, first, sigmas, start, end, checkpointed)
    pixels = vae_decode_pixels(vae, x0)  # [2, 3, 32, 32] in [0, 1]
    rewards = reward.score_pixels(pixels, PROMPTS, [{}, {}])
    return reward_feedback_loss(rewards, "negative", 1.0, 2.0).mean()


@pytest.mark.parametrize(
    "truncation, grad_steps, checkpointed",
    [(1, 0, False), (3, 0, True), (3, 1, False)],
    ids=["draft_1", "draft_3_checkpointed", "refl_step_2"],
)
def test_chain_gradient_matches_finite_differences(tiny_sd3, truncation, grad_steps, checkpointed):
    transformer, vae = tiny_sd3
    reward = ToyShapeReward()
    reward.classifier.double()
    parameters = [p for p in transformer.parameters()]
    generator = torch.Generator().manual_seed(1)
    direction = [torch.randn(p.shape, generator=generator, dtype=p.dtype) for p in parameters]
    for p in parameters:
        p.requires_grad_(True)
    loss = chain_loss(transformer, vae, reward, truncation, grad_steps, checkpointed)
    grads = torch.autograd.grad(loss, parameters)
    analytic = sum(float((g * d).sum()) for g, d in zip(grads, direction))
    numeric = central_difference(
        parameters, direction, lambda: chain_loss(transformer, vae, reward, truncation, grad_steps, checkpointed)
    )
    assert abs(analytic) > 1e-8  # the reward does reach the weights
    assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-12)


def test_drtune_gradient_matches_finite_differences_of_the_frozen_input_chain(tiny_sd3):
    """DRTune (v̂(sg(x_j)), grad at the supervised steps S only) differentiates
    f(θ) = L(x̂0* + Σ_{j ∈ S} (σ'_j − σ_j)·(v̂_θ(x*_j) − v̂_θ0(x*_j))), x*_j and x̂0* the chain's
    states and result at θ0: every input frozen, only the supervised forwards move with θ. Its
    autograd directional derivative through `denoise_with_grad` must equal f's central
    difference (error bound as in the module docstring)."""
    transformer, vae = tiny_sd3
    reward = ToyShapeReward()
    reward.classifier.double()
    first, sigmas, velocity = chain_inputs(transformer)
    start, end = torch.tensor([0, 0]), torch.tensor([4, 3])  # the second sample stops early at x̂0
    supervised = torch.tensor([[True, False, True, False], [False, True, True, False]])

    def loss_of(x0):
        rewards = reward.score_pixels(vae_decode_pixels(vae, x0), PROMPTS, [{}, {}])
        return reward_feedback_loss(rewards, "negative", 1.0, 2.0).mean()

    with torch.no_grad():  # the chain at θ0, one sample at a time: each state x*_j, v̂_θ0 and σ'_j − σ_j
        frozen, finals = [], []
        for row in range(2):
            x = first[row : row + 1]
            for j in range(int(end[row])):
                v = velocity(x, sigmas[j : j + 1], torch.tensor([row]))
                target = 0.0 if j == int(end[row]) - 1 else float(sigmas[j + 1])
                frozen.append((row, j, x, v, target - float(sigmas[j])))
                x = x + (target - float(sigmas[j])) * v
            finals.append(x)
        frozen_x0 = torch.cat(finals)

    def surrogate():
        x0 = frozen_x0.clone()
        for row, j, state, v0, step in frozen:
            if supervised[row, j]:
                moved = velocity(state, sigmas[j : j + 1], torch.tensor([row])) - v0
                x0 = x0.index_add(0, torch.tensor([row]), step * moved)
        return loss_of(x0)

    parameters = list(transformer.parameters())
    direction = [torch.randn(p.shape, generator=torch.Generator().manual_seed(1), dtype=p.dtype) for p in parameters]
    for p in parameters:
        p.requires_grad_(True)
    chain = denoise_with_grad(velocity, first, sigmas, start, end, False, supervised, True)
    torch.testing.assert_close(chain.detach(), frozen_x0, rtol=0, atol=1e-12)  # the same chain's value
    grads = torch.autograd.grad(loss_of(chain), parameters)
    analytic = sum(float((g * d).sum()) for g, d in zip(grads, direction))
    numeric = central_difference(parameters, direction, surrogate)
    assert abs(analytic) > 1e-8  # the reward does reach the weights
    assert analytic == pytest.approx(numeric, rel=1e-6, abs=1e-12)
