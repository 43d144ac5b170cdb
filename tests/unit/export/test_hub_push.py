"""trainer.push_to_hub's uploads (export/hub_push.py) against a local fake Hub: what each
hub_strategy uploads, the card naming the repository, a staged snapshot that outlives the
checkpoint, stale files of last-checkpoint/ removed, a busy upload superseded."""

from __future__ import annotations

import threading

import pytest
from hub_fakes import FakeHub

from genalign.config.errors import ConfigError
from genalign.export.hub_push import HubPusher
from genalign.preflight.load import load_config


def checkpoint(root, name: str, step: int):
    path = root / name
    (path / "lora").mkdir(parents=True)
    (path / "trainable.safetensors").write_bytes(f"weights {step}".encode())
    (path / "lora" / "pytorch_lora_weights.safetensors").write_bytes(f"lora {step}".encode())
    (path / "lora" / f"samples_step_{step}.png").write_bytes(b"png")
    (path / "lora" / "README.md").write_text(f"pipe.load_lora_weights({str(path / 'lora')!r})\n")
    return path


@pytest.fixture
def hub(tmp_path, monkeypatch):
    return FakeHub(tmp_path / "hub").install(monkeypatch)


def files(hub, repo="me/run"):
    root = hub.root / repo
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "strategy, expected",
    [
        ("every_save", ["README.md", "pytorch_lora_weights.safetensors", "samples_step_2.png"]),
        (
            "checkpoint",
            [
                "README.md",
                "last-checkpoint/lora/README.md",
                "last-checkpoint/lora/pytorch_lora_weights.safetensors",
                "last-checkpoint/lora/samples_step_2.png",
                "last-checkpoint/trainable.safetensors",
                "pytorch_lora_weights.safetensors",
                "samples_step_2.png",
            ],
        ),
        (
            "all_checkpoints",
            [
                "README.md",
                "checkpoint-1/lora/README.md",
                "checkpoint-1/lora/pytorch_lora_weights.safetensors",
                "checkpoint-1/lora/samples_step_1.png",
                "checkpoint-1/trainable.safetensors",
                "checkpoint-final/lora/README.md",
                "checkpoint-final/lora/pytorch_lora_weights.safetensors",
                "checkpoint-final/lora/samples_step_2.png",
                "checkpoint-final/trainable.safetensors",
                "pytorch_lora_weights.safetensors",
                "samples_step_2.png",
            ],
        ),
        ("end", ["README.md", "pytorch_lora_weights.safetensors", "samples_step_2.png"]),
    ],
)
def test_each_strategy_uploads_what_transformers_does(hub, tmp_path, strategy, expected):
    pusher = HubPusher("me/run", strategy)
    pusher.on_save(1, checkpoint(tmp_path, "checkpoint-1", 1))
    pusher._pending and pusher._pending.result()  # let the first finish, so it is not superseded
    pusher.on_save(2, checkpoint(tmp_path, "checkpoint-final", 2))
    pusher.on_train_end()
    root = hub.root / "me" / "run"
    assert files(hub) == expected  # the root holds the latest export: step 1's sheet was removed
    assert (root / "pytorch_lora_weights.safetensors").read_bytes() == b"lora 2"
    # the uploaded cards load from the repository, not from this machine's folders
    assert (root / "README.md").read_text() == "pipe.load_lora_weights('me/run')\n"
    if strategy == "checkpoint":
        assert (
            root / "last-checkpoint/lora/README.md"
        ).read_text() == "pipe.load_lora_weights('me/run', subfolder='last-checkpoint/lora')\n"
        assert not (root / "last-checkpoint/lora/samples_step_1.png").exists()  # step 1's sheet was replaced
    assert not list(tmp_path.glob(".hub-upload-*"))


def test_the_upload_reads_a_snapshot_that_outlives_the_checkpoint(hub, tmp_path, monkeypatch):
    """keep_last may delete checkpoint-1 while it uploads: the staged hard links stay."""
    import shutil

    release = threading.Event()
    api = hub.api_class()()
    real_commit = api.create_commit
    api.create_commit = lambda *a, **k: (release.wait(60), real_commit(*a, **k))[1]
    pusher = HubPusher("me/run", "all_checkpoints", api=api)
    path = checkpoint(tmp_path, "checkpoint-1", 1)
    pusher.on_save(1, path)
    shutil.rmtree(path)  # pruned while the upload waits
    pusher.on_save(2, checkpoint(tmp_path, "checkpoint-2", 2))  # busy: superseded, not queued
    release.set()
    pusher.on_train_end()
    assert (hub.root / "me/run/checkpoint-1/trainable.safetensors").read_bytes() == b"weights 1"
    assert not (hub.root / "me/run/checkpoint-2").exists()


def test_push_to_hub_is_checked_before_anything_loads(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as err:
        load_config(None, ["trainer.push_to_hub=me/run", "trainer.hub_strategy=checkpoint"])
    assert err.value.problems == [
        "trainer.push_to_hub=me/run: HF_HUB_OFFLINE is set and uploading needs the network; "
        "unset it, or drop trainer.push_to_hub and upload later with genalign export"
    ]
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with pytest.raises(ConfigError, match="model.family=toy exports no model folder"):
        load_config(None, ["trainer.push_to_hub=me/run"])  # every_save: nothing to upload for the toy demo
    with pytest.raises(ConfigError, match="trainer.hub_strategy='every_step' is not supported"):
        load_config(None, ["trainer.push_to_hub=me/run", "trainer.hub_strategy=every_step"])
    load_config(None, ["trainer.push_to_hub=me/run", "trainer.hub_strategy=checkpoint"])
