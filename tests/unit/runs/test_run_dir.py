"""Run-directory rules (`runs/run_dir.py`) on hand-made directories: no model is built."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from genalign.config.errors import ConfigError
from genalign.config.loader import config_to_dict
from genalign.preflight.load import load_config
from genalign.runs.checkpoint import TRAINER_STATE, checkpoint_step, save_checkpoint
from genalign.runs.run_dir import RunDirError, decide_start, prune_checkpoints

RECIPE = "experiment/toy/shapes_grpo"


def config(out: Path, *overrides: str):
    return load_config(RECIPE, [f"trainer.output_dir={out}", "trainer.num_steps=8", *overrides])


def fake_checkpoint(path: Path, step: int) -> Path:
    """A structurally valid checkpoint (tiny tensors): the planner reads headers and JSON only."""
    return save_checkpoint(
        path,
        step=step,
        config={"trainer": {}},
        trainable={"w": torch.zeros(2)},
        ema=None,
        optimizer={"state": {}, "param_groups": []},
        trainer_state={},
    )


def old_run(out: Path, steps=(2, 4), final: int | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.csv").write_text("step,loss\n1,0.5\n")
    (out / "eval_epoch_0").mkdir()
    for step in steps:
        fake_checkpoint(out / f"checkpoint-{step}", step)
    if final is not None:
        fake_checkpoint(out / "checkpoint-final", final)


def test_fresh_run_into_an_empty_or_missing_dir_is_fine(tmp_path):
    start = decide_start(config(tmp_path / "missing"))
    assert start.checkpoint is None and start.remove == []
    (tmp_path / "notes.txt").write_text("mine")  # not a run file: neither refused nor removed
    assert decide_start(config(tmp_path)).remove == []


def test_fresh_run_into_an_existing_run_is_refused_unless_overwrite(tmp_path):
    old_run(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match=rf"trainer.output_dir={tmp_path} already holds a run .*trainer.overwrite"):
        decide_start(config(tmp_path))
    start = decide_start(config(tmp_path, "trainer.overwrite=true"))
    start.apply()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_the_report_and_provenance_belong_to_the_run(tmp_path):
    # a directory holding only an old run's page and provenance is a run: refused, then removed
    (tmp_path / "report.html").write_text("<html>")
    (tmp_path / "provenance.json").write_text('{"launches": []}')
    with pytest.raises(RunDirError, match="already holds a run \\(provenance.json, report.html\\)"):
        decide_start(config(tmp_path))
    decide_start(config(tmp_path, "trainer.overwrite=true")).apply()
    assert list(tmp_path.iterdir()) == []


def test_empty_resume_from_is_an_error_not_a_fresh_run(tmp_path):
    with pytest.raises(RunDirError, match="trainer.resume_from is empty"):
        decide_start(config(tmp_path, "trainer.resume_from="))


def test_auto_takes_the_newest_complete_checkpoint(tmp_path):
    old_run(tmp_path, steps=(2, 4))
    (tmp_path / "eval_epoch_5").mkdir()  # a crash after step 5's eval, before its checkpoint: redone
    partial = tmp_path / "checkpoint-6"
    partial.mkdir()  # incomplete: ignored
    (tmp_path / ".checkpoint-6.tmp-12345").mkdir()  # a crash mid-save: removed
    start = decide_start(config(tmp_path, "trainer.resume_from=auto"))
    assert start.checkpoint == tmp_path / "checkpoint-4" and start.checkpoint_step == 4
    assert start.remove == [tmp_path / ".checkpoint-6.tmp-12345", tmp_path / "eval_epoch_5"]
    start.apply()
    assert not (tmp_path / ".checkpoint-6.tmp-12345").exists() and (tmp_path / "checkpoint-4").exists()
    assert (tmp_path / "eval_epoch_0").exists() and not (tmp_path / "eval_epoch_5").exists()


def test_auto_without_checkpoint_starts_fresh_and_replaces_the_partial_run(tmp_path, caplog):
    assert decide_start(config(tmp_path / "new", "trainer.resume_from=auto")).checkpoint is None
    old_run(tmp_path, steps=())
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config_to_dict(config(tmp_path))))  # ours
    caplog.set_level("INFO")
    start = decide_start(config(tmp_path, "trainer.resume_from=auto"))
    assert start.checkpoint is None and "no complete checkpoint" in caplog.text
    assert set(start.remove) == {tmp_path / "metrics.csv", tmp_path / "eval_epoch_0", tmp_path / "config.yaml"}


def plant_foreign_files(directory: Path) -> dict[str, bytes]:
    """What another tool leaves in a directory: run-like names, tracker folders, dotfiles."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "metrics.csv": b"epoch,acc\n1,0.9\n",
        "report.html": b"<p>mine</p>",
        "train.log": b"my log\n",
        "eval_metrics.csv": b"x\n",
        "eval_epoch_3/result.txt": b"3",
        "wandb/run-1/files.txt": b"w",
        "tensorboard/events.out": b"tb",
        ".notes.tmp-123": b"dot",
        ".report.html.tmp-42": b"dot2",
        ".checkpoint-5.tmp-7/part": b"p",
        "config.yaml": b"learning_rate: 0.1\nepochs: 3\n",
    }
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    return files


@pytest.mark.parametrize("overrides", [[], ["trainer.resume_from=auto"]], ids=["fresh", "auto"])
def test_a_directory_that_is_not_a_genalign_run_loses_nothing(tmp_path, overrides):
    files = plant_foreign_files(tmp_path)
    with pytest.raises(RunDirError, match="is not a genalign run .*trainer.overwrite=true"):
        decide_start(config(tmp_path, *overrides))
    assert {name: (tmp_path / name).read_bytes() for name in files} == files
    # without the run-named files, only the tool's logs, tracker folders and dotfiles are left:
    # a fresh start that removes none of them
    for name in ("metrics.csv", "report.html", "eval_metrics.csv", "eval_epoch_3/result.txt", "config.yaml"):
        (tmp_path / name).unlink()
        del files[name]
    (tmp_path / "eval_epoch_3").rmdir()
    start = decide_start(config(tmp_path, *overrides))
    assert start.remove == []
    start.apply()
    assert {name: (tmp_path / name).read_bytes() for name in files} == files


def test_overwrite_does_remove_run_named_files_of_another_tool(tmp_path):
    plant_foreign_files(tmp_path)
    start = decide_start(config(tmp_path, "trainer.overwrite=true"))
    assert {p.name for p in start.remove} == {
        "metrics.csv",
        "report.html",
        "eval_metrics.csv",
        "eval_epoch_3",
        "config.yaml",
        "train.log",
        "wandb",
        "tensorboard",
    }


def test_stale_temporaries_are_removed_in_a_genalign_run_only(tmp_path):
    old_run(tmp_path, steps=(2,))
    for name in (".checkpoint-3.tmp-11", ".report.html.tmp-12", ".notes.txt.tmp-13"):
        (tmp_path / name).mkdir()
    start = decide_start(config(tmp_path, "trainer.resume_from=auto"))
    assert {p.name for p in start.remove} == {".checkpoint-3.tmp-11", ".report.html.tmp-12"}


def test_a_run_name_that_is_a_symlink_is_refused(tmp_path):
    old_run(tmp_path, steps=(2,))
    elsewhere = tmp_path.parent / "elsewhere.log"
    elsewhere.write_text("precious\n")
    (tmp_path / "train.log").symlink_to(elsewhere)
    with pytest.raises(RunDirError, match="train.log is a symbolic link"):
        decide_start(config(tmp_path, "trainer.resume_from=auto"))
    assert elsewhere.read_text() == "precious\n"


def test_auto_names_the_checkpoints_it_skips_and_why(tmp_path, caplog):
    old_run(tmp_path, steps=(2, 4, 6))
    (tmp_path / "checkpoint-4" / TRAINER_STATE).write_text("{not json")
    optimizer = tmp_path / "checkpoint-6" / "optimizer.safetensors"
    optimizer.write_bytes(optimizer.read_bytes()[:-1])
    caplog.set_level("INFO")
    start = decide_start(config(tmp_path, "trainer.resume_from=auto"))
    assert start.checkpoint == tmp_path / "checkpoint-2"
    skipped = sorted(r.getMessage() for r in caplog.records if "skipping" in r.getMessage())
    assert len(skipped) == 2, skipped
    assert "checkpoint-4/trainer_state.json is not valid JSON" in skipped[0] and "skipping checkpoint-4" in skipped[0]
    assert "checkpoint-6/optimizer.safetensors is truncated" in skipped[1] and "skipping checkpoint-6" in skipped[1]


def test_auto_without_checkpoint_refuses_a_different_runs_files(tmp_path):
    old_run(tmp_path, steps=())
    saved = config_to_dict(config(tmp_path, "actor.lr=0.5"))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(RunDirError, match="different config .*actor.lr"):
        decide_start(config(tmp_path, "trainer.resume_from=auto"))


def test_resume_never_moves_backwards(tmp_path):
    fake_checkpoint(tmp_path / "checkpoint-7", 7)
    with pytest.raises(RunDirError, match=r"step 7, past trainer.num_steps=4; .*set trainer.num_steps above 7"):
        decide_start(config(tmp_path, f"trainer.resume_from={tmp_path / 'checkpoint-7'}", "trainer.num_steps=4"))
    start = decide_start(config(tmp_path, f"trainer.resume_from={tmp_path / 'checkpoint-7'}", "trainer.num_steps=7"))
    assert start.finished


def test_resume_that_would_overwrite_newer_checkpoints_is_refused_unless_overwrite(tmp_path):
    old_run(tmp_path, steps=(2, 4), final=6)
    (tmp_path / "eval_epoch_5").mkdir()
    older = f"trainer.resume_from={tmp_path / 'checkpoint-2'}"
    with pytest.raises(RunDirError, match=r"would overwrite newer checkpoints .*checkpoint-4, checkpoint-final\)"):
        decide_start(config(tmp_path, older))
    start = decide_start(config(tmp_path, older, "trainer.overwrite=true"))
    assert set(start.remove) == {tmp_path / n for n in ("checkpoint-4", "checkpoint-final", "eval_epoch_5")}
    # resuming from another directory's checkpoint into this one is judged the same way
    other = fake_checkpoint(tmp_path / "elsewhere" / "checkpoint-3", 3)
    with pytest.raises(RunDirError, match="would overwrite newer checkpoints"):
        decide_start(config(tmp_path, f"trainer.resume_from={other}"))


def test_keep_last_keeps_the_newest_numbered_checkpoints_and_never_final(tmp_path):
    old_run(tmp_path, steps=(1, 2, 10, 11), final=12)
    removed = prune_checkpoints(tmp_path, 2)
    assert [p.name for p in removed] == ["checkpoint-1", "checkpoint-2"]  # by step, not by name
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == [
        "checkpoint-10",
        "checkpoint-11",
        "checkpoint-final",
    ]
    assert not list(tmp_path.glob(".checkpoint-*")) and prune_checkpoints(tmp_path, None) == []
    with pytest.raises(ConfigError, match="trainer.keep_last=0 must be >= 1"):
        config(tmp_path / "x", "trainer.keep_last=0")


def test_checkpoint_step_needs_every_file(tmp_path):
    path = fake_checkpoint(tmp_path / "checkpoint-3", 3)
    assert checkpoint_step(path) == 3
    (path / "optimizer.json").unlink()
    assert checkpoint_step(path) is None


def test_save_refuses_to_replace_a_later_step(tmp_path):
    import torch

    from genalign.runs.checkpoint import save_checkpoint

    weights = {"w": torch.zeros(2)}

    def save(step: int):
        return save_checkpoint(
            tmp_path / "checkpoint-final",
            step=step,
            config={},
            trainable=weights,
            ema=None,
            optimizer={"state": {}, "param_groups": []},
            trainer_state={},
        )

    save(8)
    with pytest.raises(ValueError, match="holds step 8; refusing to overwrite it with step 4"):
        save(4)
    assert checkpoint_step(tmp_path / "checkpoint-final") == 8
    save(8)  # the same step again (a redone step after a crash) is allowed


def test_logs_and_tracker_dirs_go_with_their_run_but_alone_are_not_a_run(tmp_path):
    (tmp_path / "train.log").write_text("a start that failed while loading the model\n")
    assert decide_start(config(tmp_path)).remove == []  # not a run: the next start appends to the log
    old_run(tmp_path)
    (tmp_path / "tensorboard").mkdir()
    (tmp_path / "wandb").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    start = decide_start(config(tmp_path, "trainer.overwrite=true"))
    assert {"train.log", "tensorboard", "wandb"} <= {p.name for p in start.remove}
    start.apply()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
