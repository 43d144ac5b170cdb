"""StepSizes numbers, worked out by hand from the recipe values."""

from __future__ import annotations

import dataclasses

import pytest

from genalign.config.errors import ConfigError
from genalign.config.loader import config_to_dict
from genalign.preflight.load import load_config
from genalign.preflight.step_sizes import StepSizes

OCR = "experiment/diffusion/sd3_5/online_grpo_ocr"


def test_ocr_recipe_sizes():
    plan = StepSizes.from_config(load_config(OCR))
    assert plan == StepSizes(
        prompts_per_step=8,
        samples_per_prompt=8,
        samples_per_step=64,  # 8 groups x G=8
        rollout_micro_batch=8,
        train_micro_batch=8,  # micro_batch_size null -> the rollout's
        micro_batches_per_step=8,  # 64 / 8
        optimizer_steps_per_step=2,  # 8 micro-batches x 1 inner epoch / accumulation 4
        num_train_timesteps=9,  # int(10 x 0.99)
        uses_cfg=True,  # guidance 4.5
        needs_reference=True,  # kl_beta 0.04
    )
    line = plan.describe()
    assert "\n" not in line
    for fragment in ["64 samples/step", "8 micro-batches", "2 optimizer step(s)/step", "9 trained"]:
        assert fragment in line


def test_explicit_train_micro_batch_and_inner_epochs():
    cfg = load_config(
        OCR,
        ["actor.micro_batch_size=4", "actor.num_inner_epochs=2", "rollout.guidance_scale=1.0", "algorithm.kl_beta=0.0"],
    )
    plan = StepSizes.from_config(cfg)
    assert (plan.rollout_micro_batch, plan.train_micro_batch, plan.micro_batches_per_step) == (8, 4, 16)
    assert plan.optimizer_steps_per_step == 8  # 16 x 2 / 4
    assert (plan.uses_cfg, plan.needs_reference) == (False, False)


def test_sizes_are_derived_never_written_back():
    cfg = load_config(OCR)
    before = config_to_dict(cfg)
    plan = StepSizes.from_config(cfg)
    assert config_to_dict(cfg) == before
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.samples_per_step = 1


def test_from_config_refuses_sizes_that_train_nothing():
    cfg = load_config(OCR)
    cfg.algorithm.timestep_fraction = 0.05
    cfg.actor.gradient_accumulation_steps = 0
    with pytest.raises(ConfigError) as info:
        StepSizes.from_config(cfg)
    assert len(info.value.problems) == 2
