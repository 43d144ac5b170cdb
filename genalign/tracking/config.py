"""`trainer.loggers` and `trainer.wandb`: where metrics go besides the CSV files.

Where it fits: `TrainerConfig` holds these keys; the loader refuses a logger or W&B mode
that is not one of the `Logger` / `WandbMode` choices, `TrainerConfig.problems` a logger list
without `csv` (`logger_problems`), and `validate` a tracker whose package is not installed on
this machine (`tracker_problems`), all before any model loads; `training/setup.build_trackers`
reads them on rank 0.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal, Mapping, get_args

from genalign.config.extras import missing_package_problem

Logger = Literal["csv", "tensorboard", "wandb"]
LOGGERS = get_args(Logger)
"""`csv` writes metrics.csv / eval_metrics.csv (always required: the run's record, read by
resume and by the tests); the others are views of the same rows."""
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}
"""Logger name -> the package it imports (both come with `pip install 'genalign[trackers]'`)."""
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
    """null: $WANDB_MODE, else `offline`. `offline`: write the run under <output_dir>/wandb (or
    $WANDB_DIR) with no network and no login; upload it later with `wandb sync
    <output_dir>/wandb/offline-run-*`. `online`: stream to the W&B server (needs `wandb login`
    or WANDB_API_KEY, and network: without network W&B's own init timeout, 90 s, ends the
    run's start with an error). `disabled`: no-op run."""


WANDB_DEFAULTS = {"project": "genalign", "mode": "offline"}
"""genalign's defaults where neither the config nor the environment names a value."""
WANDB_ENV = {"project": "WANDB_PROJECT", "entity": "WANDB_ENTITY", "name": "WANDB_NAME",
             "group": "WANDB_RUN_GROUP", "tags": "WANDB_TAGS", "mode": "WANDB_MODE"}
"""trainer.wandb key -> the environment variable W&B reads for it."""


def resolve_wandb(cfg: WandbConfig, environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings a W&B run starts with: each key from `cfg` when set, else from its
    `WANDB_*` variable in `environ` (an empty variable counts as unset), else WANDB_DEFAULTS
    (None where W&B decides: entity, name, group). Tags from the environment are split on commas."""
    settings: dict[str, Any] = {}
    for key, variable in WANDB_ENV.items():
        value = getattr(cfg, key)
        if value is None and environ.get(variable, "").strip():
            value = environ[variable].strip()
            if key == "tags":
                value = [tag.strip() for tag in value.split(",") if tag.strip()]
        settings[key] = value if value is not None else WANDB_DEFAULTS.get(key)
    return settings


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
    choice): csv present, no name twice. TrainerConfig.problems calls it."""
    problems = []
    repeated = sorted({name for name in loggers if loggers.count(name) > 1})
    if repeated:
        problems.append(f"trainer.loggers lists {', '.join(repeated)} more than once")
    if "csv" not in loggers:
        example = ",".join(["csv", *(name for name in dict.fromkeys(loggers) if name in TRACKER_PACKAGES)])
        problems.append("trainer.loggers must include csv: metrics.csv is the run's record (resume continues it); "
                        f"add trackers beside it: trainer.loggers=[{example}]")
    return problems


def tracker_problems(loggers: list[str], wandb: WandbConfig) -> list[str]:
    """Whether this machine can run the selected trackers: each one's package is installed,
    and a W&B run's mode from the environment ($WANDB_MODE) is one genalign supports. A
    checkpoint's config evaluated by `genalign eval` logs to no tracker and skips this."""
    problems = []
    for name in loggers:
        if name in TRACKER_PACKAGES:
            missing = missing_package_problem(f"trainer.loggers: {name}", TRACKER_PACKAGES[name], "trackers",
                                              f"or remove {name} from trainer.loggers")
            if missing:
                problems.append(missing)
    if "wandb" in loggers:
        mode = resolve_wandb(wandb, os.environ)["mode"]
        if mode not in WANDB_MODES:
            problems.append(f"trainer.loggers=wandb: the environment sets WANDB_MODE={mode!r}, which genalign does "
                            f"not support; choose one of: {', '.join(WANDB_MODES)} (or set trainer.wandb.mode)")
    return problems
