"""Non-finite values never reach a checkpoint (real toy runs on the CPU, seconds each).

- a NaN in a checkpoint's tensor is refused at load, naming the file and the tensor;
- a NaN in the policy's weights stops the first step at the rollout, naming the prompt and
  the sample, before any reward, update or checkpoint;
- steps that train nothing (here: a reward equal for every sample) stop the run after
  trainer.max_idle_steps of them, with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from genalign.finite import NonFiniteError
from genalign.preflight.load import load_config
from genalign.runs.checkpoint import CheckpointError, load_checkpoint
from genalign.runs.stopping import TrainingStalled
from genalign.training.trainer import Trainer

SMALL = [
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


def trainer(out: Path, *overrides: str) -> Trainer:
    return Trainer(load_config("experiment/toy/shapes_grpo", [f"trainer.output_dir={out}", *SMALL, *overrides]))


def test_a_nan_in_a_checkpoint_tensor_is_refused_naming_file_and_tensor(tmp_path):
    trainer(tmp_path / "run", "trainer.num_steps=1").train()
    final = tmp_path / "run" / "checkpoint-final"
    load_checkpoint(final)  # finite: loads
    tensors = load_file(str(final / "trainable.safetensors"))
    name = sorted(tensors)[1]
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, str(final / "trainable.safetensors"))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(final)
    assert f"{final}/trainable.safetensors: tensor {name!r} holds NaN" in str(info.value)
    with pytest.raises(CheckpointError, match="holds NaN"):  # the trainer refuses it before building anything
        trainer(tmp_path / "run", "trainer.num_steps=2", "trainer.resume_from=auto")


def test_nan_weights_stop_the_first_step_naming_prompt_and_sample(tmp_path):
    run = trainer(tmp_path / "run", "trainer.num_steps=3", "trainer.save_every=1", "eval.at_start=false")
    lora = next(p for name, p in run.parameters.items() if "lora_B" in name)
    with torch.no_grad():
        lora.view(-1)[0] = float("nan")
    with pytest.raises(NonFiniteError) as info:
        run.train()
    message = str(info.value)
    assert message.startswith("step 1: sampling produced non-finite latents (NaN) for 8 sample(s): prompt '")
    assert "seed" in message and "and 5 more" in message, message
    assert "\n" not in message
    assert not list((tmp_path / "run").glob("checkpoint-*")), "a checkpoint was written"


def test_steps_that_train_nothing_stop_the_run_with_the_reason(tmp_path, monkeypatch):
    from genalign.rewards import scores

    original = scores.RewardScores.__init__

    def equal_rewards(self, components, *args, **kwargs):  # every sample scores the same
        original(self, {name: torch.ones_like(value) for name, value in components.items()}, *args, **kwargs)

    monkeypatch.setattr(scores.RewardScores, "__init__", equal_rewards)
    with pytest.raises(TrainingStalled) as info:
        trainer(
            tmp_path / "run", "trainer.num_steps=10", "trainer.max_idle_steps=2", "algorithm.drop_zero_advantage=true"
        ).train()
    assert str(info.value).startswith("steps 1-2 trained nothing (every sample's advantage was zero")


def test_nan_weights_stop_the_first_evaluation_too(tmp_path):
    run = trainer(tmp_path / "run", "trainer.num_steps=3")
    lora = next(p for name, p in run.parameters.items() if "lora_B" in name)
    with torch.no_grad():
        lora.view(-1)[0] = float("inf")
    with pytest.raises(NonFiniteError, match=r"^eval step 0: sampling produced non-finite latents \(NaN"):
        run.train()
