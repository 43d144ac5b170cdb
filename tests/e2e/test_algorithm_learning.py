"""Learning tests of the GRPO variant recipes on the CPU demo (slow; fixed seed 42).

For each recipe: the held-out eval reward must rise by REWARD_MARGIN within its step budget
and the judge (gold) must not fall by more than JUDGE_TOLERANCE (the variant learns the
shapes, not a texture that fools the reward model); and a negated-reward control (weight −1,
lr 1e-3, no KL, 40 steps — the default recipe's control) must drive the raw shape reward down
by CONTROL_MARGIN, which a sign error anywhere in the variant's path cannot pass.

Margins: the default recipe measured +0.21 eval reward and +0.14 judge at 100 steps
(shapes_grpo.yaml) and −0.15 or more in its control; the variants share its loss and
optimiser, so their margins are set below that. They were not all measured on the shared
2-core box before being committed (see the variants branch report); recalibrate them from
`benchmarks/bench_time_to_target.py` output on a quiet machine.
"""

from __future__ import annotations

import pytest

from support import train_recipe as run

# `calibration`: the margins below were measured on the 16x16 demo base (or, for some variants,
# not yet measured); the demo is now 32x32 with another base model, so until they are measured
# again these run on request (`pytest -m calibration`), not in CI's slow pass.
pytestmark = [pytest.mark.slow, pytest.mark.calibration]

REWARD_MARGIN = 0.10
JUDGE_TOLERANCE = 0.02
CONTROL_MARGIN = 0.10
RECIPES = {  # recipe -> (training steps of its budget, eval-reward margin)
    # measured (seed 42, 100 steps): eval reward 0.465 -> 0.532, judge 0.465 -> 0.561
    "experiment/toy/shapes_flow_grpo_fast": (100, 0.05),
    # not yet measured: the default recipe's size of effect, scaled down
    "experiment/toy/shapes_mix_grpo": (100, REWARD_MARGIN),
    "experiment/toy/shapes_cps": (100, REWARD_MARGIN),
    "experiment/toy/shapes_dance_grpo": (100, REWARD_MARGIN),
    "experiment/toy/shapes_grpo_guard": (100, REWARD_MARGIN),
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_variant_learns_held_out_shapes(recipe, tmp_path):
    steps, margin = RECIPES[recipe]
    metrics, evals = run(recipe, tmp_path, f"trainer.num_steps={steps}", f"eval.every={steps}")
    assert metrics[0]["parity_max_abs_log_prob_diff"] == 0.0  # ratio ≡ 1 before the first update
    first, last = evals[0], evals[-1]
    assert first["step"] == 0 and last["step"] == steps
    assert last["eval_reward_mean"] - first["eval_reward_mean"] >= margin
    assert last["gold_mean"] >= first["gold_mean"] - JUDGE_TOLERANCE


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_variant_negated_reward_control_falls(recipe, tmp_path):
    _, evals = run(recipe, tmp_path, "reward.components.toy_shape=-1.0", "actor.lr=1e-3", "algorithm.kl_beta=0",
                   "trainer.num_steps=40", "eval.every=40")
    assert evals[-1]["step"] == 40
    assert evals[0]["eval_reward_toy_shape_mean"] - evals[-1]["eval_reward_toy_shape_mean"] >= CONTROL_MARGIN
