"""Everything the report shows, read from a run directory (and nothing else).

Where it fits: `report.py` turns a `RunData` into HTML; `plots.py` draws its metric tables.
The run directory is the only input, so `genalign report RUN_DIR` works on a finished run, a
running one, or a copy on another machine. Every file is optional except that there must be
something to show: a directory with only `metrics.csv` gives a report of its curves.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml

from genalign.config.errors import UserError
from genalign.config.safe_yaml import safe_load_unique, yaml_error_line
from genalign.reporting.provenance import read_provenance

EVAL_SHEET = "contact_sheet.png"
PARITY_COLUMN = "parity_max_abs_log_prob_diff"


class ReportError(UserError, ValueError):
    """The directory cannot be reported on (missing, or holds no run)."""


@dataclass
class MetricTable:
    """A metrics CSV as columns: name -> (steps, values), rows with an empty cell skipped
    for that column (metrics that appear on some steps only, like `time_eval_s`)."""

    columns: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    steps: list[int] = field(default_factory=list)

    def has(self, name: str) -> bool:
        return bool(self.columns.get(name, ([], []))[0])

    def values(self, name: str) -> tuple[list[int], list[float]]:
        return self.columns.get(name, ([], []))

    def at(self, name: str, step: int) -> float | None:
        steps, values = self.values(name)
        return values[steps.index(step)] if step in steps else None

    def first(self, name: str) -> float | None:
        return self.values(name)[1][0] if self.has(name) else None

    def last(self, name: str) -> float | None:
        return self.values(name)[1][-1] if self.has(name) else None

    def components(self, prefix: str) -> list[str]:
        """Reward component names logged as `<prefix>_<name>_mean` (e.g. reward_ocr_mean)."""
        total = f"{prefix}_mean"
        return sorted(
            name[len(prefix) + 1 : -len("_mean")]
            for name in self.columns
            if name.startswith(prefix + "_") and name.endswith("_mean") and name != total
        )


def read_metric_table(path: Path) -> MetricTable:
    """Parse a CSV written by `CSVSink` ("step" first, numbers or empty cells); an absent
    file is an empty table. A malformed cell raises ReportError naming the file and line."""
    table = MetricTable()
    if not path.is_file():
        return table
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames and reader.fieldnames[0] != "step":
            raise ReportError(f"{path}: the first column is {reader.fieldnames[0]!r}, not 'step'")
        for line, row in enumerate(reader, start=2):
            try:
                step = int(row.pop("step"))
                cells = {name: float(text) for name, text in row.items() if name is not None and text}
            except (TypeError, ValueError) as exc:
                raise ReportError(f"{path}: line {line} is malformed ({exc})") from exc
            table.steps.append(step)
            for name, value in cells.items():
                steps, values = table.columns.setdefault(name, ([], []))
                steps.append(step)
                values.append(value)
    return table


@dataclass
class RunData:
    run_dir: Path
    train: MetricTable
    eval: MetricTable
    config: dict
    """The resolved config (config.yaml); {} when the directory has none."""
    config_text: str | None
    provenance: dict | None
    sheets: dict[int, Path]
    """Eval step -> its contact sheet, in step order."""
    finished: bool
    """checkpoint-final exists: the run reached trainer.num_steps."""
    updated_at: datetime | None
    """When metrics.csv / eval_metrics.csv last changed (UTC)."""

    def setting(self, dotted: str):
        """A config value by dotted key ("trainer.num_steps"); None when absent."""
        value = self.config
        for key in dotted.split("."):
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return value

    @property
    def last_step(self) -> int | None:
        return self.train.steps[-1] if self.train.steps else None

    @property
    def parity_gap(self) -> float | None:
        """The parity preflight's max |log_prob_replay - log_prob_rollout| (step 1's row)."""
        return self.train.first(PARITY_COLUMN)

    @property
    def diverged_steps(self) -> list[int]:
        """Eval steps where the reward-hacking monitor fired (gold_divergence = 1)."""
        steps, values = self.eval.values("gold_divergence")
        return [step for step, value in zip(steps, values) if value >= 0.5 and not math.isnan(value)]

    @property
    def recipe(self) -> str | None:
        """The --config the latest launch named (from provenance); None when it named none
        (the default recipe) or the run has no provenance."""
        if not self.provenance or not self.provenance["launches"]:
            return None
        words = self.provenance["launches"][-1].get("argv")
        words = [str(word) for word in words] if isinstance(words, list) else []
        for index, word in enumerate(words):
            if word == "--config" and index + 1 < len(words):
                return words[index + 1]
            if word.startswith("--config="):
                return word.split("=", 1)[1]
        return None


def eval_sheets(run_dir: Path) -> dict[int, Path]:
    sheets = {}
    for path in run_dir.glob(f"eval_epoch_*/{EVAL_SHEET}"):
        suffix = path.parent.name.rsplit("_", 1)[1]
        if suffix.isdigit():
            sheets[int(suffix)] = path
    return dict(sorted(sheets.items()))


def read_config(path: Path, text: str | None) -> dict:
    """The run's config.yaml as a dict (bounded YAML: a hostile file is refused in one line)."""
    if not text:
        return {}
    try:
        data = safe_load_unique(text)
    except yaml.YAMLError as exc:
        raise ReportError(f"{path} is not valid YAML ({yaml_error_line(exc)})") from None
    return data if isinstance(data, dict) else {}


def read_run(run_dir: str | Path) -> RunData:
    run_dir = Path(run_dir).expanduser()
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir} is not a directory; give a run directory (a trainer.output_dir)")
    metrics, eval_metrics, config = (run_dir / name for name in ("metrics.csv", "eval_metrics.csv", "config.yaml"))
    if not any(path.is_file() for path in (metrics, eval_metrics, config)):
        raise ReportError(
            f"{run_dir} holds no run (no metrics.csv, eval_metrics.csv or config.yaml); give the "
            "trainer.output_dir of a run"
        )
    config_text = config.read_text(encoding="utf-8") if config.is_file() else None
    written = [path.stat().st_mtime for path in (metrics, eval_metrics) if path.is_file()]
    return RunData(
        run_dir=run_dir,
        train=read_metric_table(metrics),
        eval=read_metric_table(eval_metrics),
        config=read_config(config, config_text),
        config_text=config_text,
        provenance=read_provenance(run_dir),
        sheets=eval_sheets(run_dir),
        finished=(run_dir / "checkpoint-final").is_dir(),
        updated_at=datetime.fromtimestamp(max(written), timezone.utc) if written else None,
    )
