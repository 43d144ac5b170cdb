"""`preflight/start.py`: what one start refuses before any model loads."""

from __future__ import annotations

import pytest
import torch

from genalign.config.errors import ConfigError
from genalign.config.loader import config_to_dict
from genalign.preflight.load import load_config
from genalign.preflight.start import check_start
from genalign.runs.checkpoint import save_checkpoint
from genalign.runs.resume import ResumeError
from genalign.runs.run_dir import StartDecision, decide_start


def config(tmp_path, *overrides):
    return load_config(None, [f"trainer.output_dir={tmp_path / 'run'}", *overrides])


def checkpoint_of(cfg, path, step=1):
    return save_checkpoint(
        path,
        step=step,
        config=config_to_dict(cfg),
        trainable={"w": torch.zeros(2)},
        ema=None,
        optimizer={"state": {}, "param_groups": []},
        trainer_state={"eval_history": {}},
    )


def test_a_fresh_start_passes_and_has_no_checkpoint(tmp_path):
    cfg = config(tmp_path)
    reported = []
    assert check_start(cfg, decide_start(cfg), 1, reported.append) is None
    assert reported == []  # a CPU run: the memory plan is neither shown nor refused
    cfg = config(tmp_path, "distributed.resources.gpu_memory_gib=80")  # a GPU to plan against
    assert check_start(cfg, decide_start(cfg), 1, reported.append) is None
    assert reported and reported[0].startswith("memory plan")  # rank 0 logs the plan


def test_a_finished_start_is_refused(tmp_path):
    cfg = config(tmp_path)
    finished = StartDecision(tmp_path / "run", tmp_path / "run" / "checkpoint-60", 60, finished=True)
    with pytest.raises(ResumeError, match="is at step 60 = trainer.num_steps: nothing left to train"):
        check_start(cfg, finished, 1, lambda text: None)


def test_the_checkpoint_is_loaded_and_one_of_another_config_refused(tmp_path):
    cfg = config(tmp_path)
    path = checkpoint_of(cfg, tmp_path / "checkpoint-1")
    same = StartDecision(tmp_path / "run", path, 1)
    assert check_start(cfg, same, 1, lambda text: None).step == 1
    other = config(tmp_path, "trainer.seed=7")
    with pytest.raises(ResumeError, match=r"written with a different config:\n  trainer.seed: checkpoint 42 vs now 7"):
        check_start(other, same, 1, lambda text: None)


def test_the_ranks_must_share_the_accumulation_only_when_torchrun_trains(tmp_path):
    single = config(tmp_path, "actor.gradient_accumulation_steps=1")
    assert check_start(single, decide_start(single), 2, lambda text: None) is None  # strategy none: one process
    ddp = config(tmp_path, "actor.gradient_accumulation_steps=1", "distributed.training.strategy=ddp")
    with pytest.raises(ConfigError, match="multiple of the 2 ranks"):
        check_start(ddp, decide_start(ddp), 2, lambda text: None)
