"""The run-directory rules through the real trainer on the toy recipe (seconds, not slow).

The planner's cases on hand-made directories are in tests/unit/runs/test_run_dir.py;
here a real run writes the directory, and each refusal must come before any model is built.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from genalign.preflight.load import load_config
from genalign.runs.resume import ResumeError
from genalign.runs.run_dir import RunDirError
from genalign.training import setup
from genalign.training.trainer import Trainer

SMALL = [
    "trainer.save_every=1",
    "trainer.keep_last=2",
    "trainer.progress_bar=false",
    "rollout.n=4",
    "rollout.rollout_batch_size=2",
    "rollout.sample_batch_size=8",
    "rollout.num_steps=4",
    "eval.every=0",
    "eval.max_prompts=2",
    "eval.samples_per_prompt=2",
    "eval.num_steps=3",
    "eval.batch_size=4",
]


def train(out: Path, *overrides: str) -> bool:
    """Train the toy run in `out`; False when it had nothing left to train (no Trainer built)."""
    trainer = Trainer.for_config(
        load_config("experiment/toy/shapes_grpo", [f"trainer.output_dir={out}", *SMALL, *overrides])
    )
    if trainer is None:
        return False
    trainer.train()
    return True


def refused(out: Path, monkeypatch, *overrides: str) -> str:
    """The RunDirError text; fails if a model would have been built first."""

    def no_model(cfg):
        raise AssertionError("a model was built before the run directory was checked")

    with monkeypatch.context() as patch:
        patch.setattr(setup, "build_policy", no_model)
        with pytest.raises(RunDirError) as info:
            train(out, *overrides)
    return str(info.value)


def steps(out: Path) -> list[str]:
    with (out / "metrics.csv").open() as handle:
        return [row["step"] for row in csv.DictReader(handle)]


def test_a_run_directory_is_never_lost_or_mixed(tmp_path, monkeypatch):
    out = tmp_path / "run"
    train(out, "trainer.num_steps=4")
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3", "checkpoint-final"]
    final = (out / "checkpoint-final" / "trainable.safetensors").read_bytes()

    assert "already holds a run" in refused(out, monkeypatch, "trainer.num_steps=4")
    assert "trainer.resume_from is empty" in refused(out, monkeypatch, "trainer.resume_from=", "trainer.num_steps=4")
    message = refused(out, monkeypatch, f"trainer.resume_from={out / 'checkpoint-final'}", "trainer.num_steps=2")
    assert "at step 4, past trainer.num_steps=2" in message
    message = refused(out, monkeypatch, f"trainer.resume_from={out / 'checkpoint-2'}", "trainer.num_steps=6")
    assert "would overwrite newer checkpoints" in message and "checkpoint-3, checkpoint-final" in message
    assert (out / "checkpoint-final" / "trainable.safetensors").read_bytes() == final  # nothing was touched

    stale = out / ".checkpoint-5.tmp-99999"
    stale.mkdir()
    assert not train(out, "trainer.resume_from=auto", "trainer.num_steps=4")  # already there: nothing to do
    with pytest.raises(ResumeError, match="is at step 4 = trainer.num_steps: nothing left to train"):
        Trainer(
            load_config(
                "experiment/toy/shapes_grpo",
                [f"trainer.output_dir={out}", *SMALL, "trainer.resume_from=auto", "trainer.num_steps=4"],
            )
        )
    assert not stale.exists() and steps(out) == ["1", "2", "3", "4"]
    assert (out / "checkpoint-final" / "trainable.safetensors").read_bytes() == final
    train(out, "trainer.resume_from=auto", "trainer.num_steps=6")  # continues from checkpoint-final (step 4)
    assert steps(out) == ["1", "2", "3", "4", "5", "6"]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-5", "checkpoint-final"]

    train(out, "trainer.overwrite=true", "trainer.num_steps=1")  # a fresh run replaces the old one entirely
    assert steps(out) == ["1"] and sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-final"]
