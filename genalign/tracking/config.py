"""`trainer.loggers` and `trainer.wandb`: where metrics go besides the CSV files.

Where it fits: `TrainerConfig` holds these keys; `validate` calls `logger_problems` so a
typo, a missing `csv` or a tracker whose package is not installed is a config error before
any model loads; `training/setup.build_trackers` reads them on rank 0.
"""

from __future__ import annotations

import difflib
import importlib.util
from dataclasses import dataclass

LOGGERS = ("csv", "tensorboard", "wandb")
"""`csv` writes metrics.csv / eval_metrics.csv (always required: the run's record, read by
resume and by the tests); the others are views of the same rows."""
TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}
"""Logger name -> the package it imports (both come with `pip install 'genalign[trackers]'`)."""
WANDB_MODES = ("offline", "online", "disabled")


@dataclass
class WandbConfig:
    """Weights & Biases run settings, read when `trainer.loggers` includes `wandb`."""

    project: str = "genalign"
    entity: str | None = None
    """W&B team or user; null: your default entity."""
    name: str | None = None
    """Run name; null: the name of trainer.output_dir."""
    mode: str = "offline"
    """`offline` (default): write the run under <output_dir>/wandb with no network and no login;
    upload it later with `wandb sync <output_dir>/wandb/offline-run-*`. `online`: stream to
    the W&B server (needs `wandb login` or WANDB_API_KEY, and network: without network W&B's
    own init timeout, 90 s, ends the run's start with an error). `disabled`: no-op run."""


def logger_problems(loggers: list[str], wandb: WandbConfig, check_installed: bool = True) -> list[str]:
    """Every problem with trainer.loggers / trainer.wandb (empty when usable on this machine).
    `check_installed=False` skips the installed-package check (a checkpoint's config evaluated
    by `genalign eval`, which logs to no tracker)."""
    problems = []
    for name in loggers:
        if name not in LOGGERS:
            close = difflib.get_close_matches(name, LOGGERS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"trainer.loggers: unknown logger {name!r}{hint} Choose from: {', '.join(LOGGERS)}")
        elif check_installed and name in TRACKER_PACKAGES and importlib.util.find_spec(TRACKER_PACKAGES[name]) is None:
            problems.append(f"trainer.loggers: {name} needs the {TRACKER_PACKAGES[name]} package, which is not "
                            f"installed; pip install 'genalign[trackers]' or remove {name} from trainer.loggers")
    repeated = sorted({name for name in loggers if loggers.count(name) > 1})
    if repeated:
        problems.append(f"trainer.loggers lists {', '.join(repeated)} more than once")
    if "csv" not in loggers:
        example = ",".join(["csv", *(name for name in dict.fromkeys(loggers) if name in TRACKER_PACKAGES)])
        problems.append("trainer.loggers must include csv: metrics.csv is the run's record (resume continues it); "
                        f"add trackers beside it: trainer.loggers=[{example}]")
    if wandb.mode not in WANDB_MODES:
        problems.append(f"trainer.wandb.mode={wandb.mode!r} is not supported; choose one of: {', '.join(WANDB_MODES)}")
    return problems
