"""Reward feedback against the reward contract and the config checks, before any model loads:
only scorers that declare `differentiable` (with `score_pixels`), in the trainer's process,
summed, on a family with a differentiable decode; the presets and recipes compose; the memory
plan counts the chain."""

import pytest

from genalign.config.errors import ConfigError
from genalign.preflight import memory_plan as mp
from genalign.preflight.load import load_config
from genalign.rewards.base import contract_problems, is_differentiable
from genalign.rewards.registry import REWARDS

DRAFT = "experiment/toy/shapes_draft"
DIFFERENTIABLE = {
    "aesthetic",
    "clip_score",
    "hpsv2",
    "hpsv21",
    "image_reward",
    "pickscore",
    "toy_shape",
    "toy_shape_judge",
}
"""The shipped scorers that are torch modules able to give image gradients."""


def problems(recipe: str, *overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        load_config(recipe, list(overrides), check_files=False)
    return error.value.problems


def test_the_shipped_differentiable_scorers_declare_it_and_keep_the_contract():
    declared = {name for name in REWARDS.names() if is_differentiable(REWARDS.resolve(name))}
    assert declared == DIFFERENTIABLE
    for name in declared:
        assert contract_problems(REWARDS.resolve(name), f"reward.components.{name}") == []


def test_a_class_declaring_differentiable_without_score_pixels_breaks_the_contract():
    class Claims:
        differentiable = True

        def __init__(self, device="cpu"):
            pass

        def score(self, images, prompts, metadata):
            return images

    [problem] = contract_problems(Claims, "reward.components.my:Claims")
    assert "declares differentiable=True but has no score_pixels" in problem


@pytest.mark.parametrize("preset", ["refl", "draft_k", "draft_lv", "alignprop", "drtune"])
def test_each_preset_composes_on_the_toy_demo(preset):
    cfg = load_config(DRAFT, [f"/base/algorithm={preset}"], check_files=False)
    assert cfg.algorithm.name == "reward_feedback" and cfg.rollout.noise_level == 0


def test_a_scorer_without_gradients_is_a_config_error_naming_it():
    found = problems(DRAFT, "reward.components.toy_color_area=1.0")
    [problem] = [p for p in found if "toy_color_area" in p]
    assert problem.startswith("reward.components.toy_color_area: algorithm.name=reward_feedback")
    assert "ToyColorAreaReward gives no image gradients" in problem
    assert "toy_shape" in problem  # the differentiable ones are listed


def test_a_zero_weight_scorer_is_not_built_so_not_refused():
    load_config(DRAFT, ["reward.components.toy_color_area=0.0"], check_files=False)


def test_a_remote_runtime_and_a_sde_rollout_are_refused():
    found = problems(DRAFT, "reward.runtime=ray", "rollout.noise_level=0.7", "algorithm.kl_beta=0.1")
    assert any(p.startswith("reward.runtime=ray: algorithm.name=reward_feedback") for p in found)
    assert any("set rollout.noise_level=0" in p for p in found)
    assert any("set algorithm.kl_beta=0" in p for p in found)


def test_a_reward_feedback_option_under_another_algorithm_is_refused():
    found = problems("experiment/toy/shapes_grpo", "algorithm.reward_feedback.truncation_steps=3")
    assert any(p.startswith("algorithm.reward_feedback.truncation_steps=3 is a reward feedback option") for p in found)


def test_the_sd3_recipe_validates_and_the_plan_counts_the_chain():
    recipe = "experiment/diffusion/sd3_5/online_alignprop_hpsv21"
    cfg = load_config(recipe, [], check_files=False)
    assert cfg.algorithm.reward_feedback.truncation == "gaussian" and cfg.rollout.num_steps == 50
    lines = dict(mp.estimate_memory(cfg).roles[0].lines)
    [chain] = [what for what in lines if what.startswith("replay activations")]
    assert "x 49 chained steps (each step checkpointed)" in chain
    unchained = load_config(recipe, ["algorithm.reward_feedback.gradient_checkpointing=false"], check_files=False)
    plain = dict(mp.estimate_memory(unchained).roles[0].lines)
    [kept] = [what for what in plain if what.startswith("replay activations")]
    # 49 forwards kept whole against one recomputed forward plus 49 small latent inputs
    assert plain[kept] > 30 * lines[chain]
