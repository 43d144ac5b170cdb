"""Value checks: numbers that type-check but would fail later are config errors naming the key."""

from __future__ import annotations

import pytest
import torch

from genalign.models.family_checks import size_problems
from genalign.models.spec import family_spec
from genalign.preflight.load import load_config
from genalign.preflight.validate import validate
from genalign.preflight.values import non_finite_problems
from genalign.rollout.config import RolloutConfig

OCR = "experiment/diffusion/sd3_5/online_grpo_ocr"


@pytest.mark.parametrize(
    "key, value, fragment",
    [
        ("actor.lr", float("nan"), "actor.lr must be a finite number"),
        ("actor.lr", -1.0, "actor.lr must be > 0"),
        ("actor.betas", [0.5], "actor.betas must be two numbers"),
        ("actor.ema.decay", 1.0, "actor.ema.decay must be in [0, 1)"),
        ("rollout.guidance_scale", 0.0, "rollout.guidance_scale must be >= 1"),
        ("algorithm.clip_range", float("inf"), "algorithm.clip_range must be a finite number"),
        ("eval.samples_per_prompt", 0, "eval.samples_per_prompt must be positive"),
        ("model.embedded_guidance", 3.5, "model.family=sd3 has no guidance embedding"),
        ("reward.kwargs", {"ocr": {"engin": "x"}}, "did you mean reward.kwargs.ocr.engine"),
        ("reward.kwargs", {"ocr": {"num_threads": "four"}}, "reward.kwargs.ocr.num_threads: expected int"),
        # a scorer's closed option is a Literal too: refused here, not when the scorer is built
        ("reward.kwargs", {"ocr": {"engine": "paddle"}}, "reward.kwargs.ocr.engine='paddle' is not supported"),
        ("model.num_frames", 33, "model.num_frames=33: model.family=sd3 generates images"),
        ("model.num_frames", 0, "model.num_frames must be >= 1"),
        ("model.negative_prompt", "blurry", "model.negative_prompt is set but model.family=sd3"),
    ],
)
def test_each_bad_value_is_one_problem_naming_the_key(key, value, fragment):
    cfg = load_config(OCR)
    *parents, leaf = key.split(".")
    node = cfg
    for part in parents:
        node = getattr(node, part)
    setattr(node, leaf, value)
    problems = validate(cfg)
    assert len(problems) == 1 and fragment in problems[0], problems


@pytest.mark.parametrize(
    "recipe", ["experiment/diffusion/flux/online_grpo_ocr", "experiment/diffusion/qwen_image/online_grpo_ocr"]
)
def test_family_recipes_are_valid_and_check_the_embedded_guidance(recipe):
    cfg = load_config(recipe)
    assert validate(cfg) == []
    cfg.model.embedded_guidance = -1.0
    (problem,) = validate(cfg)
    assert "model.embedded_guidance must be > 0" in problem
    cfg.rollout.height = 520
    assert any("multiple of 16 for model.family=" in p for p in validate(cfg))


def test_non_finite_numbers_are_found_anywhere_in_the_tree():
    cfg = load_config(OCR)
    cfg.reward.components["ocr"] = float("nan")
    cfg.reward.kwargs = {"ocr": {"x": [1.0, float("-inf")]}}
    assert non_finite_problems(cfg) == [
        "reward.components.ocr must be a finite number, got nan",
        "reward.kwargs.ocr.x[1] must be a finite number, got -inf",
    ]


def test_image_sizes_follow_the_family_patch_and_a_global_bound():
    sd3, toy = family_spec("sd3"), family_spec("toy")
    assert size_problems(sd3, 512, 768) == []
    assert "multiple of 16" in size_problems(sd3, 520, 512)[0] and "512 or 528" in size_problems(sd3, 520, 512)[0]
    assert size_problems(toy, 32, 32) == [] and "32x32" in size_problems(toy, 16, 32)[0]
    assert RolloutConfig(height=100_000).problems() == ["rollout.height=100000 is too large (max 4096 pixels a side)"]
    assert size_problems(sd3, 100_000, 512) == []  # the bound's message alone


def test_the_wan_recipe_composes_and_validates():
    cfg = load_config("experiment/diffusion/wan_2_1/online_grpo_pickscore")
    assert validate(cfg) == []
    assert (cfg.model.family, cfg.model.path, cfg.model.num_frames) == ("wan", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", 1)
    # DanceGRPO's finetune_wan_2_1_grpo.sh: full fine-tune, 512x512, lr 1e-5, 20 steps, CFG 5,
    # η 0.3 constant-noise SDE, 12 per group sharing x_T, 60 % of the steps, no KL, grad clip 1
    assert (cfg.model.train_mode, cfg.actor.lr, cfg.actor.weight_decay, cfg.actor.max_grad_norm) == (
        "full",
        1e-5,
        1e-4,
        1.0,
    )
    assert (cfg.rollout.height, cfg.rollout.width, cfg.rollout.guidance_scale, cfg.rollout.num_steps) == (
        512,
        512,
        5.0,
        20,
    )
    assert (cfg.rollout.kernel, cfg.rollout.noise_level, cfg.rollout.n, cfg.rollout.same_initial_noise) == (
        "dance_sde",
        0.3,
        12,
        True,
    )
    assert (cfg.algorithm.timestep_fraction, cfg.algorithm.kl_beta, cfg.actor.ema.enabled) == (0.6, 0.0, False)
    # the model preset's LoRA (used with model.train_mode=lora) is Pref-GRPO's
    assert (cfg.model.lora.rank, cfg.model.lora.alpha) == (64, 128.0)
    assert cfg.model.lora.target_modules == ["to_q", "to_k", "to_v", "to_out.0"]
    assert cfg.reward.components == {"pickscore": 1.0} and cfg.reward.video_reduction == "mean"
    cfg.model.negative_prompt = "blurry, static"  # Wan reads it
    cfg.rollout.height = 488
    problems = validate(cfg)
    assert len(problems) == 1 and "rollout.height=488 must be a multiple of 16 for model.family=wan" in problems[0]


def test_the_cosmos_recipe_composes_and_validates():
    from diffusers.pipelines.cosmos.pipeline_cosmos2_5_predict import DEFAULT_NEGATIVE_PROMPT

    cfg = load_config("experiment/diffusion/cosmos/online_grpo_pickscore")
    assert validate(cfg) == []
    assert (cfg.model.family, cfg.model.path, cfg.model.revision) == (
        "cosmos",
        "nvidia/Cosmos-Predict2.5-2B",
        "diffusers/base/post-trained",
    )
    assert cfg.model.negative_prompt == DEFAULT_NEGATIVE_PROMPT  # the pipeline's default, verbatim
    assert (cfg.model.num_frames, cfg.rollout.guidance_scale, cfg.eval.num_steps) == (33, 7.0, 35)
    assert (cfg.model.lora.rank, cfg.model.lora.alpha) == (32, 32.0)
    assert cfg.model.lora.target_modules == ["to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2"]
    assert cfg.reward.components == {"pickscore": 1.0} and cfg.reward.video_reduction == "mean"
    cfg.model.num_frames = 1  # text-to-image mode is a video family's single frame
    assert validate(cfg) == []
    cfg.rollout.width = 840
    problems = validate(cfg)
    assert len(problems) == 1 and "rollout.width=840 must be a multiple of 16 for model.family=cosmos" in problems[0]


def test_qwen_image_recipe_trains_flow_grpo_s_window():
    """config/grpo.py pickscore_qwenimage: noise 1.2 in a random window of 2 of the first 5 of
    10 steps; only the window's steps are stochastic and trained."""
    from types import SimpleNamespace

    from genalign.algorithms.grpo import FlowGRPO
    from genalign.training.setup import rollout_spec

    cfg = load_config("experiment/diffusion/qwen_image/online_grpo_ocr")
    assert (cfg.rollout.noise_level, cfg.rollout.num_steps) == (1.2, 10)
    algorithm = FlowGRPO(cfg.algorithm)
    for step in range(1, 30):
        mask = rollout_spec(cfg).at_step(step).sde_mask()  # [10]
        stochastic = torch.nonzero(mask).flatten().tolist()
        assert len(stochastic) == 2 and stochastic[1] == stochastic[0] + 1 and stochastic[1] < 5, stochastic
        batch = SimpleNamespace(sde_mask=mask.expand(4, -1), num_steps=10, seeds=torch.arange(4))
        assert algorithm.trained_steps(batch).tolist() == [stochastic] * 4


def test_integers_past_64_bits_are_named_with_their_key():
    from genalign.preflight.values import int64_problems

    cfg = load_config(None)
    assert int64_problems(cfg) == []
    cfg.trainer.seed = 2**63
    cfg.model.lora.rank = -(2**63) - 1
    cfg.reward.kwargs = {"random": {"seed": 10**20}}
    assert int64_problems(cfg) == [
        "model.lora.rank=-9223372036854775809 does not fit in a 64-bit integer (|value| < 2**63); use a smaller number",
        "reward.kwargs.random.seed=100000000000000000000 does not fit in a 64-bit integer (|value| < 2**63); use a "
        "smaller number",
        "trainer.seed=9223372036854775808 does not fit in a 64-bit integer (|value| < 2**63); use a smaller number",
    ]
    cfg.trainer.seed = 2**63 - 1  # the largest that fits is accepted
    assert not any(p.startswith("trainer.seed") for p in int64_problems(cfg))
