"""Reward feedback math (docs/algorithms.md §10) against short transcriptions of the references'
computations: ImageReward's ReFL (`ReFL.py`), AlignProp (`sd_pipeline.py`, `main.py` losses)
and DRaFT's Algorithm (K-step truncation, LV re-noising), on the same inputs."""

import random

import pytest
import torch
from support import linear_velocity

from genalign.algorithms.config import AlgorithmConfig, RewardFeedbackConfig
from genalign.algorithms.forward_draws import seeded_generator
from genalign.algorithms.reward_feedback import (
    RewardFeedback,
    chain_bounds,
    denoise_with_grad,
    reward_feedback_loss,
    truncation_draws,
)

SIGMAS = torch.linspace(1.0, 0.0, 7, dtype=torch.float64)  # T = 6


def euler_reference(x, weight, sigmas, first_step, last_step, jump_to_x0):
    """The references' chain, step by step: x ← x + (σ_{j+1} − σ_j)·v̂ for j = first..last; with
    `jump_to_x0` the last step is the x0 prediction x̂0 = x − σ_j·v̂ (ReFL's pred_original_sample)."""
    for j in range(first_step, last_step + 1):
        v = x @ weight.T + sigmas[j]
        target = 0.0 if (jump_to_x0 and j == last_step) else sigmas[j + 1]
        x = x + (target - sigmas[j]) * v
    return x


def test_fixed_truncation_runs_the_last_k_euler_steps():
    """DRaFT-K: the stored x_{T−K} through the last K Euler steps (σ_T = 0 makes the last one x̂0)."""
    weight = torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 0.3
    first = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    start, end = chain_bounds(torch.tensor([3, 3]), 6, grad_steps=0)
    assert start.tolist() == [3, 3] and end.tolist() == [6, 6]
    ours = denoise_with_grad(linear_velocity(weight), first, SIGMAS, start, end)
    reference = euler_reference(first, weight, SIGMAS, 3, 5, jump_to_x0=False)
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-14)  # the same operations, float64


def test_refl_takes_one_step_with_grad_and_predicts_x0():
    """ReFL (grad_steps 1): from x_m, x̂0 = x_m − σ_m·v̂(x_m), whatever m."""
    weight = torch.eye(3, dtype=torch.float64) * 0.5
    first = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.0, -1.0]], dtype=torch.float64)
    start, end = chain_bounds(torch.tensor([4, 2]), 6, grad_steps=1)  # m = 2 and 4
    assert start.tolist() == [2, 4] and end.tolist() == [3, 5]
    ours = denoise_with_grad(linear_velocity(weight), first, SIGMAS, start, end)
    for row, m in enumerate((2, 4)):
        v = first[row] * 0.5 + SIGMAS[m]
        torch.testing.assert_close(ours[row], first[row] - SIGMAS[m] * v, rtol=0, atol=1e-15)


def test_samples_with_different_starts_equal_their_own_chains():
    """Per-sample truncation in one batch: each row is its own chain run alone."""
    weight = torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 0.3
    first = torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    truncation = torch.tensor([1, 4, 6])
    start, end = chain_bounds(truncation, 6, 0)
    batched = denoise_with_grad(linear_velocity(weight), first, SIGMAS, start, end)
    for row in range(3):
        alone = euler_reference(first[row : row + 1], weight, SIGMAS, int(start[row]), 5, False)
        torch.testing.assert_close(batched[row : row + 1], alone, rtol=0, atol=1e-14)


def test_checkpointed_chain_has_the_same_value_and_gradient():
    weight = (torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4)) * 0.3).requires_grad_()
    first = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    start, end = chain_bounds(torch.tensor([3, 2]), 6, 0)
    outputs, grads = [], []
    for checkpointed in (False, True):
        out = denoise_with_grad(linear_velocity(weight), first, SIGMAS, start, end, checkpointed)
        (grad,) = torch.autograd.grad(out.square().sum(), weight)
        outputs.append(out.detach())
        grads.append(grad)
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=0)  # the same forward, recomputed
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=1e-14)


def test_refl_hinge_loss_is_the_reference_relu():
    """ReFL.py: loss = F.relu(-rewards + 2); loss = loss.mean() * grad_scale (1e-3)."""
    rewards = torch.tensor([-1.0, 0.5, 1.99, 2.0, 3.5], dtype=torch.float64)
    reference = torch.nn.functional.relu(-rewards + 2).mean() * 1e-3
    ours = reward_feedback_loss(rewards, "hinge", 1e-3, 2.0).mean()
    torch.testing.assert_close(ours, reference, rtol=1e-15, atol=0)  # the factor applied before the mean: one rounding


def test_alignprop_negative_loss_is_the_reference():
    """AlignProp aesthetic: loss = -1 * rewards * grad_scale (1); loss.mean() * loss_coeff (0.01)."""
    rewards = torch.tensor([4.5, 5.25, 6.0], dtype=torch.float64)
    reference = (-1 * rewards * 1.0).mean() * 0.01
    torch.testing.assert_close(
        reward_feedback_loss(rewards, "negative", 0.01, 2.0).mean(), reference, rtol=1e-15, atol=0
    )


def test_fixed_and_uniform_truncation_draws():
    seeds = torch.arange(400)
    fixed = truncation_draws(seeds, RewardFeedbackConfig(truncation="fixed", truncation_steps=3), 10)
    assert fixed.unique().tolist() == [3]
    # ReFL: mid_timestep = random.randint(30, 39) of 40 steps, K = 40 − mid in 1..10, each value hit
    uniform = truncation_draws(
        seeds, RewardFeedbackConfig(truncation="uniform", truncation_min=1, truncation_max=10), 40
    )
    assert uniform.unique().tolist() == list(range(1, 11))
    again = truncation_draws(seeds, RewardFeedbackConfig(truncation="uniform"), 40)
    assert torch.equal(uniform, again)  # a function of the sample's seed alone


def test_gaussian_truncation_is_alignprops_loop_on_the_same_normals():
    """AlignProp `sd_pipeline.py`: b = int(Normal(42, 5).sample()) until 1 <= b < 50; gradients
    flow through steps b..49, K = 50 − b. Fed the same normals, the draws agree exactly."""
    cfg = RewardFeedbackConfig(truncation="gaussian", truncation_mean=8.0, truncation_std=5.0)
    seeds = torch.arange(200)
    ours = truncation_draws(seeds, cfg, 50)
    for seed, k in zip(seeds.tolist(), ours.tolist()):
        generator = seeded_generator("truncation", seed)
        b = -1
        while b >= 50 or b < 1:
            b = int(42 + 5 * float(torch.randn(1, generator=generator)))
        assert k == 50 - b
    assert 6 <= ours.float().mean() <= 10  # about 8 (the clipping to 1..49 barely moves it)


def test_refl_step_range_matches_the_reference_distribution():
    """K = 40 − randint(30, 39): both give each of 1..10 with probability 1/10 (the draw itself
    comes from each sample's seed here, from the global RNG there)."""
    rng = random.Random(0)
    reference = {40 - rng.randint(30, 39) for _ in range(500)}
    assert reference == set(range(1, 11))


def test_lv_renoises_the_final_sample_to_the_last_sigma():
    """DRaFT-LV: x_{T−1} = (1 − σ_{T−1})·sg(x_T) + σ_{T−1}·ε, a fresh ε per draw, then one step."""
    from genalign.rollout.batch import TrajectoryBatch

    cfg = AlgorithmConfig(name="reward_feedback")
    cfg.reward_feedback = RewardFeedbackConfig(renoise_draws=2)
    algorithm = RewardFeedback(cfg)
    latents = torch.randn(2, 7, 3, generator=torch.Generator().manual_seed(6))
    batch = TrajectoryBatch(
        prompts=["a", "b"],
        prompt_ids=torch.tensor([0, 1]),
        group_ids=torch.tensor([0, 1]),
        seeds=torch.tensor([11, 12]),
        condition=None,  # type: ignore[arg-type]
        latents=latents,
        log_probs=torch.zeros(2, 6),
        sigmas=SIGMAS.float(),
        sde_mask=torch.zeros(2, 6, dtype=torch.bool),
        images=torch.zeros(2, 3, 1, 1, dtype=torch.uint8),
    )
    assert algorithm.train_step_indices(batch) == [0, 1]
    firsts = []
    for position in (0, 1):
        first, start, end = algorithm.chain_start(batch, position, torch.device("cpu"))
        assert start.tolist() == [5, 5] and end.tolist() == [6, 6]
        sigma = float(SIGMAS[5])
        for row, seed in enumerate((11, 12)):
            eps = torch.randn(3, generator=seeded_generator("renoise", seed, position))
            expected = (1 - sigma) * latents[row, -1] + sigma * eps
            torch.testing.assert_close(first[row], expected, rtol=0, atol=1e-6)  # float32, two roundings
        firsts.append(first)
    assert not torch.equal(firsts[0], firsts[1])  # fresh noise per draw


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"truncation_min": 5, "truncation_max": 2}, "truncation_min=5 is above"),
        ({"renoise_draws": 2, "truncation": "uniform"}, "renoise_draws=2"),
        ({"loss_scale": 0.0}, "loss_scale must be > 0"),
        ({"truncation_steps": 0}, "truncation_steps must be >= 1"),
    ],
)
def test_option_problems(options, needle):
    assert any(needle in problem for problem in RewardFeedbackConfig(**options).problems())


def test_memory_declaration_counts_the_longest_chain():
    cfg = AlgorithmConfig(name="reward_feedback")
    cfg.reward_feedback = RewardFeedbackConfig(truncation="uniform", truncation_max=10, grad_steps=0)
    assert RewardFeedback.backprop_forwards(cfg, 40) == (10, False)
    cfg.reward_feedback = RewardFeedbackConfig(truncation="uniform", truncation_max=10, grad_steps=1)
    assert RewardFeedback.backprop_forwards(cfg, 40) == (1, False)  # ReFL: one step with grad
    cfg.reward_feedback = RewardFeedbackConfig(truncation="gaussian", gradient_checkpointing=True)
    assert RewardFeedback.backprop_forwards(cfg, 50) == (49, True)
