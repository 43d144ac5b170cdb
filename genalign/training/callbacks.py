"""Training callbacks: code of your own (or genalign's Hub uploads) run at points of the loop.

Where it fits: `Trainer(cfg, callbacks=[...])` / `genalign.train(cfg, callbacks=[...])` take
any objects with some of these methods (like transformers' `TrainerCallback`, but each gets
what it needs rather than a state object); rank 0 calls them, in the order given:

- `on_train_begin(trainer)`: once, before the first step (the model, optimizer and run
  directory exist);
- `on_step_end(step, metrics)`: after each training step, with the step's metrics row (the
  `metrics.csv` columns, the whole job's);
- `on_eval(step, metrics)`: after each evaluation, with its row (`eval_metrics.csv`);
- `on_save(step, path)`: after a checkpoint directory is complete on disk;
- `on_train_end()`: once, when the run ends or fails (from `Trainer.close`).

A callback that raises stops the run with its error (it is your code, not a view of the run);
`TrainerCallback` is a base class with every method a no-op, to subclass when convenient.
`trainer.push_to_hub` is itself a callback (`export/hub_push.py:HubPusher`), placed first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from genalign.export.hub_push import HubPusher

EVENTS = ("on_train_begin", "on_step_end", "on_eval", "on_save", "on_train_end")


class TrainerCallback:
    """Every hook a no-op: subclass and override the ones you need."""

    def on_train_begin(self, trainer: Any) -> None:
        pass

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def on_eval(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def on_save(self, step: int, path: Path) -> None:
        pass

    def on_train_end(self) -> None:
        pass


class CallbackList:
    """Calls each event on every callback that has a method for it, in order."""

    def __init__(self, callbacks: Iterable[Any] = ()):
        self.callbacks = list(callbacks)
        unknown = [type(c).__name__ for c in self.callbacks if not any(callable(getattr(c, e, None)) for e in EVENTS)]
        if unknown:
            raise TypeError(f"callbacks {', '.join(unknown)} have none of the methods {', '.join(EVENTS)}")

    def _dispatch(self, event: str, *args: Any) -> None:
        for callback in self.callbacks:
            method = getattr(callback, event, None)
            if method is not None:  # each gets its own copy of a metrics row: the run's stays as it was
                method(*(dict(arg) if isinstance(arg, dict) else arg for arg in args))

    def on_train_begin(self, trainer: Any) -> None:
        self._dispatch("on_train_begin", trainer)

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        self._dispatch("on_step_end", step, metrics)

    def on_eval(self, step: int, metrics: dict[str, float]) -> None:
        self._dispatch("on_eval", step, metrics)

    def on_save(self, step: int, path: Path) -> None:
        self._dispatch("on_save", step, path)

    def on_train_end(self) -> None:
        self._dispatch("on_train_end")


def run_callbacks(cfg, user_callbacks: Iterable[Any], is_main: bool) -> CallbackList:
    """The run's callbacks on rank 0: the Hub uploads of `trainer.push_to_hub` first, then
    the caller's; none on the other ranks (they write nothing)."""
    if not is_main:
        return CallbackList()
    builtin = []
    if cfg.trainer.push_to_hub:
        builtin.append(HubPusher(cfg.trainer.push_to_hub, cfg.trainer.hub_strategy, cfg.trainer.hub_private))
    return CallbackList([*builtin, *user_callbacks])
