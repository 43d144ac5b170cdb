"""`runs/stopping.py`: signals recorded then acted on, idle steps counted, ranks agreeing."""

from __future__ import annotations

import os
import signal
import socket
from functools import partial

import pytest
import torch
import torch.multiprocessing as mp

from genalign.runs.stopping import RunInterrupted, SignalWatch, StopCheck, agree, every_rank, trained_nothing
from genalign.training.distributed import RankInfo, max_over_ranks

TRAINED = {"loss": 0.1, "trained_fraction": 0.5, "optimizer_steps": 2.0}


def test_trained_nothing_names_why():
    assert trained_nothing(TRAINED) is None
    assert "advantage was zero" in trained_nothing({**TRAINED, "trained_fraction": 0.0})
    assert "no optimizer step" in trained_nothing({**TRAINED, "optimizer_steps": 0.0})
    assert "loss was nan" in trained_nothing({**TRAINED, "loss": float("nan")})


def test_idle_steps_in_a_row_stop_the_run_and_a_trained_step_resets_the_count():
    check = StopCheck(SignalWatch(), max_idle_steps=3)
    idle = {**TRAINED, "trained_fraction": 0.0}
    assert check.after_step(1, idle).stalled is None
    assert check.after_step(2, idle).stalled is None
    assert check.after_step(3, TRAINED).stalled is None  # the count starts again
    assert check.after_step(4, idle).stalled is None and check.after_step(5, idle).stalled is None
    stalled = check.after_step(6, idle).stalled
    assert stalled.startswith("steps 4-6 trained nothing (every sample's advantage was zero")
    assert "trainer.max_idle_steps=3" in stalled
    never = StopCheck(SignalWatch(), max_idle_steps=None)
    assert all(never.after_step(step, idle).stalled is None for step in range(1, 50))


def test_the_first_signal_is_recorded_the_second_interrupts_and_handlers_are_restored():
    before = signal.getsignal(signal.SIGTERM)
    with SignalWatch() as watch:
        os.kill(os.getpid(), signal.SIGTERM)
        assert watch.received == signal.SIGTERM and watch.seconds_since_signal() >= 0
        assert StopCheck(watch, None).after_step(1, TRAINED).signum == signal.SIGTERM
        with pytest.raises(RunInterrupted) as info:
            os.kill(os.getpid(), signal.SIGINT)
        assert info.value.exit_code == 130 and "abandoned" in str(info.value)
    assert signal.getsignal(signal.SIGTERM) is before
    with SignalWatch(defer=False), pytest.raises(RunInterrupted) as info:  # while a run is built: at once
        os.kill(os.getpid(), signal.SIGTERM)
    assert info.value.exit_code == 143


def _rank(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        # only rank 1 received SIGTERM; only rank 0 trained nothing; both may save only if both can
        ranks = partial(max_over_ranks, info=RankInfo(rank, 2, rank))
        results[rank] = (
            agree(signal.SIGTERM if rank == 1 else 0, rank == 0, ranks),
            agree(0, True, ranks),
            every_rank(rank == 0, ranks),
            every_rank(True, ranks),
        )
    finally:
        torch.distributed.destroy_process_group()


def test_every_rank_reaches_the_same_decision():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_rank, args=(port, results), nprocs=2, join=True)
    expected = ((int(signal.SIGTERM), False), (0, True), False, True)
    assert results[0] == results[1] == expected
