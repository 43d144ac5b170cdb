"""Metric sinks: where a step's metrics row goes (CSV, several, nowhere; trackers in trackers.py).

Where it fits: the trainer logs one row per step (`metrics.csv`) and the evaluator one row
per evaluation (`eval_metrics.csv`) through `sink.log(step, metrics)`. `NullSink` lets the
loop log unconditionally (non-zero ranks, tracking off) instead of branching on "is logging
on". The CSV file is the run's source of truth: it is flushed every row, and on resume it is
cut back to the restored step so that a resumed run's file equals an uninterrupted run's,
value for value (floats are written with `repr`, which round-trips exactly). Images (the
evaluation contact sheet) go through `log_image` and tables of rollout samples (`Sample`:
image, prompt, reward per component) through `log_samples`: trackers show them, the CSV
ignores them (the sheet is already a PNG in the run directory).
"""

from __future__ import annotations

import csv
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from genalign.config.errors import UserError, WriteError, disk_full_is_user_error

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass
class Sample:
    """One row of a sample table: a generated image (a video's first frame), its prompt and
    its rewards (each component's raw score, then the weighted "total")."""

    image: "Image"
    prompt: str
    rewards: dict[str, float]


class MetricsSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def log_image(self, step: int, name: str, image: "Image") -> None: ...

    def log_samples(self, step: int, name: str, samples: list[Sample]) -> None: ...

    def close(self) -> None: ...


class NullSink:
    """Accepts and drops every row."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def log_image(self, step: int, name: str, image: "Image") -> None:
        pass

    def log_samples(self, step: int, name: str, samples: list[Sample]) -> None:
        pass

    def close(self) -> None:
        pass


class MultiSink:
    """Forwards every row to each of `sinks`, in order."""

    def __init__(self, sinks: list[MetricsSink]):
        self.sinks = list(sinks)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.log(step, metrics)

    def log_image(self, step: int, name: str, image: "Image") -> None:
        for sink in self.sinks:
            sink.log_image(step, name, image)

    def log_samples(self, step: int, name: str, samples: list[Sample]) -> None:
        for sink in self.sinks:
            sink.log_samples(step, name, samples)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


class PrefixedSink:
    """Forwards to `sink` with every name under `prefix/` (train/..., eval/...), so one tracker
    run holds the training and the evaluation rows side by side. Closing it closes `sink`;
    trackers make `close` idempotent because two prefixes share one."""

    def __init__(self, sink: MetricsSink, prefix: str):
        self.sink, self.prefix = sink, prefix

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.sink.log(step, {f"{self.prefix}/{key}": value for key, value in metrics.items()})

    def log_image(self, step: int, name: str, image: "Image") -> None:
        self.sink.log_image(step, f"{self.prefix}/{name}", image)

    def log_samples(self, step: int, name: str, samples: list[Sample]) -> None:
        self.sink.log_samples(step, f"{self.prefix}/{name}", samples)

    def close(self) -> None:
        self.sink.close()


def format_value(key: str, value: Any) -> str:
    """The CSV text of one metric: integers as digits, floats by `repr` of the Python float
    (exact round trip; numpy/torch scalars are converted first, so `np.float64(0.5)` is
    "0.5", not "np.float64(0.5)"). Anything else is a `TypeError` naming the metric."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(f"metric {key!r} is a tensor of shape {tuple(value.shape)}; log a scalar (.mean())")
        value = value.item()
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))
    raise TypeError(f"metric {key!r} has type {type(value).__name__}; metrics must be numbers")


def column_order(keys: set[str]) -> list[str]:
    """ "step" first, then the metric names alphabetically."""
    return ["step", *sorted(keys - {"step"})]


class MetricsFileError(UserError, ValueError):
    """A metrics CSV in the run directory that genalign did not write (or that was edited):
    refused in one line naming the file, never appended to."""


class CSVSink:
    """One CSV row per `log` call: "step", then the metric columns in alphabetical order.

    Columns are fixed by the first row; a later row with a new metric rewrites the file with
    the widened header (rare: metrics that appear mid-run), and a row without some metric
    leaves that cell empty. Every row is written and closed before `log` returns, so a
    crash loses nothing. `resume=True` keeps an existing file and, at the first `log`,
    drops its rows with step >= that step (they belong to the part of the run being
    redone); `resume=False` starts a new file.
    """

    def __init__(self, path: Path, resume: bool = False):
        self.path = Path(path)
        self.rows: list[dict[str, str]] = []
        self.columns: list[str] = []
        self._truncate_on_first_log = resume
        if resume and self.path.exists():
            self.rows = self._read_existing()

    def _read_existing(self) -> list[dict[str, str]]:
        try:
            with open(self.path, newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                header = list(reader.fieldnames or [])
                rows = list(reader)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise MetricsFileError(
                f"cannot resume metrics file {self.path}: it is not a CSV genalign wrote "
                f"({str(exc).splitlines()[0]}); move the file away or start a fresh run"
            ) from None
        if header and header[0] != "step":
            raise MetricsFileError(
                f"cannot resume metrics file {self.path}: its first column is {header[0]!r}, "
                "not 'step'; move the file away or start a fresh run"
            )
        for number, row in enumerate(rows, start=2):
            if not (row.get("step") or "").lstrip("-").isdigit() or None in row:
                raise MetricsFileError(
                    f"cannot resume metrics file {self.path}: line {number} is malformed; "
                    "move the file away or fix that line"
                )
        return [{key: value for key, value in row.items() if value != ""} for row in rows]

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if "step" in metrics:
            raise ValueError("a metric may not be named 'step' (the CSV's first column is the step)")
        row = {"step": str(int(step)), **{key: format_value(key, value) for key, value in metrics.items()}}
        if self._truncate_on_first_log:
            self._truncate_on_first_log = False
            self.rows = [kept for kept in self.rows if int(kept["step"]) < step]
            self.columns = column_order({key for kept in self.rows for key in kept}) if self.rows else []
            self.rows.append(row)
            self._rewrite(column_order(set(self.columns) | set(row)))
            return
        self.rows.append(row)
        if not self.columns or not set(row) <= set(self.columns):
            self._rewrite(column_order(set(self.columns) | set(row)))
            return
        size = self.path.stat().st_size
        try:
            with disk_full_is_user_error(self.path), open(self.path, "a", newline="") as handle:
                csv.DictWriter(handle, fieldnames=self.columns, restval="").writerow(row)
        except WriteError:
            os.truncate(self.path, size)  # a half-written row would make the file unresumable
            raise

    def _rewrite(self, columns: list[str]) -> None:
        """Write header + all rows to a temporary file and move it over the old one, so a
        crash mid-rewrite leaves the previous complete file."""
        self.columns = columns
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.unlink(missing_ok=True)  # a link planted under our temporary's name is removed, never followed
        try:
            with disk_full_is_user_error(self.path), open(temporary, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=self.columns, restval="")
                writer.writeheader()
                writer.writerows(self.rows)
        except WriteError:
            temporary.unlink(missing_ok=True)  # the previous complete file stays
            raise
        temporary.replace(self.path)

    def log_image(self, step: int, name: str, image: "Image") -> None:
        """Nothing: a CSV holds numbers (the evaluator writes the image as a PNG itself)."""

    def log_samples(self, step: int, name: str, samples: list[Sample]) -> None:
        """Nothing: a CSV holds numbers (the step's reward statistics are in its row)."""

    def close(self) -> None:
        """Nothing to do: every row is already on disk."""
