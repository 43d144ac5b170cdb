"""A model family added from outside the package (tests/user_family.py: one module, a policy
class and its FamilySpec) is selected by its dotted path, allowed by model.allow_import as a
user's scorer is by reward.allow_import, checked from its spec, and trained by the real trainer."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from support import read_rows

from genalign.config.errors import ConfigError
from genalign.preflight.load import load_config
from genalign.preflight.stored_config import config_from_checkpoint
from genalign.training.trainer import Trainer

FAMILY = "user_family:SPEC"


def overrides(out, *extra: str) -> list[str]:
    return [
        f"model.family={FAMILY}",
        f"model.allow_import=[{FAMILY}]",
        "model.path=random",
        "model.device=cpu",
        "model.lora.rank=4",
        "model.lora.alpha=8",
        "rollout.num_steps=4",
        "algorithm.timestep_fraction=0.5",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=4",
        "actor.gradient_accumulation_steps=1",
        "actor.lr=1e-2",
        "reward.components={jpeg_compressibility: 1.0}",
        "reward.components.toy_shape=0.0",
        "eval.gold_rewards.toy_shape_judge=0.0",
        "eval.quality_metrics=[]",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.samples_per_prompt=2",
        "eval.batch_size=4",
        "eval.every=2",
        "trainer.num_steps=2",
        "trainer.save_every=0",
        f"trainer.output_dir={out}",
        "trainer.progress_bar=false",
        *extra,
    ]


def test_the_family_must_be_allowed_and_its_spec_checks_the_config(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"model.family: 'user_family:SPEC' is a Python import path.*"
        r"model.allow_import=\[user_family:SPEC\]",
    ):
        load_config("experiment/toy/shapes_grpo", [o for o in overrides(tmp_path) if "allow_import" not in o])
    with pytest.raises(ConfigError) as caught:
        load_config(
            "experiment/toy/shapes_grpo",
            overrides(tmp_path, "rollout.height=36", "model.num_frames=5", "model.offload_text_encoders=true"),
        )
    problems = "\n".join(caught.value.problems)
    assert "rollout.height=36 must be a multiple of 8 for model.family=pixel_sd3" in problems
    assert "model.num_frames=5: model.family=pixel_sd3 generates images" in problems
    assert "model.offload_text_encoders=true: model.family=pixel_sd3 has no separate text encoders" in problems
    assert "model.path" not in problems  # "random" is the family's builtin path, no directory


def test_a_checkpoints_own_allow_list_is_never_trusted(tmp_path):
    stored = dataclasses.asdict(load_config("experiment/toy/shapes_grpo", overrides(tmp_path)))
    assert stored["model"]["allow_import"] == [FAMILY]
    with pytest.raises(ConfigError, match="is a Python import path"):
        config_from_checkpoint(stored, "checkpoint/config.yaml", {}, check_machine=False)
    cfg = config_from_checkpoint(stored, "checkpoint/config.yaml", {"model": [FAMILY]}, check_machine=False)
    assert cfg.model.allow_import == [FAMILY]


def test_the_user_family_trains_through_the_real_trainer(tmp_path):
    out = tmp_path / "run"
    trainer = Trainer(load_config("experiment/toy/shapes_grpo", overrides(out)))
    assert trainer.policy.family == "pixel_sd3" and trainer.policy.spec.sampler == "flow"
    before = {k: v.clone() for k, v in trainer.parameters.items()}
    trainer.train()
    rows = read_rows(out / "metrics.csv")
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert float(rows[0]["parity_max_abs_log_prob_diff"]) == 0.0
    assert all(math.isfinite(float(r["policy_loss"])) for r in rows)
    assert any(not torch.equal(before[k], v) for k, v in trainer.parameters.items())
    assert (out / "checkpoint-final").is_dir() and not (out / "checkpoint-final" / "lora").exists()  # export none
