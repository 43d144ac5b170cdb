"""The Python API: what `genalign train` does, from a script or a notebook.

    from genalign import load_config, train
    result = train(load_config("experiment/toy/shapes_grpo", ["trainer.num_steps=20"]))

Where it fits: beside the CLI at the top of the stack (docs/running.md#python-api). `load_config`
is the CLI's own check (compose, validate, check the files) and `train` the CLI's run
(`Trainer.for_config(cfg).train()`), plus what a notebook needs: the log lines printed when
nothing else has set up logging, a progress bar that renders in Jupyter (tqdm.auto), the
caller's callbacks (`training/callbacks.py`) and a `TrainResult` with the last rows.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from genalign.config.schema import ExperimentConfig
from genalign.preflight import load as _preflight
from genalign.tracking.console import interactive_display
from genalign.tracking.logs import configure_console_logging
from genalign.training.callbacks import TrainerCallback
from genalign.training.trainer import Trainer

__all__ = ["load_config", "train", "Trainer", "TrainerCallback", "TrainResult"]


def load_config(
    recipe: str | Path | None = None, overrides: Iterable[str] = (), check_files: bool = True
) -> ExperimentConfig:
    """The checked config of `recipe` (a shipped recipe name, a YAML path, or None: the CPU
    demo) with `key=value` / `/group=option` overrides, as `genalign config` checks it: every
    problem raised together as a `ConfigError` before anything loads. `check_files=False`
    skips the files it names (manifests, model path, run directory)."""
    return _preflight.load_config(None if recipe is None else str(recipe), list(overrides), check_files=check_files)


@dataclass
class TrainResult:
    """What a run left: where, how far, and its last rows."""

    output_dir: Path
    steps_trained: int = 0
    """Steps this call ran (0: the run's checkpoint was already at trainer.num_steps)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """The last training step's metrics row (metrics.csv columns)."""
    eval_metrics: dict[str, float] = field(default_factory=dict)
    """The last evaluation's row (eval_metrics.csv columns)."""
    checkpoint: Path | None = None
    """The last checkpoint written (checkpoint-final when the run finished)."""


class _Recorder(TrainerCallback):
    def __init__(self, result: TrainResult):
        self.result = result

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        self.result.steps_trained += 1
        self.result.metrics = metrics

    def on_eval(self, step: int, metrics: dict[str, float]) -> None:
        self.result.eval_metrics = metrics

    def on_save(self, step: int, path: Path) -> None:
        self.result.checkpoint = path


class NotebookProgress(TrainerCallback):
    """A tqdm.auto bar over the steps (a widget in Jupyter) with the step's reward and loss."""

    def on_train_begin(self, trainer: Any) -> None:
        from tqdm.auto import tqdm

        last = trainer.cfg.trainer.num_steps
        self.bar = tqdm(total=last, initial=trainer.start_step - 1, desc="train", unit="step")

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        shown = {
            key: f"{metrics[column]:.4g}"
            for key, column in (("reward", "reward_mean"), ("loss", "loss"))
            if isinstance(metrics.get(column), float)
        }
        self.bar.set_postfix(shown, refresh=False)
        self.bar.update(1)

    def on_train_end(self) -> None:
        if hasattr(self, "bar"):
            self.bar.close()


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (where stderr is no terminal, yet a widget shows)."""
    return interactive_display() and not (sys.stderr is not None and sys.stderr.isatty())


def train(
    config: ExperimentConfig | str | Path | None = None,
    overrides: Iterable[str] = (),
    callbacks: Iterable[Any] = (),
    progress: bool | None = None,
) -> TrainResult:
    """Run (or resume, as trainer.resume_from says) the run `config` describes: a config from
    `load_config`, or a recipe name / YAML path (None: the CPU demo) with `overrides`.

    `callbacks`: objects with any of on_train_begin(trainer), on_step_end(step, metrics),
    on_eval(step, metrics), on_save(step, path), on_train_end(), called on rank 0 in order.
    `progress`: a tqdm.auto bar over the steps; None shows it in a Jupyter notebook (a
    terminal gets the trainer's own bar, trainer.progress_bar). Log lines go to stderr when
    nothing else has configured logging. Returns the run's `TrainResult`."""
    if isinstance(config, ExperimentConfig):
        if list(overrides):
            raise TypeError("train(config, overrides): pass overrides to load_config, or a recipe name here")
        cfg = config
    else:
        cfg = load_config(config, overrides)
    configure_console_logging()  # logging.basicConfig: a no-op where the caller has set up logging
    result = TrainResult(Path(cfg.trainer.output_dir))
    extra: list[Any] = [_Recorder(result)]
    if progress or (progress is None and in_notebook()):
        extra.append(NotebookProgress())
    trainer = Trainer.for_config(cfg, callbacks=[*callbacks, *extra])
    if trainer is not None:  # None: the checkpoint is already at trainer.num_steps (logged)
        trainer.train()
    return result
