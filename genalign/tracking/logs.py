"""The text log: one format for the console and `<output_dir>/train.log`, and timed phases.

Where it fits: the CLI configures the console (`configure_console_logging`); the trainer on
rank 0 adds `RunLog(output_dir)` so the same lines land in the run directory (appended on
resume, so one file tells the whole story of the run) and wraps the long phases (model
load, evaluation, checkpoint save) in `timed_phase`, which logs their start and their
elapsed seconds.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"
RUN_LOG_NAME = "train.log"


def configure_console_logging() -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=DATE_FORMAT, stream=sys.stderr)


class RunLog:
    """A FileHandler on the root logger writing `<run_dir>/train.log` (append mode) in the
    console's format. genalign's own INFO lines always reach it, even when nobody configured
    the console (a library caller, a test). `close()` detaches it."""

    def __init__(self, run_dir: Path):
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(run_dir) / RUN_LOG_NAME
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
