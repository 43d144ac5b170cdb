"""`trainer.loggers`, `trainer.wandb` and `trainer.mlflow`: where metrics go besides the CSV files.

Where it fits: `TrainerConfig` holds these keys; the loader refuses a logger or W&B mode
that is not one of the `Logger` / `WandbMode` choices, `TrainerConfig.problems` a logger
named twice (`logger_problems`), and `validate` a tracker whose package is not installed on
this machine or whose environment would stop it (`tracker_problems`), all before any model
loads; `training/setup.build_trackers` reads them on rank 0. `trainer.loggers=wandb` (a
scalar) and `[wandb]` both mean `[csv, wandb]` (`with_csv`): the CSV files are always written.
"""

from __future__ import annotations

import json
import netrc
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, get_args
from urllib.parse import urlparse

from genalign.config.extras import is_installed, missing_package_problem

Logger = Literal["csv", "tensorboard", "wandb", "mlflow"]
LOGGERS = get_args(Logger)
"""`csv` writes metrics.csv / eval_metrics.csv (always: the run's record, read by resume and
by the tests); the others are views of the same rows."""
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
"""Logger name -> the package it imports (`pip install 'genalign[trackers]'` brings the
first two, `genalign[mlflow]` MLflow's client)."""
TRACKER_EXTRAS = {"tensorboard": "trackers", "wandb": "trackers", "mlflow": "mlflow"}


def with_csv(loggers: Any) -> Any:
    """`trainer.loggers` as written -> the list the run uses: a scalar or comma-separated
    string is a list (`wandb` -> [csv, wandb], as `--report_to wandb` names it), and csv is
    always first. Anything else is returned as it is, for the type check to name."""
    if isinstance(loggers, str):
        loggers = [name.strip() for name in loggers.split(",") if name.strip()]
    if isinstance(loggers, list) and "csv" not in loggers:
        loggers = ["csv", *loggers]
    return loggers


WandbMode = Literal["offline", "online", "disabled"]
WANDB_MODES = get_args(WandbMode)


@dataclass
class WandbConfig:
    """Weights & Biases run settings, read when `trainer.loggers` includes `wandb`.

    Precedence, as in W&B itself: a key set here, else its `WANDB_*` environment variable,
    else genalign's default (`resolve_wandb`). So a launcher's WANDB_PROJECT / WANDB_MODE /
    WANDB_RUN_GROUP apply unless the config names a value."""

    project: str | None = None
    """W&B project; null: $WANDB_PROJECT, else "genalign"."""
    entity: str | None = None
    """W&B team or user; null: $WANDB_ENTITY, else your default entity."""
    name: str | None = None
    """Run name; null: $WANDB_NAME, else the name of trainer.output_dir."""
    group: str | None = None
    """Run group (runs of one sweep or seed set shown together); null: $WANDB_RUN_GROUP, else none."""
    tags: list[str] | None = None
    """Run tags; null: $WANDB_TAGS (comma-separated), else none."""
    mode: WandbMode | None = None
    """null: $WANDB_MODE, else `online` when you are logged in to W&B (WANDB_API_KEY, or the
    netrc entry `wandb login` writes), else `offline` (said once in the log). `offline`: write
    the run under <output_dir>/wandb (or $WANDB_DIR) with no network and no login; upload it
    later with `wandb sync <output_dir>/wandb/offline-run-*`. `online`: stream to the W&B
    server (needs the login and network: without network W&B's own init timeout, 90 s, ends
    the run's start with an error). `disabled`: no-op run."""


WANDB_DEFAULTS = {"project": "genalign"}
"""genalign's defaults where neither the config nor the environment names a value (the mode's
default depends on the login: `wandb_mode`)."""
WANDB_ENV = {
    "project": "WANDB_PROJECT",
    "entity": "WANDB_ENTITY",
    "name": "WANDB_NAME",
    "group": "WANDB_RUN_GROUP",
    "tags": "WANDB_TAGS",
    "mode": "WANDB_MODE",
}
"""trainer.wandb key -> the environment variable W&B reads for it."""


def resolve_wandb(cfg: WandbConfig, environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings a W&B run starts with: each key from `cfg` when set, else from its
    `WANDB_*` variable in `environ` (an empty variable counts as unset), else WANDB_DEFAULTS
    (None where W&B decides: entity, name, group; the mode: `wandb_mode`). Tags from the
    environment are split on commas."""
    return resolve_settings(
        cfg,
        WANDB_ENV,
        WANDB_DEFAULTS,
        environ,
        {"tags": lambda text: [tag.strip() for tag in text.split(",") if tag.strip()]},
    )


def resolve_settings(
    cfg: Any,
    variables: Mapping[str, str],
    defaults: Mapping[str, Any],
    environ: Mapping[str, str],
    parsers: Mapping[str, Callable[[str], Any]],
) -> dict[str, Any]:
    """A tracker's settings by its own precedence: each key of `cfg` when set, else its
    environment variable (`variables`; empty counts as unset; `parsers` turn the text into the
    key's type), else `defaults` (None where the tracker decides)."""
    settings: dict[str, Any] = {}
    for key, variable in variables.items():
        value = getattr(cfg, key)
        if value is None and environ.get(variable, "").strip():
            value = environ[variable].strip()
            value = parsers[key](value) if key in parsers else value
        settings[key] = value if value is not None else defaults.get(key)
    return settings


def wandb_logged_in(environ: Mapping[str, str]) -> bool:
    """Whether W&B has credentials here, where W&B looks for them: $WANDB_API_KEY, an identity
    token file ($WANDB_IDENTITY_TOKEN_FILE), or the netrc entry `wandb login` writes for the
    server's host ($WANDB_BASE_URL, default api.wandb.ai) in $NETRC or ~/.netrc."""
    if environ.get("WANDB_API_KEY", "").strip() or environ.get("WANDB_IDENTITY_TOKEN_FILE", "").strip():
        return True
    host = urlparse(environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    path = Path(environ.get("NETRC") or Path(environ.get("HOME") or Path.home()) / ".netrc")
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):  # no file, unreadable or malformed: no login there
        return False
    return bool(entry and entry[2])


def wandb_mode(settings: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[str, str | None]:
    """(the mode a run starts in, the line to log when genalign chose it): the resolved mode
    when the config or $WANDB_MODE names one, else W&B's own choice for a script (`online`
    when logged in), except that without a login genalign writes offline instead of stopping
    the run at W&B's login prompt."""
    if settings.get("mode"):
        return settings["mode"], None
    if wandb_logged_in(environ):
        return "online", None
    return "offline", (
        "W&B: not logged in (no WANDB_API_KEY and no netrc entry from `wandb login`): the run is "
        "written offline; `wandb sync` uploads it later, or log in and set trainer.wandb.mode=online"
    )


@dataclass
class MlflowConfig:
    """MLflow run settings, read when `trainer.loggers` includes `mlflow`. Each key set here
    wins; else MLflow's own environment variable; else the default given (as transformers'
    MLflowCallback reads them)."""

    tracking_uri: str | None = None
    """Where runs are recorded: a server (http://host:5000), a database (sqlite:///mlflow.db,
    needs the full `mlflow` package) or a folder (file:<dir>, MLflow's file store; MLflow 3
    asks for MLFLOW_ALLOW_FILE_STORE=true). null: $MLFLOW_TRACKING_URI, else MLflow's
    default (sqlite:///mlflow.db in the working directory)."""
    experiment_name: str | None = None
    """The experiment the run belongs to (created if missing); null: $MLFLOW_EXPERIMENT_NAME, else "genalign"."""
    run_name: str | None = None
    """The run's name; null: $MLFLOW_RUN_NAME, else the name of trainer.output_dir."""
    tags: dict[str, str] | None = None
    """Run tags; null: $MLFLOW_TAGS (a JSON object), else none."""


MLFLOW_ENV = {
    "tracking_uri": "MLFLOW_TRACKING_URI",
    "experiment_name": "MLFLOW_EXPERIMENT_NAME",
    "run_name": "MLFLOW_RUN_NAME",
    "tags": "MLFLOW_TAGS",
}
"""trainer.mlflow key -> the environment variable read when the key is null."""
MLFLOW_DEFAULTS = {"experiment_name": "genalign"}
MLFLOW_DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
"""Tracking URIs MLflow serves through SQLAlchemy (the full `mlflow` package; not mlflow-skinny)."""


def resolve_mlflow(cfg: MlflowConfig, environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings an MLflow run starts with (None where MLflow decides: tracking_uri, run_name)."""
    return resolve_settings(cfg, MLFLOW_ENV, MLFLOW_DEFAULTS, environ, {"tags": json.loads})


def mlflow_problems(cfg: MlflowConfig, environ: Mapping[str, str]) -> list[str]:
    """What would stop the MLflow run at its start: bad $MLFLOW_TAGS, or a database tracking
    URI (MLflow's default is one) where SQLAlchemy, which MLflow's database store needs, is
    not installed (mlflow-skinny leaves it out)."""
    try:
        settings = resolve_mlflow(cfg, environ)
    except json.JSONDecodeError as err:
        return [
            f"trainer.loggers=mlflow: $MLFLOW_TAGS is not a JSON object ({err.msg}); set it like "
            '\'{"team": "vision"}\' or set trainer.mlflow.tags'
        ]
    if not isinstance(settings["tags"], (dict, type(None))):
        return ["trainer.loggers=mlflow: $MLFLOW_TAGS must be a JSON object of tag names to values"]
    uri = settings["tracking_uri"] or "sqlite:///mlflow.db"
    scheme = urlparse(uri).scheme.split("+")[0]
    if scheme in MLFLOW_DATABASE_SCHEMES and not is_installed("sqlalchemy"):
        where = "MLflow's default tracking store" if settings["tracking_uri"] is None else f"tracking URI {uri}"
        return [
            f"trainer.loggers=mlflow: {where} ({uri}) is a database, which needs SQLAlchemy from the full mlflow "
            "package (pip install mlflow); or point trainer.mlflow.tracking_uri / $MLFLOW_TRACKING_URI at a "
            "server (http://host:5000) or a folder (file:<dir>)"
        ]
    return []


@dataclass
class SampleTableConfig:
    """A small table of training samples (image, prompt, reward per component) sent to the
    trackers every few steps, to see what the rewards are scoring. Only when trainer.loggers
    has a tracker (tensorboard, wandb); metrics.csv holds numbers only."""

    every: int = 10
    """Send a table every this many training steps (and at step 1); 0: never."""
    count: int = 8
    """Rollout samples per table: the first ones of the step's batch (rank 0's), spread over
    its prompt groups, at most the batch size."""

    def problems(self) -> list[str]:
        problems = []
        if self.every < 0:
            problems.append(f"trainer.sample_table.every must be >= 0 (0 disables it), got {self.every}")
        if self.count < 1:
            problems.append(f"trainer.sample_table.count must be >= 1, got {self.count}")
        return problems


def logger_problems(loggers: list[str]) -> list[str]:
    """trainer.loggers as a list (each name is one of LOGGERS: the loader checks the `Logger`
    choice; `with_csv` put csv first): csv present, no name twice. TrainerConfig.problems calls it."""
    problems = []
    repeated = sorted({name for name in loggers if loggers.count(name) > 1})
    if repeated:
        problems.append(f"trainer.loggers lists {', '.join(repeated)} more than once")
    if "csv" not in loggers:
        example = ",".join(["csv", *(name for name in dict.fromkeys(loggers) if name in TRACKER_PACKAGES)])
        problems.append(
            "trainer.loggers must include csv: metrics.csv is the run's record (resume continues it); "
            f"add trackers beside it: trainer.loggers=[{example}]"
        )
    return problems


def tracker_problems(loggers: list[str], wandb: WandbConfig, mlflow: MlflowConfig | None = None) -> list[str]:
    """Whether this machine can run the selected trackers: each one's package is installed, a
    W&B run's mode from the environment ($WANDB_MODE) is one genalign supports, and MLflow's
    settings would start a run. A checkpoint's config evaluated by `genalign eval` logs to no
    tracker and skips this."""
    problems = []
    for name in loggers:
        if name in TRACKER_PACKAGES:
            missing = missing_package_problem(
                f"trainer.loggers: {name}",
                TRACKER_PACKAGES[name],
                TRACKER_EXTRAS[name],
                f"or remove {name} from trainer.loggers",
            )
            if missing:
                problems.append(missing)
    if "wandb" in loggers:  # the environment is this machine's, like the packages
        mode = resolve_wandb(wandb, os.environ)["mode"]
        if mode is not None and mode not in WANDB_MODES:
            problems.append(
                f"trainer.loggers=wandb: the environment sets WANDB_MODE={mode!r}, which genalign does "
                f"not support; choose one of: {', '.join(WANDB_MODES)} (or set trainer.wandb.mode)"
            )
    if "mlflow" in loggers and is_installed("mlflow"):
        problems += mlflow_problems(mlflow or MlflowConfig(), os.environ)
    return problems
