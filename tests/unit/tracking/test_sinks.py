"""CSVSink layout, widening, exact floats, crash safety and bitwise resume; Null/Multi/TensorBoard."""

import sys

import numpy as np
import pytest
import torch

from genalign.tracking.sinks import CSVSink, MultiSink, NullSink, PrefixedSink, format_value
from genalign.tracking.trackers import TensorBoardSink


def lines(path):
    return path.read_text().splitlines()


def test_step_first_then_alphabetical_and_each_row_on_disk(tmp_path):
    path = tmp_path / "m.csv"
    sink = CSVSink(path)
    sink.log(1, {"loss": 0.5, "kl": 0.25, "accuracy": 1})
    assert lines(path) == ["step,accuracy,kl,loss", "1,1,0.25,0.5"]  # written before close
    sink.log(2, {"loss": 0.1, "kl": 0.2, "accuracy": 0})
    assert lines(path)[-1] == "2,0,0.2,0.1"


def test_missing_key_is_empty_and_new_key_widens_the_header(tmp_path):
    path = tmp_path / "m.csv"
    sink = CSVSink(path)
    sink.log(1, {"b": 1.0, "a": 2.0})
    sink.log(2, {"b": 3.0})
    sink.log(3, {"b": 4.0, "new": 5.0})
    assert lines(path) == ["step,a,b,new", "1,2.0,1.0,", "2,,3.0,", "3,,4.0,5.0"]
    sink.log(4, {"a": 6.0})
    assert lines(path)[-1] == "4,6.0,,"
    assert not (tmp_path / "m.csv.tmp").exists()


def test_floats_round_trip_exactly(tmp_path):
    values = [0.1 + 0.2, 1 / 3, 1e-300, -2.5e17, float("inf"), float(np.float32(0.1))]
    sink = CSVSink(tmp_path / "m.csv")
    for step, value in enumerate(values):
        sink.log(step, {"x": value})
    read = [float(line.split(",")[1]) for line in lines(tmp_path / "m.csv")[1:]]
    assert read == values


def test_format_value_converts_numpy_and_torch_scalars():
    assert format_value("x", np.float64(0.5)) == "0.5"
    assert format_value("x", torch.tensor(0.25, dtype=torch.float64)) == "0.25"
    assert format_value("x", np.int64(3)) == "3"
    assert format_value("x", True) == "1"
    with pytest.raises(TypeError, match="metric 'x' is a tensor of shape"):
        format_value("x", torch.zeros(2))
    with pytest.raises(TypeError, match="metric 'name' has type str"):
        format_value("name", "text")


def test_step_is_reserved(tmp_path):
    with pytest.raises(ValueError, match="'step'"):
        CSVSink(tmp_path / "m.csv").log(1, {"step": 1.0})


def run(sink, steps):
    for step in steps:
        metrics = {"loss": step / 7, "reward": step * 0.1}
        if step == 3:
            metrics["rare"] = 1.5  # widens the header mid-run
        sink.log(step, metrics)


def test_resume_equals_an_uninterrupted_run(tmp_path):
    full, resumed = tmp_path / "full.csv", tmp_path / "resumed.csv"
    run(CSVSink(full), range(1, 7))
    run(CSVSink(resumed), range(1, 6))  # crashed after logging step 5; checkpoint at step 2
    run(CSVSink(resumed, resume=True), range(3, 7))
    assert resumed.read_bytes() == full.read_bytes()


def test_resume_drops_columns_only_the_dropped_rows_had(tmp_path):
    redone = {"loss": 3 / 7, "reward": 1.3}  # step 3 redone after resuming from step 2: no "rare"
    full, resumed = tmp_path / "full.csv", tmp_path / "resumed.csv"
    uninterrupted = CSVSink(full)
    run(uninterrupted, [1, 2])
    uninterrupted.log(3, redone)
    run(CSVSink(resumed), [1, 2, 3])  # the first attempt's step 3 introduced "rare"
    CSVSink(resumed, resume=True).log(3, redone)
    assert resumed.read_bytes() == full.read_bytes()
    assert lines(resumed)[0] == "step,loss,reward"


def test_resume_without_a_file_starts_one_and_without_resume_overwrites(tmp_path):
    path = tmp_path / "sub" / "m.csv"
    CSVSink(path, resume=True).log(4, {"a": 1.0})
    assert lines(path) == ["step,a", "4,1.0"]
    CSVSink(path).log(1, {"b": 2.0})
    assert lines(path) == ["step,b", "1,2.0"]


def test_resume_refuses_a_foreign_file(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("epoch,loss\n1,0.5\n")
    with pytest.raises(ValueError, match="first column is 'epoch'"):
        CSVSink(path, resume=True)


class Recorder:
    def __init__(self):
        self.rows, self.images, self.closed = [], [], False

    def log(self, step, metrics):
        self.rows.append((step, metrics))

    def log_image(self, step, name, image):
        self.images.append((step, name, image))

    def close(self):
        self.closed = True


def test_multi_sink_forwards_and_null_sink_drops():
    first, second = Recorder(), Recorder()
    sink = MultiSink([first, NullSink(), second])
    sink.log(3, {"a": 1.0})
    sink.close()
    assert first.rows == second.rows == [(3, {"a": 1.0})]
    assert first.closed and second.closed


def test_tensorboard_sink_without_tensorboard_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    with pytest.raises(ImportError, match=r"pip install 'genalign\[trackers\]'"):
        TensorBoardSink(tmp_path)


def test_prefixed_sink_names_rows_and_images_under_its_prefix():
    inner = Recorder()
    sink = MultiSink([NullSink(), PrefixedSink(inner, "eval")])
    sink.log(2, {"reward_mean": 0.5})
    sink.log_image(2, "contact_sheet", "IMAGE")
    sink.close()
    assert inner.rows == [(2, {"eval/reward_mean": 0.5})]
    assert inner.images == [(2, "eval/contact_sheet", "IMAGE")] and inner.closed


def test_csv_sink_ignores_images(tmp_path):
    sink = CSVSink(tmp_path / "m.csv")
    sink.log(1, {"a": 1.0})
    sink.log_image(1, "contact_sheet", object())
    assert (tmp_path / "m.csv").read_text().splitlines() == ["step,a", "1,1.0"]


def test_tensorboard_sink_writes_scalars_and_images(tmp_path):
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path)
    sink.log(1, {"loss": torch.tensor(0.25), "count": 3})
    sink.log_image(1, "sheet", Image.new("RGB", (6, 4), "red"))
    sink.close()
    sink.close()  # idempotent: a train/ and an eval/ prefix share one tracker
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 0.25)]
    assert [(e.step, e.value) for e in events.Scalars("count")] == [(1, 3.0)]
    (image,) = events.Images("sheet")
    assert (image.width, image.height) == (6, 4)
