"""SIGTERM and SIGINT stop a CPU run cleanly and it resumes to the uninterrupted result.

A small toy run (6 steps, no periodic checkpoint, so the checkpoint on the signal is the only
one) is started in a subprocess; once it has logged two metrics rows it gets the signal. It
must finish the step it is in, write `checkpoint-<step>`, log one line saying how to resume,
and exit 143 (SIGTERM) or 130 (SIGINT) without a traceback. Rerun with
`trainer.resume_from=auto` it must end with the uninterrupted run's metrics rows (all but the
wall-clock columns) and its final checkpoint's tensors, byte for byte. A second signal stops
at once without saving. About a minute on the shared 2-core box.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import rows_without_timing

ROOT = Path(__file__).resolve().parents[2]
NUM_STEPS = 6
OVERRIDES = [
    f"trainer.num_steps={NUM_STEPS}",
    "trainer.save_every=0",
    "trainer.progress_bar=false",
    "trainer.resume_from=auto",
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
WAIT_S = 300.0  # generous: the box is shared


def launch(out: Path, *extra: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    command = [
        sys.executable,
        "-m",
        "genalign",
        "train",
        "--config",
        "experiment/toy/shapes_grpo",
        f"trainer.output_dir={out}",
        *OVERRIDES,
        *extra,
    ]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for_rows(out: Path, process: subprocess.Popen, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(rows_without_timing(out / "metrics.csv")) < count:
        assert process.poll() is None, process.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "the run did not reach its rows in time"
        time.sleep(0.01)


def finish(out: Path) -> str:
    process = launch(out)
    _, stderr = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, stderr[-3000:]
    return stderr


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("signals") / "uninterrupted"
    finish(out)
    return out


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_saves_the_step_says_how_to_resume_and_resumes_to_the_same_run(signum, code, uninterrupted, tmp_path):
    out = tmp_path / "run"
    process = launch(out)
    wait_for_rows(out, process, 2)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=WAIT_S)
    assert process.returncode == code, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    done = len(rows_without_timing(out / "metrics.csv"))
    assert 2 <= done < NUM_STEPS, done
    lines = [line for line in stderr.splitlines() if f"stopped by {signal.Signals(signum).name}" in line]
    assert len(lines) == 1, stderr[-3000:]
    assert f"after step {done} of {NUM_STEPS}: checkpoint-{done} written" in lines[0], lines[0]
    assert "trainer.resume_from=auto" in lines[0] and f"step {done + 1}" in lines[0], lines[0]
    assert lines[0] in (out / "train.log").read_text()  # the log file has it too
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [f"checkpoint-{done}"]

    assert f"continuing from {out / f'checkpoint-{done}'}" in finish(out)
    assert rows_without_timing(out / "metrics.csv") == rows_without_timing(uninterrupted / "metrics.csv")
    for name in ("trainable.safetensors", "optimizer.safetensors", "optimizer.json"):
        assert (out / "checkpoint-final" / name).read_bytes() == (
            uninterrupted / "checkpoint-final" / name
        ).read_bytes(), name


def test_a_second_signal_stops_at_once_without_saving(tmp_path):
    out = tmp_path / "run"
    process = launch(out, "trainer.num_steps=40")
    wait_for_rows(out, process, 1)
    process.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=WAIT_S)
    assert process.returncode == 143, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if "by SIGTERM" in line and "trainer.resume_from=auto" in line]
    assert len(lines) == 1, stderr[-3000:]
    # the second signal lands in the step (abandoned) or, on a fast box, after its save
    assert "the step in progress was abandoned" in lines[0] or "written" in lines[0], lines[0]


def test_with_no_grace_left_the_step_is_not_saved_and_the_line_says_where_to_resume(tmp_path, caplog):
    """In-process: SIGTERM arrives while step 1's row is written; trainer.signal_grace_s=0
    leaves no time to save, so the run stops without a checkpoint and says so."""
    from genalign.preflight.load import load_config
    from genalign.runs.stopping import RunInterrupted
    from genalign.training.trainer import Trainer

    overrides = [o for o in OVERRIDES if not o.startswith("trainer.resume_from")]
    run = Trainer(
        load_config(
            "experiment/toy/shapes_grpo",
            [f"trainer.output_dir={tmp_path / 'run'}", *overrides, "trainer.signal_grace_s=0"],
        )
    )
    log_row = run.metrics.log

    def log_and_signal(step, row):
        log_row(step, row)
        os.kill(os.getpid(), signal.SIGTERM)

    run.metrics.log = log_and_signal
    caplog.set_level("INFO")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted) as info:
        run.train()
    assert info.value.exit_code == 143 and info.value.logged
    assert str(info.value).startswith(
        "stopped by SIGTERM after step 1 of 6: no checkpoint of it (an estimated 0 s "
        "save does not fit in the 0 s left of trainer.signal_grace_s=0)"
    )
    assert str(info.value).endswith(
        f"no checkpoint yet: to start the run again in {tmp_path / 'run'}, rerun the "
        "same command with trainer.resume_from=auto"
    )
    assert not list((tmp_path / "run").glob("checkpoint-*"))
    assert signal.getsignal(signal.SIGTERM) is before  # the watch restored what was there
