"""A full disk mid-run: one line naming the file, exit 2, nothing half-written, resumable.

The CLI runs the toy recipe in a subprocess under RLIMIT_FSIZE (a write past the limit fails
with EFBIG, as a full disk fails with ENOSPC: both are `DISK_FULL_ERRNOS`), at limits that
make the first failing write config.yaml, the first contact sheet, or the first checkpoint.
The CSV sink's append is checked in-process with an injected ENOSPC.
"""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from genalign.config.errors import WriteError
from genalign.tracking.sinks import CSVSink

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "trainer.save_every=1",
    "trainer.keep_last=2",
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
    "trainer.num_steps=2",
    "trainer.resume_from=auto",
]


def train(out: Path, file_size_limit: int | None) -> subprocess.CompletedProcess:
    def limit() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [sys.executable, "-m", "genalign", "train", f"trainer.output_dir={out}", *SMALL],
        cwd=ROOT,
        env=env,
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    "limit,file",
    [
        # limits between the files' sizes in such a run (measured: config.yaml 3.1 kB, train.log
        # under 2 kB by then, contact sheet 14 kB, report.html 440 kB (a failed report is only a
        # warning), checkpoint-1's optimizer.safetensors 270 kB)
        pytest.param(2_000, "config.yaml", marks=pytest.mark.slow),
        (6_000, "contact_sheet.png"),  # the default suite's case: 2 short subprocess runs
        pytest.param(200_000, "checkpoint-1", marks=pytest.mark.slow),
    ],
)
def test_a_full_disk_is_one_line_naming_the_file_and_the_run_resumes(tmp_path, limit, file):
    out = tmp_path / "run"
    result = train(out, limit)
    lines = [line for line in result.stderr.splitlines() if line.startswith(("genalign:", "hint:"))]
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[0].startswith("genalign: error: ") and file in lines[0] and "File too large" in lines[0], lines
    assert lines[1].startswith("hint: ") and "trainer.resume_from=auto" in lines[1], lines
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], "temp files left behind"

    resumed = train(out, None)  # space freed: the same command finishes the run
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (out / "checkpoint-final").is_dir()
    assert [line.split(",")[0] for line in (out / "metrics.csv").read_text().splitlines()[1:]] == ["1", "2"]


def test_csv_append_that_hits_a_full_disk_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    sink = CSVSink(tmp_path / "metrics.csv")
    sink.log(1, {"loss": 0.5})
    before = (tmp_path / "metrics.csv").read_bytes()

    real_open = open

    def full_disk_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        if "a" in mode:
            handle.write("2,0.2")  # part of the row reaches the file before the disk fills
            handle.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
        return handle

    monkeypatch.setattr("builtins.open", full_disk_open)
    with pytest.raises(WriteError, match="metrics.csv failed: No space left on device"):
        sink.log(2, {"loss": 0.25})
    monkeypatch.undo()
    assert (tmp_path / "metrics.csv").read_bytes() == before
