"""SIGTERM to one torchrun rank: every rank stops after the same step, rank 0 saves it, and a
resume ends where an uninterrupted 2-rank run ends (toy recipe, DDP on gloo, CPU).

The signal goes to rank 1 alone (not to torchrun, which would forward it to both): the ranks
agree through the per-step all-reduce `runs/stopping.py` is handed
(`training/distributed.py:max_over_ranks`). Then a preemption as a scheduler sends it, to
torchrun itself (and to `genalign train --nproc-per-node`): one resume line, whose command
finishes the run. Five torchrun launches and one genalign launch, about 6
minutes on the shared 2-core box, hence `slow`; the agreement itself is also unit-tested with
two gloo ranks in tests/unit/runs/test_stopping.py.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from safetensors.torch import load_file
from support import rows_without_timing

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 600.0
ENV = {
    **os.environ,
    "GLOO_SOCKET_IFNAME": "lo",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "MASTER_ADDR": "127.0.0.1",
}


RUN_ARGS = [
    "--config",
    "experiment/toy/shapes_grpo",
    "/base/distributed=local",
    "distributed.training.strategy=ddp",
    "distributed.training.backend=gloo",
    "model.device=cpu",
    "trainer.num_steps=6",
    "trainer.save_every=0",
    "trainer.progress_bar=false",
    "trainer.resume_from=auto",
    "rollout.n=4",
    "rollout.rollout_batch_size=2",
    "rollout.sample_batch_size=4",
    "rollout.num_steps=4",
    "eval.every=0",
    "eval.at_start=false",
    "actor.gradient_accumulation_steps=2",
]


def launch(out: Path, launcher: str = "torchrun") -> subprocess.Popen:
    """Two DDP ranks on gloo under a bare torchrun, or under `genalign train --nproc-per-node`."""
    # --standalone: torchrun's agent binds a free port itself (a port picked here could be taken
    # by another job before torchrun binds it)
    start = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "genalign.train"]
        if launcher == "torchrun"
        else [sys.executable, "-m", "genalign", "train", "--nproc-per-node=2"]
    )
    return subprocess.Popen(
        [*start, *RUN_ARGS, f"trainer.output_dir={out}"],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(out: Path) -> None:
    process = launch(out)
    _, stderr = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, stderr[-4000:]


def wait_for_rows(out: Path, process: subprocess.Popen, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(rows_without_timing(out / "metrics.csv")) < count:
        assert process.poll() is None, process.stderr.read()[-4000:]
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_sigterm_to_one_rank_stops_every_rank_after_the_same_step_and_resumes(tmp_path):
    reference, out = tmp_path / "uninterrupted", tmp_path / "run"
    finish(reference)
    process = launch(out)
    wait_for_rows(out, process, 2)
    ranks = [
        child
        for child in psutil.Process(process.pid).children(recursive=True)
        if "genalign.train" in " ".join(child.cmdline())
    ]
    assert len(ranks) == 2
    os.kill(ranks[1].pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=WAIT_S)
    done = len(rows_without_timing(out / "metrics.csv"))
    stopped = [line for line in stderr.splitlines() if "stopped by SIGTERM" in line]
    assert len(stopped) == 1, stderr[-4000:]  # both ranks stop after the same step; rank 0 says so
    assert f"after step {done} of 6: checkpoint-{done} written" in stopped[0], stopped
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [f"checkpoint-{done}"]
    finish(out)
    assert rows_without_timing(out / "metrics.csv") == rows_without_timing(reference / "metrics.csv")
    expected, got = (load_file(str(run / "checkpoint-final" / "trainable.safetensors")) for run in (reference, out))
    assert all((expected[name] == got[name]).all() for name in expected)


def test_sigterm_to_torchrun_gives_one_resume_line_whose_command_finishes_the_run(tmp_path):
    """A preempted bare torchrun job: SIGTERM to torchrun, which passes it on to both ranks.
    Rank 0 alone says how to resume, with a torchrun command (the ranks were not started by
    `genalign train`); that command, run as printed, continues to the end."""
    out = tmp_path / "run"
    process = launch(out)
    wait_for_rows(out, process, 2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=WAIT_S)
    done = len(rows_without_timing(out / "metrics.csv"))
    stopped = [line for line in stderr.splitlines() if "stopped by SIGTERM" in line]
    assert len(stopped) == 1, stderr[-4000:]
    assert (
        f"after step {done} of 6: checkpoint-{done} written; to resume, run `torchrun --standalone "
        "--nproc-per-node=2 -m genalign.train --config experiment/toy/shapes_grpo "
    ) in stopped[0], stopped
    assert stopped[0].endswith(
        f" trainer.resume_from=auto` (it continues from {out / f'checkpoint-{done}'} at step {done + 1})"
    ), stopped
    command = shlex.split(stopped[0].split("`")[1])
    resumed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *command[1:]],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=WAIT_S,
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert f"continuing from {out / f'checkpoint-{done}'}" in resumed.stderr
    assert len(rows_without_timing(out / "metrics.csv")) == 6 and (out / "checkpoint-final").is_dir()


def test_sigterm_to_genalign_train_nproc_per_node_names_that_command_and_exits_143(tmp_path):
    """The same preemption of `genalign train --nproc-per-node=2`: torchrun's agent runs in
    the CLI process and passes the signal on; the ranks' one line names the genalign command,
    and the CLI exits 143 without a launcher traceback."""
    out = tmp_path / "run"
    process = launch(out, launcher="genalign")
    wait_for_rows(out, process, 2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=WAIT_S)
    assert process.returncode == 143 and "Traceback" not in stderr, stderr[-4000:]
    stopped = [line for line in stderr.splitlines() if "stopped by SIGTERM" in line]
    assert len(stopped) == 1, stderr[-4000:]
    assert "to resume, run `genalign train --nproc-per-node=2 --config experiment/toy/shapes_grpo " in stopped[0]
