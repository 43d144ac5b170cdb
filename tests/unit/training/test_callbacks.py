"""Training callbacks (training/callbacks.py) and the notebook progress bar of the Python API."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pytest

from genalign.api import NotebookProgress
from genalign.training.callbacks import CallbackList, TrainerCallback


def test_every_hook_reaches_every_callback_that_has_it_in_order():
    calls = []

    class First(TrainerCallback):
        def on_step_end(self, step, metrics):
            calls.append(("first", step, metrics["reward_mean"]))
            metrics["reward_mean"] = -1.0  # a callback's change does not reach the next one

    class OnlySave:  # any object with some of the hooks will do
        def on_save(self, step, path):
            calls.append(("save", step, path))

        def on_step_end(self, step, metrics):
            calls.append(("second", step, metrics["reward_mean"]))

    hooks = CallbackList([First(), OnlySave()])
    hooks.on_train_begin(object())
    hooks.on_step_end(3, {"reward_mean": 0.5})
    hooks.on_eval(3, {"eval_reward_mean": 0.4})
    hooks.on_save(3, Path("run/checkpoint-3"))
    hooks.on_train_end()
    assert calls == [("first", 3, 0.5), ("second", 3, 0.5), ("save", 3, Path("run/checkpoint-3"))]


def test_an_object_with_no_hook_is_refused():
    with pytest.raises(TypeError, match="dict have none of the methods on_train_begin"):
        CallbackList([{}])


def test_the_notebook_bar_counts_steps_and_shows_reward_and_loss(monkeypatch):
    import tqdm.auto

    stream = io.StringIO()
    real = tqdm.auto.tqdm
    monkeypatch.setattr(tqdm.auto, "tqdm", lambda **kwargs: real(file=stream, mininterval=0, **kwargs))
    bar = NotebookProgress()
    bar.on_train_begin(SimpleNamespace(cfg=SimpleNamespace(trainer=SimpleNamespace(num_steps=4)), start_step=2))
    bar.on_step_end(2, {"reward_mean": 0.25, "loss": 0.125})
    assert bar.bar.n == 2 and bar.bar.total == 4  # resumed at step 2: one step was done before
    bar.on_train_end()
    assert "reward=0.25" in stream.getvalue() and "loss=0.125" in stream.getvalue()
