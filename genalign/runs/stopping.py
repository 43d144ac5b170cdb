"""When a run stops before trainer.num_steps: a signal, or steps that train nothing.

Where it fits: `Trainer.train` watches SIGTERM (what schedulers and Kubernetes send before a
kill) and SIGINT (Ctrl-C) while the steps run, and asks `StopCheck.after_step` at the end of
each step whether to stop. Kept apart from the update and the distributed helpers so the
signal handling is one small module.

- A first signal is recorded, not acted on at once: the step in progress finishes, a
  checkpoint of it is written when the estimated save fits in what is left of
  `trainer.signal_grace_s` (counted from the signal), one line says where and how to resume,
  and the process exits 128 + the signal number (143 for SIGTERM, 130 for SIGINT).
- A second signal abandons the step at once (`RunInterrupted` raised in the main thread);
  the newest checkpoint on disk is intact (checkpoints are written atomically).
- Under torchrun every rank calls `after_step` every step, whatever it received: one
  all-reduce makes a signal seen by any rank a stop for all, so no rank is left waiting in a
  collective for a rank that left. The all-reduce is handed in (`MaxOverRanks`, the trainer
  passes `training/distributed.py:max_over_ranks`): this module touches no process group.
- `trainer.max_idle_steps` steps in a row that train nothing (every sample's advantage zero,
  no optimizer step, or a non-finite loss; decided over all ranks) stop the run with the
  reason: NaN weights give NaN images, equal rewards and zero advantages, so the loss
  check alone never fires.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

from genalign.config.errors import UserError

log = logging.getLogger(__name__)

WATCHED = (signal.SIGTERM, signal.SIGINT)
SAVE_BYTES_PER_S = 100e6
"""A conservative write speed for estimating a first save's duration (measured saves replace it)."""

MaxOverRanks = Callable[[list[float]], list[float]]
"""The element-wise maximum of each rank's values over every rank: a collective under torchrun
(`training/distributed.py:max_over_ranks`), the values themselves on one process (`one_process`)."""


def one_process(values: list[float]) -> list[float]:
    """`MaxOverRanks` of a job of one process."""
    return values


class RunInterrupted(BaseException):
    """The run stopped on a signal. A BaseException, like KeyboardInterrupt, so no `except
    Exception` on the way up swallows it; the CLI turns it into exit code 128 + signum."""

    def __init__(self, signum: int, message: str = "", logged: bool = False):
        super().__init__(message or f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.logged = logged
        """True once the run's log has the line saying how to resume (the CLI adds nothing)."""

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def log_once(self, logger: logging.Logger, where: str, is_main: bool) -> None:
        """Say once per job (rank 0) that the run stopped, `where` ("during step 3; resume
        with ..."), unless the line that stopped it already did."""
        if not self.logged and is_main:
            logger.warning("%s %s", self, where)
        self.logged = True


class TrainingStalled(UserError, RuntimeError):
    """trainer.max_idle_steps steps in a row trained nothing."""


class SignalWatch:
    """Handlers for SIGTERM/SIGINT for the duration of a `with` block (main thread only;
    elsewhere the process keeps its handlers). `defer=True` records the first signal for the
    loop to act on; a second one, or any signal when `defer=False`, raises `RunInterrupted`."""

    def __init__(self, defer: bool = True):
        self.defer = defer
        self.received: int | None = None
        self.received_at: float | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "SignalWatch":
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._handle) for signum in WATCHED}
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.defer and self.received is None:
            self.received, self.received_at = signum, time.monotonic()
            log.warning(
                "%s received: finishing the current step, then saving and stopping (send it again to stop "
                "at once without saving this step)",
                name,
            )
            return
        raise RunInterrupted(signum, f"interrupted by {name}: the step in progress was abandoned")

    def seconds_since_signal(self) -> float:
        return 0.0 if self.received_at is None else time.monotonic() - self.received_at


def trained_nothing(row: dict[str, float]) -> str | None:
    """Why this step's update trained nothing, or None when it trained."""
    loss = row.get("loss")
    if loss is not None and not math.isfinite(loss):
        return f"the loss was {loss}"
    if row.get("trained_fraction", 1.0) == 0.0:
        return "every sample's advantage was zero (each group's rewards were all equal)"
    if row.get("optimizer_steps", 1.0) == 0.0:
        return "no optimizer step was taken"
    return None


@dataclass
class Verdict:
    signum: int | None = None
    """The signal to stop on (any rank's), else None."""
    stalled: str | None = None
    """Why trainer.max_idle_steps steps in a row trained nothing, else None."""


class StopCheck:
    """The per-step decision to go on, shared by every rank."""

    def __init__(self, watch: SignalWatch, max_idle_steps: int | None, max_over_ranks: MaxOverRanks = one_process):
        self.watch, self.max_idle_steps, self.max_over_ranks = watch, max_idle_steps, max_over_ranks
        self.idle_since: int | None = None
        self.idle_reason = ""

    def after_step(self, step: int, row: dict[str, float]) -> Verdict:
        """Collective under torchrun: every rank calls it once per step."""
        reason = trained_nothing(row)
        signum, idle = agree(self.watch.received or 0, reason is not None, self.max_over_ranks)
        if signum:
            self.watch.received = self.watch.received or signum  # a rank that saw nothing stops too
            self.watch.received_at = self.watch.received_at or time.monotonic()
        if not idle:
            self.idle_since = None
        elif self.idle_since is None:
            self.idle_since, self.idle_reason = step, reason or "another rank trained nothing"
        stalled = None
        if self.max_idle_steps and self.idle_since is not None and step - self.idle_since + 1 >= self.max_idle_steps:
            stalled = (
                f"steps {self.idle_since}-{step} trained nothing ({self.idle_reason}); stopping after "
                f"trainer.max_idle_steps={self.max_idle_steps} such steps in a row: check the rewards "
                "(do they vary within a prompt's group?) and the weights (a NaN gives equal rewards)"
            )
        return Verdict(signum or None, stalled)

    def every_rank(self, flag: bool) -> bool:
        """`every_rank` over this job's ranks (collective under torchrun)."""
        return every_rank(flag, self.max_over_ranks)


def agree(signum: int, idle: bool, max_over_ranks: MaxOverRanks) -> tuple[int, bool]:
    """(the largest signal number any rank received, whether every rank was idle)."""
    most_signal, any_busy = max_over_ranks([float(signum), 0.0 if idle else 1.0])
    return int(most_signal), any_busy == 0.0


def every_rank(flag: bool, max_over_ranks: MaxOverRanks) -> bool:
    """True when `flag` holds on every rank (collective), so a collective that follows is
    entered by all ranks or by none."""
    return max_over_ranks([0.0 if flag else 1.0])[0] == 0.0


def estimated_save_s(measured: float | None, tensors_bytes: int) -> float:
    """The last measured save of this launch, else the bytes to write at a conservative speed."""
    return measured if measured is not None else tensors_bytes / SAVE_BYTES_PER_S
