"""trainer.loggers / trainer.wandb checks: config errors naming the key, before anything loads."""

from __future__ import annotations

import importlib.util

import pytest

from genalign.config.errors import ConfigError
from genalign.config.loader import load_config
from genalign.tracking.config import WandbConfig, logger_problems


def test_default_is_csv_only_and_valid():
    cfg = load_config(None, ["trainer.output_dir=/tmp/unused-genalign-run"])
    assert cfg.trainer.loggers == ["csv"] and cfg.trainer.wandb.mode == "offline"
    assert logger_problems(["csv", "tensorboard", "wandb"], WandbConfig()) == []


def test_unknown_repeated_and_csv_less_loggers_are_named():
    problems = logger_problems(["tensorbord", "wandb", "wandb"], WandbConfig(mode="cloud"))
    assert problems == [
        "trainer.loggers: unknown logger 'tensorbord'; did you mean 'tensorboard'? Choose from: csv, tensorboard, wandb",
        "trainer.loggers lists wandb more than once",
        "trainer.loggers must include csv: metrics.csv is the run's record (resume continues it); add trackers "
        "beside it: trainer.loggers=[csv,wandb]",
        "trainer.wandb.mode='cloud' is not supported; choose one of: offline, online, disabled",
    ]


def test_a_selected_tracker_that_is_not_installed_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError) as err:
        load_config(None, ["trainer.loggers=[csv,wandb]"])
    assert err.value.problems == ["trainer.loggers: wandb needs the wandb package, which is not installed; "
                                  "pip install 'genalign[trackers]' or remove wandb from trainer.loggers"]
    # a checkpoint's config (genalign eval, resume checks) logs nowhere: not this machine's concern
    assert logger_problems(["csv", "wandb"], WandbConfig(), check_installed=False) == []
