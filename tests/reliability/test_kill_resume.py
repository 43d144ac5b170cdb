"""Kill -9 at 20 seeded points, resume with `trainer.resume_from=auto`, get the same run.

A small CPU run of the toy recipe (48 steps, a checkpoint every step, `trainer.keep_last=3`, so saves,
renames and prunes are frequent) is started in a subprocess and killed with SIGKILL, then
rerun with the same command, 20 times; then it is allowed to finish. The kill points are
drawn with a fixed seed from three kinds:
- "mid-checkpoint": poll for a `.checkpoint-*.tmp-PID` dir, freeze the process (SIGSTOP) the
  moment one appears, then SIGKILL — the temp dir is left behind half-written;
- "after a step": wait for a new metrics.csv row, then a random delay under a second;
- "any time": a random delay after launch (imports, model build, eval, a step, a save).
The result must equal an uninterrupted run's byte for byte: metrics.csv and eval_metrics.csv
rows (all but the wall-clock columns), the final checkpoint's safetensors files and its
trainer_state.json (all but the run's own tracker id).
Runtime: about 3-6 minutes on the shared 2-core box (`-m slow`).
"""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KILLS = 20
SEED = 9
NUM_STEPS = 48
MAX_ROWS_PER_LAUNCH = 2  # 20 launches x 2 rows < NUM_STEPS, whatever the machine speed
OVERRIDES = [
    f"trainer.num_steps={NUM_STEPS}",
    "trainer.save_every=1",
    "trainer.keep_last=3",
    "trainer.progress_bar=false",
    "trainer.resume_from=auto",
    "rollout.n=4",
    "rollout.rollout_batch_size=2",
    "rollout.sample_batch_size=8",
    "rollout.num_steps=4",
    "eval.every=16",
    "eval.max_prompts=2",
    "eval.samples_per_prompt=2",
    "eval.num_steps=4",
    "eval.batch_size=4",
]


def wall_clock(column: str) -> bool:
    """Columns that measure seconds, which no two runs share (time_*, *images_per_s)."""
    return column.startswith("time_") or column.endswith("images_per_s")


def launch(out: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
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
    ]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def trainer_state(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "trainer_state.json").read_text())


def metric_rows(path: Path) -> int:
    try:
        return max(path.read_text().count("\n") - 1, 0)
    except FileNotFoundError:
        return 0


def temp_dirs(out: Path) -> list[str]:
    try:
        return [name for name in os.listdir(out) if name.startswith(".checkpoint-") and ".tmp-" in name]
    except FileNotFoundError:
        return []


def kill_at_a_point(out: Path, kind: str, rng: random.Random) -> str:
    """Run once and SIGKILL it at a point of `kind`; what happened, for the failure message.

    However late the drawn point, a launch is killed once it has logged MAX_ROWS_PER_LAUNCH
    new metrics rows: how far a run gets in a given time depends on the machine, and 20
    launches must not be able to finish the run on a fast one (CI's did, at 8 s a launch).
    """
    stale = set(temp_dirs(out))  # left by an earlier kill; removed by this start
    rows_before = metric_rows(out / "metrics.csv")
    delay = rng.uniform(0.0, 8.0) if kind == "any time" else rng.uniform(0.0, 0.8)
    process = launch(out)
    began = time.monotonic()
    kill_at = began + delay if kind == "any time" else None
    while process.poll() is None:
        if kind == "mid-checkpoint":
            if set(temp_dirs(out)) - stale:
                process.send_signal(signal.SIGSTOP)  # freeze it inside the save, then kill
                caught = bool(set(temp_dirs(out)) - stale)
                process.kill()
                process.wait()
                return "killed mid-checkpoint" if caught else "killed just after a checkpoint"
            time.sleep(0.0005)
            continue
        rows = metric_rows(out / "metrics.csv")
        if kind == "after a step" and kill_at is None and rows > rows_before:
            kill_at = time.monotonic() + delay
        capped = rows >= rows_before + MAX_ROWS_PER_LAUNCH
        if capped or (kill_at is not None and time.monotonic() >= kill_at):
            process.kill()
            process.wait()
            why = " at the row cap" if capped else ""
            return f"killed {kind}{why} ({time.monotonic() - began:.1f}s after launch)"
        time.sleep(0.005)
    stderr = process.stderr.read()
    assert process.returncode == 0, f"run failed instead of being killed:\n{stderr[-3000:]}"
    return "finished before the kill"


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return [{k: v for k, v in row.items() if not wall_clock(k)} for row in csv.DictReader(handle)]


def finish(out: Path) -> None:
    process = launch(out)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]


def test_twenty_kills_resume_to_the_uninterrupted_run(tmp_path):
    reference, killed = tmp_path / "uninterrupted", tmp_path / "killed"
    finish(reference)
    rng = random.Random(SEED)
    kinds = ["mid-checkpoint"] * 8 + ["after a step"] * 6 + ["any time"] * 6
    rng.shuffle(kinds)
    history = [kill_at_a_point(killed, kind, rng) for kind in kinds]
    print("kill points:", history)
    assert history.count("killed mid-checkpoint") >= 1, history
    assert "finished before the kill" not in history, history  # all 20 kills landed inside the run
    finish(killed)

    assert not [p for p in killed.iterdir() if p.name.startswith(".")], "temp dirs left behind"
    for name in ("metrics.csv", "eval_metrics.csv"):
        expected, got = read_rows(reference / name), read_rows(killed / name)
        assert [r["step"] for r in got] == [r["step"] for r in expected], (name, history)
        assert got == expected, (name, history)
    assert len(read_rows(killed / "metrics.csv")) == NUM_STEPS
    for name in ("trainable.safetensors", "optimizer.safetensors", "optimizer.json"):
        expected = (reference / "checkpoint-final" / name).read_bytes()
        assert (killed / "checkpoint-final" / name).read_bytes() == expected, (name, history)
    # trainer_state.json matches too, except the tracker run id: it names *this* run (minted
    # at its first launch, carried through every resume), so two separate runs differ there.
    expected_state, got_state = (trainer_state(run / "checkpoint-final") for run in (reference, killed))
    assert got_state.pop("tracker_run_id") != expected_state.pop("tracker_run_id")
    assert got_state == expected_state, history
    ids = {trainer_state(c)["tracker_run_id"] for c in killed.glob("checkpoint-*")}
    assert len(ids) == 1, ids  # one run id across all 20 resumes
    numbered = sorted(p.name for p in killed.glob("checkpoint-*"))
    assert numbered == sorted(p.name for p in reference.glob("checkpoint-*")), numbered  # keep_last held
