"""Step log lines carry step/total, steps/s and ETA; on CUDA each step's peak allocated GPU
memory lands in metrics.csv, the log line and the report (tested on the CPU by injecting the
memory reader the trainer would take from torch.cuda)."""

from __future__ import annotations

import pytest
from support import read_rows

import genalign.training.trainer as trainer_module
from genalign.preflight.load import load_config
from genalign.training.memory import COLUMN, GIB, PeakMemory
from genalign.training.trainer import Trainer

SMALL = [
    "trainer.num_steps=2",
    "trainer.save_every=0",
    "trainer.progress_bar=false",
    "rollout.n=2",
    "rollout.rollout_batch_size=2",
    "rollout.sample_batch_size=4",
    "rollout.num_steps=4",
    "eval.every=0",
    "eval.at_start=false",
    "eval.gold_rewards.toy_shape_judge=0",
    "eval.quality_metrics=[]",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("progress")
    resets = []
    peaks = iter([1.5 * GIB, 0.75 * GIB])

    def fake_cuda_memory(device):  # what PeakMemory reads on a CUDA device, without one
        return PeakMemory(device, read=lambda: next(peaks), reset=lambda: resets.append(True))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer_module, "PeakMemory", fake_cuda_memory)
        Trainer(load_config(None, [*SMALL, f"trainer.output_dir={out}"])).train()
    return out, resets


def test_metrics_csv_has_the_peak_of_each_step(run):
    out, resets = run
    assert [float(row[COLUMN]) for row in read_rows(out / "metrics.csv")] == [1.5, 0.75]
    assert len(resets) == 2  # reset before every step, so each figure is that step's own peak


def test_log_lines_carry_progress_rate_eta_and_memory(run):
    out, _ = run
    log = (out / "train.log").read_text()
    for step, peak in ((1, "1.50"), (2, "0.75")):
        line = next(line for line in log.splitlines() if f"step {step}/2, " in line)
        assert " steps/s, ETA " in line and f"peak GPU memory {peak} GiB" in line, line


def test_report_shows_the_peak(run):
    out, _ = run
    html = (out / "report.html").read_text()
    assert "peak GPU memory" in html and "1.5 GiB" in html and 'id="plot-gpu_memory"' in html


def test_a_cpu_run_has_no_memory_column(tmp_path):
    Trainer(load_config(None, [*SMALL, "trainer.num_steps=1", f"trainer.output_dir={tmp_path}"])).train()
    assert COLUMN not in read_rows(tmp_path / "metrics.csv")[0]
    assert "peak GPU memory" not in (tmp_path / "train.log").read_text()
