"""Step lines' progress (step/total, steps/s, ETA) and the per-step peak GPU memory reader."""

import pytest

from genalign.tracking.logs import StepClock, format_duration
from genalign.training.memory import COLUMN, GIB, PeakMemory


@pytest.mark.parametrize(
    "seconds, text",
    [(0, "0s"), (42.4, "42s"), (185, "3m05s"), (3720, "1h02m"), (float("nan"), "?"), (float("inf"), "?")],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_step_clock_rate_and_eta_count_this_process_steps_only():
    now = [100.0]
    clock = StepClock(first_step=11, last_step=60, clock=lambda: now[0])  # a run resumed at step 11
    now[0] = 120.0  # steps 11..20 took 20 s: 0.5 steps/s, 40 steps left: 80 s
    assert clock.rate(20) == pytest.approx(0.5)
    assert clock.describe(20) == "step 20/60, 0.5 steps/s, ETA 1m20s"
    now[0] = 200.0
    assert clock.describe(60) == "step 60/60, 0.5 steps/s, ETA 0s"


def test_peak_memory_resets_before_and_reads_after_each_step():
    calls = []
    peaks = iter([3 * GIB, GIB // 2])
    memory = PeakMemory("cpu", read=lambda: calls.append("read") or next(peaks), reset=lambda: calls.append("reset"))
    memory.start()
    assert memory.metrics() == {COLUMN: 3.0}
    memory.start()
    assert memory.metrics() == {COLUMN: 0.5}
    assert calls == ["reset", "read", "reset", "read"]


def test_peak_memory_is_absent_on_the_cpu():
    memory = PeakMemory("cpu")
    memory.start()  # must not touch torch.cuda
    assert memory.metrics() == {}
