"""Flags that diffusers' and TRL's users type: `--report_to` works, the others answer with
the override that does the same, and a usage error is a few lines, not the recipe catalog."""

from __future__ import annotations

import pytest
import yaml

from genalign.cli import main
from genalign.config.errors import ConfigError
from genalign.config.habit_flags import report_to_loggers, split_habit_flags


@pytest.mark.parametrize(
    "value, override",
    [
        ("wandb", "trainer.loggers=[csv,wandb]"),
        ("tensorboard,wandb", "trainer.loggers=[csv,tensorboard,wandb]"),
        ("none", "trainer.loggers=[csv]"),
        ("all", "trainer.loggers=[csv,tensorboard,wandb,mlflow]"),
    ],
)
def test_report_to_names_the_trackers_beside_csv(value, override):
    assert report_to_loggers(value) == override
    assert split_habit_flags(["--report_to", value, "a=1"]) == (["a=1"], [override])
    assert split_habit_flags([f"--report-to={value}"]) == ([], [override])


def test_other_habit_flags_are_answered_with_their_override_one_line_each():
    with pytest.raises(ConfigError) as err:
        split_habit_flags(
            [
                "--learning_rate",
                "1e-4",
                "--mixed_precision=bf16",
                "--gradient_checkpointing",
                "--resume_from_checkpoint",
                "latest",
                "--dataset_name",
                "me/prompts",
                "rollout.n=4",
            ]
        )
    assert err.value.problems == [
        "--learning_rate 1e-4 is a flag of diffusers' and TRL's scripts; here it is the override actor.lr=1e-4",
        "--mixed_precision bf16 is a flag of diffusers' and TRL's scripts; here it is the override "
        "model.dtype=bfloat16",
        "--gradient_checkpointing is a flag of diffusers' and TRL's scripts; here it is the override "
        "model.gradient_checkpointing=true",
        "--resume_from_checkpoint latest is a flag of diffusers' and TRL's scripts; here it is the override "
        "trainer.resume_from=auto",
        "--dataset_name me/prompts is a flag of diffusers' and TRL's scripts; here it is the override "
        "data.manifest=hf://datasets/me/prompts",
    ]
    assert "genalign config --describe" in err.value.hint


def test_config_accepts_report_to_and_prints_the_loggers(capsys):
    assert main(["config", "--report_to", "tensorboard", "trainer.output_dir=/tmp/unused-genalign-habits"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["loggers"] == ["csv", "tensorboard"]
    # an explicit key after the flag wins (the flag is the first override)
    assert (
        main(
            [
                "config",
                "--report_to",
                "tensorboard",
                "trainer.loggers=csv",
                "trainer.output_dir=/tmp/unused-genalign-habits",
            ]
        )
        == 0
    )
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["loggers"] == ["csv"]


def test_a_usage_error_is_short_and_points_to_the_keys(capsys):
    assert main(["train", "--seed", "3"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "genalign: error: --seed 3 is a flag of diffusers' and TRL's scripts; here it is the override trainer.seed=3",
        "hint: overrides are key=value after the command; `genalign config --describe KEY` explains a key",
    ]
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--no-such-flag"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) <= 4 and "unrecognized arguments: --no-such-flag" in err
    assert "genalign config --describe" in err and "/sampling/" not in err  # no recipe catalog
