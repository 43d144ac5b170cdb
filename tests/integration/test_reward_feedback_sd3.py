"""The SD3.5 AlignProp and DRTune recipes' loops on the tiny random SD3 (a real `StableDiffusion3Pipeline`
shrunk in width and depth): rollout, the chain with grad through the transformer (each step
checkpointed), the VAE decode with grad, a differentiable reward, the LoRA update, a
checkpoint. The HPS model is swapped for the toy shape classifier (the tiny VAE makes 32x32
images from 4x4 latents, what it scores), with the toy world's prompts."""

from __future__ import annotations

import math

import pytest
import torch
from support import read_rows, tiny_overrides

from genalign.preflight.load import load_config
from genalign.training.trainer import Trainer

RECIPES = {  # recipe -> (its overrides for the tiny model, the chain_steps range, supervised_steps range)
    # AlignProp: K in 1..T-1 with T = 3
    "experiment/diffusion/sd3_5/online_alignprop_hpsv21": (
        ["algorithm.reward_feedback.truncation_mean=1.5", "algorithm.reward_feedback.truncation_std=1.0"],
        (1.0, 2.0),
        (1.0, 2.0),
    ),
    # DRTune: the whole chain of T = 3 from the noise, 2 of its steps with grad
    "experiment/diffusion/sd3_5/online_drtune_hpsv21": (
        ["algorithm.reward_feedback.supervised_steps=2"],
        (3.0, 3.0),
        (2.0, 2.0),
    ),
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_reward_feedback_recipe_trains_the_tiny_sd3(tiny_sd3_dir, tmp_path, recipe):
    extra, chain, supervised = RECIPES[recipe]
    out = tmp_path / "run"
    overrides = tiny_overrides(
        tiny_sd3_dir,
        out,
        "rollout.height=32",
        "rollout.width=32",
        "rollout.guidance_scale=2.0",
        "actor.micro_batch_size=1",
        "actor.gradient_accumulation_steps=2",
        *extra,
        "reward.components.jpeg_compressibility=0.0",
        "reward.components.hpsv21=0.0",
        "reward.components.toy_shape=1.0",
        "data.manifest=datasets/toy/train.txt",
        "data.eval_manifest=datasets/toy/test.txt",
        "eval.every=0",
        "trainer.num_steps=2",
        "trainer.save_every=0",
    )
    trainer = Trainer(load_config(recipe, overrides))
    lora = {k: v.clone() for k, v in trainer.policy.transformer.state_dict().items() if "lora" in k}
    trainer.train()
    rows = read_rows(out / "metrics.csv")
    assert [int(r["step"]) for r in rows] == [1, 2]
    for row in rows:
        assert math.isfinite(float(row["loss"])) and float(row["optimizer_steps"]) >= 1.0
        assert chain[0] <= float(row["chain_steps"]) <= chain[1]
        assert supervised[0] <= float(row["supervised_steps"]) <= supervised[1]
    after = trainer.policy.transformer.state_dict()
    assert any(not torch.equal(after[k], v) for k, v in lora.items())  # the reward's gradient moved the LoRA
    assert (out / "checkpoint-final").is_dir()
