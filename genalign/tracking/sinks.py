"""Metric sinks: where a step's metrics row goes (CSV, TensorBoard, nowhere).

Where it fits: the trainer and the evaluator call `sink.log(step, metrics)`; a `NullSink`
lets the loop log unconditionally (non-zero ranks, disabled tracking).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Protocol


class MetricsSink(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class NullSink:
    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def close(self) -> None:
        pass


class MultiSink:
    def __init__(self, sinks: list[MetricsSink]):
        self.sinks = sinks

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for sink in self.sinks:
            sink.log(step, metrics)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def _format(value) -> str:
    if isinstance(value, float):
        return repr(value)  # round-trips exactly, so resumed rows compare bitwise
    return str(value)


class CSVSink:
    """One row per `log` call, `step` first then columns in sorted order; every row is
    flushed (a crash loses nothing). A row with a new key rewrites the file with the widened
    header. `resume=True` keeps an existing file but drops rows at or after the first step
    logged now, so a resumed run's file equals an uninterrupted run's."""

    def __init__(self, path: Path, resume: bool = False):
        self.path = Path(path)
        self.rows: list[dict[str, str]] = []
        self.columns: list[str] = ["step"]
        self._pending_truncate = resume
        if resume and self.path.exists():
            with open(self.path, newline="") as handle:
                reader = csv.DictReader(handle)
                self.columns = list(reader.fieldnames or ["step"])
                self.rows = list(reader)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if self._pending_truncate:
            self.rows = [row for row in self.rows if int(row["step"]) < step]
            self._pending_truncate = False
            self._rewrite()
        row = {"step": str(step), **{key: _format(value) for key, value in metrics.items()}}
        new_columns = sorted(set(row) - set(self.columns))
        self.rows.append(row)
        if new_columns or not self.path.exists():
            self.columns = ["step", *sorted((set(self.columns) | set(new_columns)) - {"step"})]
            self._rewrite()
        else:
            with open(self.path, "a", newline="") as handle:
                csv.DictWriter(handle, fieldnames=self.columns, restval="").writerow(row)

    def _rewrite(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_suffix(".csv.tmp")
        with open(temp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.columns, restval="")
            writer.writeheader()
            writer.writerows(self.rows)
        temp.replace(self.path)

    def close(self) -> None:
        pass


class TensorBoardSink:
    def __init__(self, log_dir: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # tensorboard is optional
            raise ImportError("TensorBoard logging needs `pip install tensorboard`") from exc
        self.writer = SummaryWriter(str(log_dir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()
