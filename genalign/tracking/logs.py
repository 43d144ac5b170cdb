"""The text log: one format for the console and `<output_dir>/train.log`, and timed phases.

Where it fits: the CLI configures the console (`configure_console_logging`); the trainer on
rank 0 adds `RunLog(output_dir)` so the same lines land in the run directory (appended on
resume, so one file tells the whole story of the run), wraps the long phases (model
load, evaluation, checkpoint save) in `timed_phase`, which logs their start and their
elapsed seconds, and prints each step's headline numbers (`console_summary`).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from genalign.config.errors import refuse_symlink
from genalign.tracking.console import quiet_libraries

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"
RUN_LOG_NAME = "train.log"


def configure_console_logging() -> None:
    """genalign's INFO lines on stderr (a no-op where logging is already set up), and the
    libraries' known chatter and loading bars quietened (`console.py`)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=DATE_FORMAT, stream=sys.stderr)
    quiet_libraries()


class RunLog:
    """A FileHandler on the root logger writing `<run_dir>/train.log` (append mode) in the
    console's format. genalign's own INFO lines always reach it, even when nobody configured
    the console (a library caller, a test). `close()` detaches it."""

    def __init__(self, run_dir: Path):
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(run_dir) / RUN_LOG_NAME
        refuse_symlink(self.path)  # appending through a planted link would write to another file
        self.handler = logging.FileHandler(self.path, mode="a", encoding="utf-8")
        self.handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt=DATE_FORMAT))
        self.handler.setLevel(logging.INFO)
        package = logging.getLogger("genalign")
        if package.getEffectiveLevel() > logging.INFO:
            package.setLevel(logging.INFO)
        logging.getLogger().addHandler(self.handler)

    def close(self) -> None:
        logging.getLogger().removeHandler(self.handler)
        self.handler.close()


@contextmanager
def timed_phase(logger: logging.Logger, what: str) -> Iterator[None]:
    """Log "`what` ..." now and "`what`: done in S s" when the block ends (not on an exception:
    the traceback says what happened)."""
    logger.info("%s ...", what)
    start = time.perf_counter()
    yield
    logger.info("%s: done in %.1f s", what, time.perf_counter() - start)


def format_duration(seconds: float) -> str:
    """A short human duration: "42s", "3m05s", "1h02m" ("?" for a non-finite value)."""
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return "?"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


class StepClock:
    """Progress of a run for its log lines: "step 12/60, 0.41 steps/s, ETA 1m57s".

    The rate is the steps this process has finished over the wall time since it started the
    loop (evaluations and checkpoint saves included, so the ETA is when the run will end); a
    resumed run counts from its first redone step. `clock` is injectable for tests."""

    def __init__(self, first_step: int, last_step: int, clock=time.perf_counter):
        self.first_step, self.last_step, self.clock = first_step, last_step, clock
        self.started = clock()

    def rate(self, step: int) -> float:
        """Steps per second over the steps first_step..step finished so far."""
        elapsed = self.clock() - self.started
        done = step - self.first_step + 1
        return done / elapsed if elapsed > 0 else float("nan")

    def describe(self, step: int) -> str:
        rate = self.rate(step)
        remaining = (self.last_step - step) / rate if rate > 0 else float("nan")
        return f"step {step}/{self.last_step}, {rate:.3g} steps/s, ETA {format_duration(remaining)}"


CONSOLE_COLUMNS = (
    ("reward", "reward_mean", "%.4f"),
    ("loss", "loss", "%.3g"),
    ("clip", "clip_frac", "%.3f"),
    ("kl", "kl", "%.3g"),
)
"""The step line's fields: (label, metrics.csv column, format)."""


def console_summary(row: dict[str, float]) -> str:
    """The step's headline numbers, only those this algorithm produced: NFT and DPO have no
    clip fraction, offline DPO no reward, a run without a KL term no KL (a column the step did
    not write, or a NaN placeholder, is left out rather than printed as nan)."""
    parts = []
    for label, column, form in CONSOLE_COLUMNS:
        value = row.get(column)
        if value is not None and not math.isnan(float(value)):
            parts.append(f"{label} {form % value}")
    return "  ".join(parts)
