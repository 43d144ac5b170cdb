"""A symlink planted inside a run directory (in `eval_epoch_*/`, beside a run file, under a
temporary's name) is never written through: each writer refuses it with one line naming the
path, or removes a link under its own temporary's name, and the file outside is untouched."""

from __future__ import annotations

import os

import pytest
import torch
from PIL import Image

from genalign.atomic import write_text_atomically
from genalign.config.errors import WriteError
from genalign.evaluation.contact_sheet import save_animated_preview, save_contact_sheet, save_image
from genalign.runs.checkpoint import save_checkpoint
from genalign.tracking.logs import RunLog
from genalign.tracking.sinks import CSVSink

OUTSIDE_TEXT = "not genalign's file\n"


@pytest.fixture
def outside(tmp_path):
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    target.write_text(OUTSIDE_TEXT)
    return target


def plant(link, target):
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)
    return link


def assert_refused(excinfo, link):
    message = str(excinfo.value)
    assert "\n" not in message and str(link) in message and "symbolic link" in message


WRITERS = {
    "contact_sheet.png": lambda path: save_contact_sheet(path, torch.zeros(2, 3, 8, 8, dtype=torch.uint8), ["a", "b"]),
    "samples.png": lambda path: save_image(path, Image.new("RGB", (4, 4))),
    "preview.gif": lambda path: save_animated_preview(path, torch.zeros(1, 2, 3, 8, 8, dtype=torch.uint8)),
    "report.html": lambda path: write_text_atomically(path, "<html></html>"),
    "eval_metrics.csv": lambda path: CSVSink(path).log(1, {"reward": 0.5}),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_planted_link_inside_an_eval_dir_is_refused(tmp_path, outside, name):
    link = plant(tmp_path / "run" / "eval_epoch_3" / name, outside)
    with pytest.raises(WriteError) as excinfo:
        WRITERS[name](link)
    assert_refused(excinfo, link)
    assert outside.read_text() == OUTSIDE_TEXT and link.is_symlink()


def test_a_csv_appended_to_is_refused_once_it_becomes_a_link(tmp_path, outside):
    path = tmp_path / "run" / "metrics.csv"
    sink = CSVSink(path)
    sink.log(1, {"reward": 0.5})
    path.unlink()
    plant(path, outside)
    with pytest.raises(WriteError) as excinfo:
        sink.log(2, {"reward": 0.6})  # same columns: the append path
    assert_refused(excinfo, path)
    assert outside.read_text() == OUTSIDE_TEXT


def test_train_log_link_is_refused(tmp_path, outside):
    link = plant(tmp_path / "run" / "train.log", outside)
    with pytest.raises(WriteError) as excinfo:
        RunLog(tmp_path / "run")
    assert_refused(excinfo, link)
    assert outside.read_text() == OUTSIDE_TEXT


def test_links_under_our_temporaries_names_are_removed_not_followed(tmp_path, outside):
    run = tmp_path / "run"
    plant(run / f".report.html.tmp-{os.getpid()}", outside)
    plant(run / "metrics.csv.tmp", outside)
    plant(run / f".checkpoint-2.tmp-{os.getpid()}", outside.parent)
    write_text_atomically(run / "report.html", "<html></html>")
    CSVSink(run / "metrics.csv").log(1, {"reward": 0.5})
    save_checkpoint(
        run / "checkpoint-2",
        step=2,
        trainable={"w": torch.zeros(2)},
        ema=None,
        config={"trainer": {}},
        optimizer={"state": {}, "param_groups": []},
        trainer_state={},
    )
    assert outside.read_text() == OUTSIDE_TEXT
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]
    assert (run / "report.html").read_text() == "<html></html>"
    assert (run / "checkpoint-2" / "trainable.safetensors").is_file()


def test_a_link_inside_an_old_checkpoint_is_not_written_through(tmp_path, outside):
    """A checkpoint is written to a fresh temporary and renamed over the old one: a link planted
    inside the old checkpoint is discarded with it, and its target is untouched."""
    run = tmp_path / "run"
    args = dict(
        trainable={"w": torch.zeros(2)},
        ema=None,
        config={"trainer": {}},
        optimizer={"state": {}, "param_groups": []},
        trainer_state={},
    )
    save_checkpoint(run / "checkpoint-final", step=2, **args)
    (run / "checkpoint-final" / "trainer_state.json").unlink()
    plant(run / "checkpoint-final" / "trainer_state.json", outside)
    plant(run / "checkpoint-final" / "lora", outside.parent)
    save_checkpoint(run / "checkpoint-final", step=3, **args)
    assert outside.read_text() == OUTSIDE_TEXT
    assert sorted(p.name for p in outside.parent.iterdir()) == ["precious.txt"]
    assert not (run / "checkpoint-final" / "trainer_state.json").is_symlink()
