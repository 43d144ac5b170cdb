"""DRTune's math (docs/algorithms.md §10, "DRTune") against short transcriptions of the paper's
rules on the same inputs: the whole chain from the noise, the denoiser's input detached at
every step (v̂(sg(x_j))), grad only at equally spaced supervised steps, an optional early
stop at a predicted x̂0. The paper ships no code (docs/algorithm_references.md), so the
transcriptions are of its description."""

import pytest
import torch
from support import linear_velocity

from genalign.algorithms.config import AlgorithmConfig, RewardFeedbackConfig
from genalign.algorithms.forward_draws import seeded_generator
from genalign.algorithms.reward_feedback import (
    RewardFeedback,
    chain_bounds,
    denoise_with_grad,
    early_stop_draws,
    supervised_draws,
    truncation_draws,
)

SIGMAS = torch.linspace(1.0, 0.0, 11, dtype=torch.float64)  # T = 10


def test_supervised_steps_are_equally_spaced_at_a_seeded_offset():
    """The paper's subset: K of the chain's L steps, spacing ⌊L / K⌋, the offset drawn so the
    last stays inside; transcribed per sample from the same seeded generator."""
    seeds = torch.arange(300)
    start, end = torch.zeros(300, dtype=torch.long), torch.full((300,), 10)
    mask = supervised_draws(seeds, start, end, 3, 10)
    offsets = set()
    for row, seed in enumerate(seeds.tolist()):
        spacing = 10 // 3  # 3
        offset = int(torch.randint(0, 10 - 2 * spacing, (1,), generator=seeded_generator("supervised", seed)))
        expected = [offset + i * spacing for i in range(3)]
        assert mask[row].nonzero().squeeze(1).tolist() == expected
        offsets.add(offset)
    assert offsets == {0, 1, 2, 3}  # every offset that keeps step offset + 6 <= 9 is drawn
    assert torch.equal(mask, supervised_draws(seeds, start, end, 3, 10))  # a function of the seed alone


def test_supervised_steps_stay_inside_each_samples_chain():
    seeds = torch.tensor([1, 2, 3])
    start, end = torch.tensor([0, 4, 7]), torch.tensor([10, 8, 10])
    mask = supervised_draws(seeds, start, end, 5, 10)
    assert mask[0].sum() == 5 and mask[0].nonzero().squeeze(1).diff().unique().tolist() == [2]
    assert mask[1].nonzero().squeeze(1).tolist() == [4, 5, 6, 7]  # a chain of <= K steps keeps them all
    assert mask[2].nonzero().squeeze(1).tolist() == [7, 8, 9]


def test_early_stop_is_uniform_on_0_to_max_from_the_seed():
    seeds = torch.arange(400)
    draws = early_stop_draws(seeds, 4)
    for seed, n in zip(seeds.tolist()[:50], draws.tolist()[:50]):
        assert n == int(torch.randint(0, 5, (1,), generator=seeded_generator("early_stop", seed)))
    assert draws.unique().tolist() == [0, 1, 2, 3, 4]


def drtune_chain(weight, first, supervised, stop_input_gradient=True, end=None):
    start = torch.zeros(len(first), dtype=torch.long)
    end = torch.full((len(first),), 10) if end is None else end
    return denoise_with_grad(linear_velocity(weight), first, SIGMAS, start, end, False, supervised, stop_input_gradient)


def euler_states(weight, first, last_step, jump_to_x0):
    """The plain Euler chain from x_0 (no grad), every state x_0 … x_e and the result."""
    states, x = [], first.clone()
    for j in range(last_step + 1):
        states.append(x)
        v = x @ weight.T + SIGMAS[j]
        target = 0.0 if (jump_to_x0 and j == last_step) else SIGMAS[j + 1]
        x = x + (target - SIGMAS[j]) * v
    return states, x


def test_the_subset_and_the_stop_gradient_leave_the_chains_value_alone():
    """Only gradients change: the chain's x̂0 is the plain Euler chain's."""
    weight = torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 0.3
    first = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    supervised = supervised_draws(torch.arange(4), torch.zeros(4, dtype=torch.long), torch.full((4,), 10), 3, 10)
    ours = drtune_chain(weight, first, supervised)
    _, reference = euler_states(weight, first, 9, jump_to_x0=False)
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-14)  # the same operations, float64


def test_drtune_gradient_is_the_supervised_steps_own_terms():
    """With v̂(sg(x_j)), ∂x̂0/∂x_j = I through the update's x term, so for L = ⟨c, x̂0⟩:
    ∇_W L = Σ_b Σ_{j ∈ S_b} (σ'_j − σ_j)·c_b x_{b,j}ᵀ, σ'_j the step's target (σ_{j+1}, or 0 at
    an early stop's last step) — the paper's rule, written out for the linear denoiser."""
    weight = (torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 0.3).requires_grad_()
    first = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    c = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    end = torch.tensor([10, 7])  # the second sample stops early: its step 6 jumps to x̂0
    supervised = supervised_draws(torch.tensor([5, 6]), torch.zeros(2, dtype=torch.long), end, 3, 10)
    out = drtune_chain(weight, first, supervised, end=end)
    (ours,) = torch.autograd.grad((c * out).sum(), weight)
    reference = torch.zeros(3, 3, dtype=torch.float64)
    with torch.no_grad():
        for row in range(2):
            last = int(end[row]) - 1
            states, _ = euler_states(weight, first[row : row + 1], last, jump_to_x0=True)
            for j in supervised[row].nonzero().squeeze(1).tolist():
                target = 0.0 if j == last else float(SIGMAS[j + 1])
                reference += (target - float(SIGMAS[j])) * c[row][:, None] * states[j][0][None, :]
    torch.testing.assert_close(ours, reference, rtol=1e-12, atol=1e-14)  # a few dozen float64 roundings


def test_without_the_stop_gradient_the_input_jacobian_adds_terms():
    """The control: the same supervised steps with the input left attached give another gradient
    (the (I + Δσ·W)ᵀ products of full backprop), so the stop-gradient is what the test above saw."""
    weight = (torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 0.3).requires_grad_()
    first = torch.randn(2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    supervised = supervised_draws(torch.tensor([5, 6]), torch.zeros(2, dtype=torch.long), torch.full((2,), 10), 3, 10)
    grads = [
        torch.autograd.grad(drtune_chain(weight, first, supervised, stop).sum(), weight)[0] for stop in (True, False)
    ]
    assert (grads[0] - grads[1]).abs().max() > 1e-3


def test_chain_start_runs_the_whole_chain_with_an_early_stop():
    from genalign.rollout.batch import TrajectoryBatch

    cfg = AlgorithmConfig(name="reward_feedback")
    cfg.reward_feedback = RewardFeedbackConfig(truncation="full", supervised_steps=3, early_stop_max=3)
    latents = torch.randn(3, 11, 2, generator=torch.Generator().manual_seed(7))
    seeds = torch.tensor([21, 22, 23])
    batch = TrajectoryBatch(
        prompts=["a", "b", "c"],
        prompt_ids=torch.tensor([0, 1, 2]),
        group_ids=torch.tensor([0, 1, 2]),
        seeds=seeds,
        condition=None,  # type: ignore[arg-type]
        latents=latents,
        log_probs=torch.zeros(3, 10),
        sigmas=SIGMAS.float(),
        sde_mask=torch.zeros(3, 10, dtype=torch.bool),
        images=torch.zeros(3, 3, 1, 1, dtype=torch.uint8),
    )
    first, start, end = RewardFeedback(cfg).chain_start(batch, 0, torch.device("cpu"))
    assert truncation_draws(seeds, cfg.reward_feedback, 10).tolist() == [10, 10, 10]
    assert start.tolist() == [0, 0, 0] and torch.equal(first, latents[:, 0])  # the stored noise
    assert end.tolist() == (10 - early_stop_draws(seeds, 3)).tolist()


def test_drtune_memory_counts_the_supervised_forwards():
    cfg = AlgorithmConfig(name="reward_feedback")
    cfg.reward_feedback = RewardFeedbackConfig(truncation="full", supervised_steps=5, stop_input_gradient=True)
    assert RewardFeedback.backprop_forwards(cfg, 50) == (5, False)
    cfg.reward_feedback = RewardFeedbackConfig(truncation="full")
    assert RewardFeedback.backprop_forwards(cfg, 50) == (50, False)  # full backprop, for contrast
    assert chain_bounds(torch.tensor([50]), 50, 0)[0].tolist() == [0]


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"supervised_steps": -1}, "supervised_steps and early_stop_max must be >= 0"),
        ({"early_stop_max": 2, "grad_steps": 1}, "early_stop_max=2 draws the chain's end"),
    ],
)
def test_drtune_option_problems(options, needle):
    assert any(needle in problem for problem in RewardFeedbackConfig(**options).problems())
