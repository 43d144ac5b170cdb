"""trainer.loggers / trainer.wandb checks: config errors naming the key, before anything loads."""

from __future__ import annotations

import importlib.util

import pytest

from genalign.config.errors import ConfigError
from genalign.config.loader import compose_config
from genalign.preflight.load import load_config
from genalign.preflight.validate import validate
from genalign.tracking.config import (
    MlflowConfig,
    WandbConfig,
    logger_problems,
    mlflow_problems,
    resolve_mlflow,
    resolve_wandb,
    tracker_problems,
    wandb_logged_in,
    wandb_mode,
)


def test_default_is_csv_only_and_valid():
    cfg = load_config(None, ["trainer.output_dir=/tmp/unused-genalign-run"])
    assert cfg.trainer.loggers == ["csv"] and cfg.trainer.wandb.mode is None  # null: $WANDB_MODE, else by login
    assert logger_problems(["csv", "tensorboard", "wandb"]) == []
    assert tracker_problems(["csv", "tensorboard", "wandb"], WandbConfig()) == []  # installed with [dev]


@pytest.mark.parametrize(
    "written, used",
    [
        ("trainer.loggers=wandb", ["csv", "wandb"]),
        ("trainer.loggers=[tensorboard]", ["csv", "tensorboard"]),
        ("trainer.loggers=tensorboard,wandb", ["csv", "tensorboard", "wandb"]),
        ("trainer.loggers=[wandb,csv]", ["wandb", "csv"]),
        ("trainer.loggers=csv", ["csv"]),
    ],
)
def test_a_scalar_or_csv_less_logger_list_means_csv_plus_those(written, used):
    """As `--report_to wandb` names it: the CSV record is always written, never asked for."""
    assert load_config(None, [written, "trainer.wandb.mode=offline"]).trainer.loggers == used


def test_wandb_mode_follows_the_login_unless_the_config_or_environment_names_one(tmp_path):
    """W&B's own rule for a script: online when logged in; genalign writes offline (and says
    so) where W&B would stop at its login prompt."""
    home = tmp_path / "home"
    home.mkdir()
    assert not wandb_logged_in({"HOME": str(home)})
    assert wandb_mode({"mode": None}, {"HOME": str(home)})[0] == "offline"
    assert "not logged in" in wandb_mode({"mode": None}, {"HOME": str(home)})[1]
    assert wandb_mode({"mode": None}, {"HOME": str(home), "WANDB_API_KEY": "k" * 40}) == ("online", None)
    (home / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "x" * 40 + "\n")
    assert wandb_logged_in({"HOME": str(home)}) and wandb_mode({"mode": None}, {"HOME": str(home)})[0] == "online"
    # another server's login is not this one's
    assert not wandb_logged_in({"HOME": str(home), "WANDB_BASE_URL": "https://wandb.example.com"})
    assert wandb_mode({"mode": "disabled"}, {"HOME": str(home)}) == ("disabled", None)  # a named mode wins
    settings = resolve_wandb(WandbConfig(), {"WANDB_MODE": "offline"})
    assert wandb_mode(settings, {"WANDB_API_KEY": "k" * 40}) == ("offline", None)


def test_mlflow_settings_follow_config_then_environment_then_default():
    assert resolve_mlflow(MlflowConfig(), {}) == {
        "tracking_uri": None,
        "experiment_name": "genalign",
        "run_name": None,
        "tags": None,
    }
    environ = {
        "MLFLOW_TRACKING_URI": "http://mlflow:5000",
        "MLFLOW_EXPERIMENT_NAME": "sd3",
        "MLFLOW_RUN_NAME": "r1",
        "MLFLOW_TAGS": '{"team": "vision"}',
    }
    assert resolve_mlflow(MlflowConfig(), environ) == {
        "tracking_uri": "http://mlflow:5000",
        "experiment_name": "sd3",
        "run_name": "r1",
        "tags": {"team": "vision"},
    }
    assert resolve_mlflow(MlflowConfig(experiment_name="x"), environ)["experiment_name"] == "x"


def test_an_mlflow_store_that_cannot_start_is_a_config_error(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sqlalchemy" else real(name, *a))
    [problem] = mlflow_problems(MlflowConfig(), {})  # MLflow's default store is sqlite: SQLAlchemy
    assert "MLflow's default tracking store (sqlite:///mlflow.db) is a database" in problem
    assert "pip install mlflow" in problem and "file:<dir>" in problem
    assert mlflow_problems(MlflowConfig(tracking_uri="http://mlflow:5000"), {}) == []
    assert mlflow_problems(MlflowConfig(), {"MLFLOW_TRACKING_URI": "file:/tmp/mlruns"}) == []
    assert "JSON object" in mlflow_problems(MlflowConfig(), {"MLFLOW_TAGS": "team=vision"})[0]


def test_repeated_and_csv_less_loggers_are_named():
    problems = logger_problems(["wandb", "wandb"])
    assert problems == [
        "trainer.loggers lists wandb more than once",
        "trainer.loggers must include csv: metrics.csv is the run's record (resume continues it); add trackers "
        "beside it: trainer.loggers=[csv,wandb]",
    ]


def test_an_unknown_logger_or_wandb_mode_is_refused_by_the_loader_with_its_choices():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["trainer.loggers=[csv,tensorbord]", "trainer.wandb.mode=cloud"])
    assert err.value.problems == [
        "trainer.loggers[1]='tensorbord' is not supported (set in command line `trainer.loggers=[csv,tensorbord]`); "
        "did you mean 'tensorboard'? Choose one of: csv, tensorboard, wandb, mlflow",
        "trainer.wandb.mode='cloud' is not supported (set in command line `trainer.wandb.mode=cloud`) "
        "Choose one of: offline, online, disabled",
    ]


def test_a_selected_tracker_that_is_not_installed_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError) as err:
        load_config(None, ["trainer.loggers=[csv,wandb]"])
    assert err.value.problems == [
        "trainer.loggers: wandb needs the wandb package, which is not installed; "
        "pip install 'genalign[trackers]' or remove wandb from trainer.loggers"
    ]
    # a checkpoint's config (genalign eval, resume checks) logs nowhere: not this machine's concern
    assert logger_problems(["csv", "wandb"]) == []
    assert validate(compose_config(None, ["trainer.loggers=[csv,wandb]"]), check_machine=False) == []


def test_wandb_settings_follow_wandb_precedence_config_then_environment_then_default():
    assert resolve_wandb(WandbConfig(), {}) == {
        "project": "genalign",
        "entity": None,
        "name": None,
        "group": None,
        "tags": None,
        "mode": None,
    }  # the mode: by the login
    environ = {
        "WANDB_MODE": "disabled",
        "WANDB_PROJECT": "envproj",
        "WANDB_ENTITY": "team",
        "WANDB_NAME": "run-7",
        "WANDB_RUN_GROUP": "sweep-3",
        "WANDB_TAGS": "sd3, ocr ,,lora",
    }
    assert resolve_wandb(WandbConfig(), environ) == {
        "project": "envproj",
        "entity": "team",
        "name": "run-7",
        "group": "sweep-3",
        "tags": ["sd3", "ocr", "lora"],
        "mode": "disabled",
    }
    explicit = WandbConfig(project="p", entity="e", name="n", group="g", tags=["t"], mode="online")
    assert resolve_wandb(explicit, environ) == {
        "project": "p",
        "entity": "e",
        "name": "n",
        "group": "g",
        "tags": ["t"],
        "mode": "online",
    }
    assert resolve_wandb(WandbConfig(), {"WANDB_PROJECT": "  "})["project"] == "genalign"  # empty: unset


def test_an_unsupported_wandb_mode_from_the_environment_is_a_config_error(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "cloud")
    with pytest.raises(ConfigError) as err:
        load_config(None, ["trainer.loggers=[csv,wandb]"])
    assert err.value.problems == [
        "trainer.loggers=wandb: the environment sets WANDB_MODE='cloud', which genalign "
        "does not support; choose one of: offline, online, disabled (or set "
        "trainer.wandb.mode)"
    ]
    load_config(None, ["trainer.loggers=[csv,wandb]", "trainer.wandb.mode=offline"])  # the key wins
    load_config(None, ["trainer.loggers=[csv]"])  # no W&B run, nothing to check


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("every", -1, "trainer.sample_table.every must be >= 0 (0 disables it), got -1"),
        ("count", 0, "trainer.sample_table.count must be >= 1, got 0"),
    ],
)
def test_sample_table_bounds(key, value, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"trainer.sample_table.{key}={value}"])
    assert err.value.problems == [message]
