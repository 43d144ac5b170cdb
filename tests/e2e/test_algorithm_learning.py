"""Learning tests of the GRPO variant recipes on the CPU demo (slow; fixed seed 42).

For each recipe: the held-out eval reward must rise by REWARD_MARGIN within its step budget
and the judge (gold) must not fall by more than JUDGE_TOLERANCE (the variant learns the
shapes, not a texture that fools the reward model); and a negated-reward control (weight −1,
lr 1e-3, no KL, 40 steps — the default recipe's control) must drive the raw shape reward down
by CONTROL_MARGIN (CONTROL_FALL where measured smaller), which a sign error anywhere in the
variant's path cannot pass.

Margins: measured on the current demo base (seed 42), step 0 at 0.453 reward / 0.470 judge:
  flow_grpo_fast  100 steps: reward 0.875 (+0.422), judge 0.853 (+0.383)
  mix_grpo        100 steps: reward 0.745 (+0.292), judge 0.772 (+0.302)
  cps              60 steps: reward 0.866 (+0.413), judge 0.882 (+0.412)
  dance_grpo       60 steps: reward 0.593 (+0.140), judge 0.613 (+0.143)
  grpo_guard       60 steps: reward 0.866 (+0.413), judge 0.867 (+0.397)
  flow_dppo        60 steps: reward 0.738 (+0.285), judge 0.763 (+0.293)
and their negated controls (40 steps) fall to 0.320 (-0.133), 0.385 (-0.068), 0.028 (-0.425),
0.344 (-0.109), 0.203 (-0.250) and 0.297 (-0.156). Margins sit below the measurements. The 60-step runs are also
benchmarks/bench_time_to_target.py's seed-42 runs (eval every 5 steps): evaluation draws its own
noise, so their step-60 evaluation equals these tests' to the digits above."""

from __future__ import annotations

import pytest
from support import train_recipe as run

pytestmark = pytest.mark.slow
REWARD_MARGIN = 0.10
JUDGE_TOLERANCE = 0.02
CONTROL_MARGIN = 0.10
RECIPES = {  # recipe -> (training steps of its budget, eval-reward margin)
    "experiment/toy/shapes_flow_grpo_fast": (100, 0.05),  # measured +0.422 (previous base +0.066)
    "experiment/toy/shapes_mix_grpo": (100, REWARD_MARGIN),  # measured +0.292 (previous base +0.133)
    "experiment/toy/shapes_cps": (60, REWARD_MARGIN),  # measured +0.413
    # measured +0.140; smaller and noisier than the others (0.64 at step 40, 0.53 at 50, 0.59 at 60)
    "experiment/toy/shapes_dance_grpo": (60, 0.05),
    "experiment/toy/shapes_grpo_guard": (60, REWARD_MARGIN),  # measured +0.413
    "experiment/toy/shapes_flow_dppo": (60, REWARD_MARGIN),  # measured +0.285
}
CONTROL_FALL = {"experiment/toy/shapes_mix_grpo": 0.05, "experiment/toy/shapes_dance_grpo": 0.08}
"""Per-recipe control margin where the measured fall is below or near CONTROL_MARGIN: MixGRPO's fell
0.068 in 40 steps (its window has slid off the first steps by then), DanceGRPO's 0.109 (its
noise level 0.3 moves the policy less per step); a sign error would raise either."""


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
    _, evals = run(
        recipe,
        tmp_path,
        "reward.components.toy_shape=-1.0",
        "actor.lr=1e-3",
        "algorithm.kl_beta=0",
        "trainer.num_steps=40",
        "eval.every=40",
    )
    assert evals[-1]["step"] == 40
    fall = CONTROL_FALL.get(recipe, CONTROL_MARGIN)
    assert evals[0]["eval_reward_toy_shape_mean"] - evals[-1]["eval_reward_toy_shape_mean"] >= fall
