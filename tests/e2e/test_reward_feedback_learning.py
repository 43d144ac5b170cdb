"""Reward feedback (DRaFT-1, experiment/toy/shapes_draft; DRTune, experiment/toy/shapes_drtune)
learns on the CPU demo, and its negated control does not: minimising the reward must lower it.

The recipe runs through the CLI; the held-out evaluation (8 held-out-colour prompts x 16
samples, Euler ODE) at step 0 and at the end gives the `toy_shape` reward and the independent
judge (`gold_mean`). Measured on the current demo base (seed 42, one thread; step 0 is 0.453
reward / 0.470 judge):
  step 10  reward 0.508 (+0.055), judge 0.539 (+0.069); negated: reward 0.357 (−0.096)
  step 30  reward 0.797 (+0.344), judge 0.771 (+0.301); negated: reward 0.185 (−0.268)
(NFT, the fastest algorithm before this, reaches 0.827 at step 50: tests/e2e/test_nft_dpo_learning.py.)
Margins sit below the measurements. The 10-step pair is in the default suite, the 30-step one
is slow.
"""

from __future__ import annotations

import pytest
from support import train_recipe

RECIPE = "experiment/toy/shapes_draft"
CASES = {  # steps -> (minimum reward rise, minimum judge rise, minimum fall under the negated reward)
    10: (0.025, 0.03, 0.04),
    30: (0.2, 0.15, 0.1),
}


def gains(tmp_path, steps: int, *overrides: str, recipe: str = RECIPE) -> tuple[float, float]:
    _, evals = train_recipe(recipe, tmp_path, f"trainer.num_steps={steps}", f"eval.every={steps}", *overrides)
    assert evals[0]["step"] == 0 and evals[-1]["step"] == steps
    first, last = evals[0], evals[-1]
    return last["eval_reward_toy_shape_mean"] - first["eval_reward_toy_shape_mean"], last["gold_mean"] - first[
        "gold_mean"
    ]


@pytest.mark.parametrize("steps", [10, pytest.param(30, marks=pytest.mark.slow)])
def test_draft_raises_held_out_reward_and_judge(tmp_path, steps):
    reward, judge = gains(tmp_path, steps)
    assert reward >= CASES[steps][0]
    assert judge >= CASES[steps][1]


@pytest.mark.parametrize("steps", [10, pytest.param(30, marks=pytest.mark.slow)])
def test_draft_minimising_the_reward_lowers_it(tmp_path, steps):
    reward, _ = gains(tmp_path, steps, "reward.components.toy_shape=-1.0")
    assert -reward >= CASES[steps][2]


# DRTune (experiment/toy/shapes_drtune). Measured on the current demo base (seed 42, one thread):
#   step 10  reward 0.614 (+0.161), judge 0.678 (+0.207); negated: reward 0.329 (−0.125)
#   step 20  reward 0.902 (+0.449), judge 0.899 (+0.429); negated: reward 0.012 (−0.441)
#   step 30  reward 0.956 (+0.503), judge 0.950 (+0.480); negated: reward 0.000 (−0.453)
# A 10-step run costs about ten DRaFT-1 steps' worth of chain forwards (10 steps, 5 with grad),
# minutes on a shared CPU, so both pairs are slow; the default suite keeps the fast check below.
DRTUNE = "experiment/toy/shapes_drtune"
DRTUNE_CASES = {  # steps -> (minimum reward rise, minimum judge rise, minimum fall under the negated reward)
    10: (0.08, 0.1, 0.06),
    30: (0.35, 0.3, 0.1),
}


@pytest.mark.slow
@pytest.mark.parametrize("steps", [10, 30])
def test_drtune_raises_held_out_reward_and_judge(tmp_path, steps):
    reward, judge = gains(tmp_path, steps, recipe=DRTUNE)
    assert reward >= DRTUNE_CASES[steps][0]
    assert judge >= DRTUNE_CASES[steps][1]


@pytest.mark.slow
@pytest.mark.parametrize("steps", [10, 30])
def test_drtune_minimising_the_reward_lowers_it(tmp_path, steps):
    reward, _ = gains(tmp_path, steps, "reward.components.toy_shape=-1.0", recipe=DRTUNE)
    assert -reward >= DRTUNE_CASES[steps][2]


def drtune_step_change(sign: float) -> float:
    """The demo model's chain reward on 8 fixed prompts before and after 3 Adam steps of the
    DRTune preset's loss on them (the output projection trained, the toy reward weighted by
    `sign`): the change of the unsigned P(prompted shape), averaged."""
    import torch

    from genalign.algorithms.config import AlgorithmConfig, RewardFeedbackConfig
    from genalign.algorithms.reward_feedback import RewardFeedback
    from genalign.models.base import SharedCondition
    from genalign.models.toy.policy import ToyPolicy
    from genalign.rewards.composite import LocalRewardRuntime
    from genalign.rewards.toy import ToyShapeReward
    from genalign.rollout.batch import TrajectoryBatch
    from genalign.sampling.trajectory import sample_trajectory

    torch.manual_seed(0)
    policy = ToyPolicy.from_pretrained()
    policy.transformer.requires_grad_(False)
    trained = list(policy.transformer.proj_out.parameters())
    for p in trained:
        p.requires_grad_(True)
    prompts = [f"a {c} {s}" for c in ("red", "blue") for s in ("circle", "square", "triangle", "cross")]
    cond = policy.encode_prompts(prompts, with_negative=False)
    sigmas, steps = policy.sigmas(10, (3, 32, 32)), 10
    seeds = torch.arange(len(prompts)) + 7
    generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
    noise = torch.stack([torch.randn(3, 32, 32, generator=g) for g in generators])
    with torch.no_grad():
        sampled = sample_trajectory(
            policy, cond, noise, generators, sigmas, 1.0, 0.0, torch.zeros(steps, dtype=torch.bool)
        )
    rows = torch.arange(len(prompts))
    sde_mask = torch.zeros(len(prompts), steps, dtype=torch.bool)
    images = torch.zeros(len(prompts), 3, 32, 32, dtype=torch.uint8)
    condition = SharedCondition.of(cond, rows)
    batch = TrajectoryBatch(
        prompts, rows, rows, seeds, condition, sampled.latents, sampled.log_probs, sigmas, sde_mask, images
    )
    cfg = AlgorithmConfig(name="reward_feedback", drop_zero_advantage=False)
    cfg.reward_feedback = RewardFeedbackConfig(truncation="full", supervised_steps=5, stop_input_gradient=True)
    algorithm = RewardFeedback(cfg)
    algorithm.attach_rewards(LocalRewardRuntime({"toy_shape": ToyShapeReward()}, {"toy_shape": sign}, 64))
    optimizer = torch.optim.Adam(trained, lr=1e-3)
    rewards = []
    for _ in range(4):
        loss, stats = algorithm.compute_loss(policy, batch, torch.zeros(len(prompts)), 0)
        rewards.append(float(stats["feedback_reward"].mean()) * sign)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return rewards[-1] - rewards[0]


def test_drtune_steps_move_the_chain_reward_with_the_sign_of_the_reward():
    """The fast learning check in the default suite: 3 DRTune steps on fixed prompts raise the
    chain's P(prompted shape), and with the reward negated lower it (measured +0.093 and
    −0.151; the margins sit well below, far above float32 rounding of a mean of 8 scores)."""
    assert drtune_step_change(1.0) >= 0.03
    assert drtune_step_change(-1.0) <= -0.05
