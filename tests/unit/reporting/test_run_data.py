"""Reading a run directory for the report: tables, components, eval sheets, status, parity."""

from __future__ import annotations

import pytest
from support import make_run_dir

from genalign.reporting.run_data import ReportError, read_metric_table, read_run
from genalign.tracking.sinks import CSVSink


def test_full_run_dir_is_read(tmp_path):
    run = read_run(make_run_dir(tmp_path / "run", num_steps=6, eval_every=3))
    assert run.train.steps == [1, 2, 3, 4, 5, 6]
    assert run.train.components("reward") == ["jpeg", "ocr"]
    assert run.eval.components("eval_reward") == ["jpeg", "ocr"]
    assert run.eval.components("gold") == ["judge"]
    assert sorted(run.sheets) == [0, 3, 6]
    assert run.sheets[3].name == "contact_sheet.png"
    assert run.finished and run.parity_gap == 0.0
    assert run.setting("trainer.num_steps") == 6 and run.setting("trainer.nope") is None
    assert run.provenance is None and run.recipe is None
    # time_eval_s exists on eval steps only: its column skips the empty cells
    assert run.train.values("time_eval_s") == ([3, 6], [3.0, 3.0])
    assert run.eval.at("eval_reward_mean", 3) == pytest.approx(0.3 + 0.04 * 3)


def test_only_metrics_csv(tmp_path):
    sink = CSVSink(tmp_path / "metrics.csv")
    sink.log(1, {"reward_mean": 0.5})
    sink.log(2, {"reward_mean": 0.75, "kl": 0.1})  # a column that appears mid-run
    run = read_run(tmp_path)
    assert run.train.values("reward_mean") == ([1, 2], [0.5, 0.75])
    assert run.train.values("kl") == ([2], [0.1])
    assert not run.eval.steps and run.sheets == {} and run.config == {} and run.config_text is None
    assert not run.finished and run.last_step == 2
    assert run.parity_gap is None and run.diverged_steps == []


def test_missing_columns_are_absent_not_errors(tmp_path):
    table = read_metric_table(tmp_path / "absent.csv")
    assert table.steps == [] and not table.has("kl") and table.values("kl") == ([], [])
    assert table.first("kl") is None and table.last("kl") is None and table.at("kl", 3) is None


def test_divergence_and_parity_gap(tmp_path):
    run_dir = make_run_dir(tmp_path / "run", num_steps=4, eval_every=2, parity_gap=3.5e-4, finished=False)
    rows = (run_dir / "eval_metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    cells = rows[2].split(",")
    cells[header.index("gold_divergence")] = "1.0"  # the monitor fired at the second evaluation (step 2)
    rows[2] = ",".join(cells)
    (run_dir / "eval_metrics.csv").write_text("\n".join(rows) + "\n")
    run = read_run(run_dir)
    assert run.diverged_steps == [2]
    assert run.parity_gap == 3.5e-4 and not run.finished


def test_eval_dirs_without_a_sheet_or_with_odd_names_are_skipped(tmp_path):
    run_dir = make_run_dir(tmp_path / "run", num_steps=2, eval_every=2)
    (run_dir / "eval_epoch_7").mkdir()  # no contact sheet (crashed mid-eval)
    (run_dir / "eval_epoch_x").mkdir()
    (run_dir / "eval_epoch_x" / "contact_sheet.png").write_bytes(b"")
    assert sorted(read_run(run_dir).sheets) == [0, 2]


def test_not_a_run_dir(tmp_path):
    with pytest.raises(ReportError, match="not a directory"):
        read_run(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ReportError, match="holds no run"):
        read_run(tmp_path)


def test_malformed_metrics_name_file_and_line(tmp_path):
    (tmp_path / "metrics.csv").write_text("step,reward_mean\n1,0.5\n2,abc\n")
    with pytest.raises(ReportError, match=r"metrics.csv: line 3 is malformed"):
        read_run(tmp_path)


def test_recipe_from_the_latest_launch(tmp_path):
    import json

    run_dir = make_run_dir(tmp_path / "run", num_steps=2, eval_every=2)
    launches = [
        {"argv": ["genalign", "train", "--config", "experiment/a"]},
        {"argv": ["genalign", "train", "--config=experiment/b", "trainer.resume_from=auto"]},
    ]
    (run_dir / "provenance.json").write_text(json.dumps({"launches": launches}))
    assert read_run(run_dir).recipe == "experiment/b"
    (run_dir / "provenance.json").write_text(json.dumps({"launches": [{"argv": ["genalign", "train"]}]}))
    assert read_run(run_dir).recipe is None
