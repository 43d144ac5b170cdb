"""The Hub habits, offline with the Hub client replaced by a local folder (tests/hub_fakes.py):
training prompts from a Hub dataset, each checkpoint uploaded from a background thread while
training goes on (a failed upload warns and the run finishes), and a fresh run resumed from
the uploaded checkpoint."""

from __future__ import annotations

import logging

import pytest
import torch
from hub_fakes import FakeHub
from safetensors.torch import load_file
from support import read_rows

from genalign.data.prompts import load_manifest
from genalign.preflight.load import load_config
from genalign.training.trainer import Trainer


def tiny_toy(out, *extra: str) -> list[str]:
    return [
        "rollout.num_steps=4",
        "algorithm.timestep_fraction=0.5",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=4",
        "actor.gradient_accumulation_steps=1",
        "eval.num_steps=2",
        "eval.max_prompts=2",
        "eval.samples_per_prompt=2",
        "eval.batch_size=4",
        "eval.every=0",
        "eval.at_start=false",
        "trainer.save_every=1",
        f"trainer.output_dir={out}",
        "trainer.progress_bar=false",
        *extra,
    ]


@pytest.fixture
def hub(tmp_path, monkeypatch):
    hub = FakeHub(tmp_path / "hub").install(monkeypatch)
    prompts = [{"prompt": example.prompt, "source": "toy"} for example in load_manifest("datasets/toy/train.txt")]
    hub.add_dataset("me/shape-prompts", "train", prompts)
    return hub


def test_prompts_from_a_hub_dataset_uploads_while_training_and_a_resume_from_the_hub(hub, tmp_path, caplog):
    class Weights:
        """Records the trained tensors when the run begins (after any resume)."""

        def on_train_begin(self, trainer):
            self.at_start = {name: p.detach().clone() for name, p in trainer.parameters.items()}

    first = tmp_path / "first"
    hub.fail_commits = 1  # checkpoint-1's upload is refused: a warning, and training goes on
    cfg = load_config(
        "experiment/toy/shapes_grpo",
        tiny_toy(
            first,
            "trainer.num_steps=2",
            "data.manifest=hf://datasets/me/shape-prompts",
            "trainer.push_to_hub=me/toy-run",
            "trainer.hub_strategy=checkpoint",
            "trainer.hub_private=true",
        ),
        check_files=True,
    )
    with caplog.at_level(logging.INFO, logger="genalign"):
        Trainer(cfg).train()
    assert [r["step"] for r in read_rows(first / "metrics.csv")] == ["1", "2"]
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "push_to_hub" in r.getMessage()
    ]
    assert len(warnings) == 1 and "uploading checkpoint-1 to me/toy-run failed" in warnings[0]
    assert "genalign export <output_dir>/checkpoint-1 --push-to-hub me/toy-run" in warnings[0]
    # the final checkpoint always uploads (the run waits for it), in one commit, to last-checkpoint/
    repo = hub.root / "me" / "toy-run"
    assert hub.created[0] == ("me/toy-run", True)
    assert hub.commits[-1][1] == "checkpoint-final (step 2, genalign)"
    for name in ("trainable.safetensors", "optimizer.safetensors", "trainer_state.json", "config.yaml"):
        assert (repo / "last-checkpoint" / name).read_bytes() == (first / "checkpoint-final" / name).read_bytes()
    assert not list(first.glob(".hub-upload-*"))  # the staging folders are gone

    # a fresh directory, resumed from the Hub: it continues at step 3 from exactly those weights
    second = tmp_path / "second"
    recorder = Weights()
    cfg = load_config(
        "experiment/toy/shapes_grpo",
        tiny_toy(
            second,
            "trainer.num_steps=3",
            "data.manifest=hf://datasets/me/shape-prompts",
            "trainer.resume_from=hf://me/toy-run/last-checkpoint",
        ),
        check_files=True,
    )
    Trainer.for_config(cfg, callbacks=[recorder]).train()
    assert [r["step"] for r in read_rows(second / "metrics.csv")] == ["3"]
    uploaded = load_file(str(repo / "last-checkpoint" / "trainable.safetensors"))
    assert uploaded.keys() == recorder.at_start.keys()
    assert all(torch.equal(uploaded[k], recorder.at_start[k]) for k in uploaded)


def test_a_missing_hub_checkpoint_or_dataset_is_one_line_before_anything_loads(hub, tmp_path):
    from genalign.config.errors import ConfigError, UserError

    with pytest.raises(UserError, match="cannot download the checkpoint .*Repository Not Found"):
        Trainer.for_config(
            load_config(
                "experiment/toy/shapes_grpo",
                tiny_toy(tmp_path / "r", "trainer.resume_from=hf://me/nothing/last-checkpoint"),
            )
        )
    with pytest.raises(ConfigError) as err:
        load_config(
            "experiment/toy/shapes_grpo",
            tiny_toy(tmp_path / "r", "data.manifest=hf://datasets/me/nope"),
            check_files=True,
        )
    assert err.value.problems[0].startswith(
        "data.manifest: cannot load the Hub dataset hf://datasets/me/nope:train "
        "(FileNotFoundError: Dataset 'me/nope' doesn't exist"
    )
