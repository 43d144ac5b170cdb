import json

import pytest
import torch

from genalign.runs.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def trained_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(2):
        model(torch.randn(4, 3)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def test_round_trip_restores_weights_optimizer_and_state(tmp_path):
    model, opt = trained_optimizer()
    trainable = {k: v.detach().clone() for k, v in model.state_dict().items()}
    path = save_checkpoint(
        tmp_path / "checkpoint-2",
        step=2,
        config={"a": {"b": 1}},
        trainable=trainable,
        ema={k: v * 0.5 for k, v in trainable.items()},
        optimizer=opt.state_dict(),
        trainer_state={"ema_optimizer_steps": 2, "eval_history": {}},
    )
    state = load_checkpoint(path)
    assert state.step == 2 and state.config == {"a": {"b": 1}}
    for k in trainable:
        assert torch.equal(state.trainable[k], trainable[k])
        assert torch.equal(state.ema[k], trainable[k] * 0.5)
    fresh_model = torch.nn.Linear(3, 2)
    fresh = torch.optim.AdamW(fresh_model.parameters(), lr=1e-2)
    fresh.load_state_dict(state.optimizer)
    for a, b in zip(opt.state.values(), fresh.state.values()):
        assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])
        assert torch.equal(torch.as_tensor(a["step"]), torch.as_tensor(b["step"]))
    # nothing but safetensors / json / yaml on disk
    suffixes = {p.suffix for p in path.iterdir()}
    assert suffixes <= {".safetensors", ".json", ".yaml"}


def test_no_temp_directories_are_left_and_overwrite_is_atomic(tmp_path):
    model, opt = trained_optimizer()
    trainable = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for step in (1, 2):
        save_checkpoint(
            tmp_path / "checkpoint-final",
            step=step,
            config={},
            trainable=trainable,
            ema=None,
            optimizer=opt.state_dict(),
            trainer_state={},
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-final"]
    assert load_checkpoint(tmp_path / "checkpoint-final").step == 2


def test_crash_during_write_leaves_no_checkpoint(tmp_path):
    model, opt = trained_optimizer()
    trainable = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def failing_export(directory):
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(
            tmp_path / "checkpoint-3",
            step=3,
            config={},
            trainable=trainable,
            ema=None,
            optimizer=opt.state_dict(),
            trainer_state={},
            export=failing_export,
        )
    assert not (tmp_path / "checkpoint-3").exists()
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "checkpoint-3")


def test_incomplete_checkpoint_is_refused(tmp_path):
    (tmp_path / "checkpoint-1").mkdir()
    (tmp_path / "checkpoint-1" / "trainer_state.json").write_text(json.dumps({"step": 1}))
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        load_checkpoint(tmp_path / "checkpoint-1")


def test_disk_full_removes_the_partial_write_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import errno

    import genalign.runs.checkpoint as checkpoint_module

    model, opt = trained_optimizer()
    trainable = {k: v.detach().clone() for k, v in model.state_dict().items()}
    path = save_checkpoint(
        tmp_path / "checkpoint-final",
        step=1,
        config={},
        trainable=trainable,
        ema=None,
        optimizer=opt.state_dict(),
        trainer_state={},
    )
    before = {p.name: p.read_bytes() for p in path.iterdir()}

    def full_disk(tensors, filename):
        raise OSError(errno.ENOSPC, "No space left on device", filename)

    monkeypatch.setattr(checkpoint_module, "save_file", full_disk)
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint-final failed \(No space left on device\).*was removed; "
        r"the previous checkpoint-final is intact",
    ):
        save_checkpoint(
            path, step=2, config={}, trainable=trainable, ema=None, optimizer=opt.state_dict(), trainer_state={}
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-final"]  # no .tmp dir left
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before
    assert load_checkpoint(path).step == 1


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("trainer_state.json", b"{", r"trainer_state\.json is not valid JSON"),
        ("trainer_state.json", b'{"steps": 1}', r"trainer_state\.json has no integer \"step\""),
        ("optimizer.json", b"[]", r"optimizer\.json lacks"),
        ("config.yaml", b"a: 1\na: 2\n", r"config\.yaml is not valid YAML \(duplicate key 'a'"),
        ("trainable.safetensors", b"\x01", r"trainable\.safetensors is truncated"),
    ],
)
def test_corrupt_files_are_refused_naming_the_file(tmp_path, name, content, message):
    model, opt = trained_optimizer()
    trainable = {k: v.detach().clone() for k, v in model.state_dict().items()}
    path = save_checkpoint(
        tmp_path / "checkpoint-1",
        step=1,
        config={},
        trainable=trainable,
        ema=None,
        optimizer=opt.state_dict(),
        trainer_state={},
    )
    (path / name).write_bytes(content)
    with pytest.raises(CheckpointError, match=rf"^trainer\.resume_from: {path}/{message}"):
        load_checkpoint(path)
