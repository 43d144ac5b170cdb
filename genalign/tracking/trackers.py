"""Experiment trackers: TensorBoard, Weights & Biases and MLflow, beside the CSV files.

Where it fits: `trainer.loggers` names them; rank 0 builds them (`training/setup.build_trackers`)
and the trainer's and evaluator's sinks forward every row to them under `train/` and `eval/`
(`PrefixedSink`), with the evaluation contact sheet as an image and, every
`trainer.sample_table.every` steps, a table of rollout samples (image, prompt, rewards). They are views: the CSV files
stay the run's record, and nothing a tracker does feeds back into training (no RNG, no state
in checkpoints except the W&B run id, so a resumed run continues the same W&B run).

Resume: TensorBoard is opened with `purge_step` = the first step being redone, so the events a
crashed run wrote past its checkpoint are hidden, as CSVSink cuts those rows. W&B is resumed
with `resume="allow"` on the same run id; W&B ignores rows for steps it has already seen (a
redone step keeps its first values there; metrics.csv has the exact ones). MLflow's run is
found again by the tag `genalign.run_id` (MLflow chooses its own run ids); a redone step's
metrics are logged again at the same step (MLflow keeps both; metrics.csv has the exact ones).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genalign.tracking.config import MlflowConfig, WandbConfig, resolve_mlflow, resolve_wandb, wandb_mode
from genalign.tracking.sinks import Sample, format_value

if TYPE_CHECKING:
    from PIL.Image import Image

EXTRA_HINT = "pip install 'genalign[trackers]'"
RUN_ID_TAG = "genalign.run_id"
"""The MLflow tag holding genalign's tracker run id (kept in checkpoints): how a resume finds its run."""

log = logging.getLogger(__name__)


def new_run_id() -> str:
    """A tracker run id (W&B's alphabet: lowercase letters and digits). From os.urandom, so it
    draws nothing from the random generators the run's reproducibility depends on."""
    return uuid.uuid4().hex[:12]


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """Each metric as a float, through the CSV's own conversion (same values, same type errors)."""
    return {key: float(format_value(key, value)) for key, value in metrics.items()}


def samples_markdown(samples: list[Sample]) -> str:
    """The table as Markdown (TensorBoard's text tab renders it): index, prompt, each reward."""
    names = list(samples[0].rewards) if samples else []
    lines = ["| # | prompt | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for index, sample in enumerate(samples):
        prompt = sample.prompt.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {index} | {prompt} | " + " | ".join(f"{sample.rewards[n]:.4f}" for n in names) + " |")
    return "\n".join(lines)


class TensorBoardSink:
    """Scalars and images in a TensorBoard event file under `log_dir` (torch's SummaryWriter)."""

    def __init__(self, log_dir: Path, purge_step: int | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # tensorboard is an optional dependency
            raise ImportError(
                f"trainer.loggers=tensorboard needs the tensorboard package: {EXTRA_HINT} (or pip install tensorboard)"
            ) from exc
        self.writer = SummaryWriter(str(log_dir), purge_step=purge_step)
        self.closed = False

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in _scalars(metrics).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_image(self, step: int, name: str, image: "Image") -> None:
        import numpy as np

        self.writer.add_image(name, np.asarray(image.convert("RGB")), step, dataformats="HWC")  # [H, W, 3] uint8
        self.writer.flush()

    def log_samples(self, step: int, name: str, samples: list[Sample]) -> None:
        """The images as one image summary (`name`/images, index order) and the prompts and
        rewards as a Markdown table in the text tab (`name`): TensorBoard has no tables."""
        import numpy as np

        images = np.stack([np.asarray(sample.image.convert("RGB")) for sample in samples])  # [N, H, W, 3] uint8
        self.writer.add_images(f"{name}/images", images, step, dataformats="NHWC")
        self.writer.add_text(name, samples_markdown(samples), step)
        self.writer.flush()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.writer.close()


class WandbSink:
    """One W&B run: every row with `run.log(..., step=step)`, the contact sheet as `wandb.Image`,
    sample tables as `wandb.Table`.

    Settings follow W&B's precedence (`resolve_wandb`: a config key, else its WANDB_* variable,
    else genalign's default; the mode, when neither names it, is `online` when logged in and
    `offline` otherwise: `wandb_mode`). The run's files go to `<run_dir>/wandb/` unless
    $WANDB_DIR names another folder; the resolved config is the W&B run config. Mode "offline"
    needs no network and no login. The run id is genalign's (kept in checkpoints, so a resume
    continues the run)."""

    def __init__(self, cfg: WandbConfig, run_dir: Path, run_id: str, config: dict[str, Any]):
        try:
            import wandb
        except ImportError as exc:  # wandb is an optional dependency
            raise ImportError(
                f"trainer.loggers=wandb needs the wandb package: {EXTRA_HINT} (or pip install wandb)"
            ) from exc
        self.wandb = wandb
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        settings = resolve_wandb(cfg, os.environ)
        settings["mode"], chosen = wandb_mode(settings, os.environ)
        if chosen:
            log.info("%s", chosen)
        self.settings = settings
        self.run = wandb.init(
            project=settings["project"],
            entity=settings["entity"],
            name=settings["name"] or run_dir.resolve().name,
            group=settings["group"],
            tags=settings["tags"],
            mode=settings["mode"],
            dir=os.environ.get("WANDB_DIR") or str(run_dir),
            config=config,
            id=run_id,
            resume="allow",
            reinit="create_new",
        )
        self.closed = False

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(_scalars(metrics), step=step)

    def log_image(self, step: int, name: str, image: "Image") -> None:
        self.run.log({name: self.wandb.Image(image)}, step=step)

    def log_samples(self, step: int, name: str, samples: list[Sample]) -> None:
        names = list(samples[0].rewards) if samples else []
        table = self.wandb.Table(columns=["image", "prompt", *names])
        for sample in samples:
            table.add_data(
                self.wandb.Image(sample.image, caption=sample.prompt),
                sample.prompt,
                *(sample.rewards[n] for n in names),
            )
        self.run.log({name: table}, step=step)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.run.finish()


class MlflowSink:
    """One MLflow run: every row with `log_metrics(..., step=step)` (MLflow's metric names
    allow `/`), the contact sheet and sample images with `log_image(key=..., step=...)`, each
    sample table as a JSON artifact; the resolved config as the run's `config.yaml` artifact
    and its top-level scalars as params would be hundreds of keys, so only the recipe, the
    algorithm and the model are params.

    Settings: `resolve_mlflow` (a config key, else MLflow's environment variable, else
    MLflow's default). The client is MLflow's module-level API on an explicit run object, so
    an MLflow run the caller has open is left alone."""

    def __init__(self, cfg: MlflowConfig, run_dir: Path, run_id: str, config: dict[str, Any]):
        try:
            import mlflow
            from mlflow.tracking import MlflowClient
        except ImportError as exc:  # mlflow is an optional dependency
            raise ImportError(
                "trainer.loggers=mlflow needs MLflow's client: pip install 'genalign[mlflow]' (or pip install mlflow)"
            ) from exc
        import yaml

        settings = resolve_mlflow(cfg, os.environ)
        self.settings = settings
        self.client = MlflowClient(tracking_uri=settings["tracking_uri"])
        experiment = self.client.get_experiment_by_name(settings["experiment_name"])
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(settings["experiment_name"])
        )
        found = self.client.search_runs(
            [experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'", max_results=1
        )
        if found:  # a resume: the same MLflow run, reopened
            self.run_id = found[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            tags = {**(settings["tags"] or {}), RUN_ID_TAG: run_id}
            name = settings["run_name"] or Path(run_dir).resolve().name
            self.run_id = self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
            self.client.log_text(self.run_id, yaml.safe_dump(config, sort_keys=False), "config.yaml")
            self.client.log_batch(
                self.run_id,
                params=[
                    mlflow.entities.Param(key, str(value))
                    for key, value in (
                        ("recipe", config.get("recipe")),
                        ("algorithm", config.get("algorithm", {}).get("name")),
                        ("model.family", config.get("model", {}).get("family")),
                        ("model.path", config.get("model", {}).get("path")),
                    )
                ],
            )
        self.mlflow = mlflow
        self.closed = False

    def log(self, step: int, metrics: dict[str, float]) -> None:
        import time

        now = int(time.time() * 1000)
        rows = [self.mlflow.entities.Metric(key, value, now, step) for key, value in _scalars(metrics).items()]
        for start in range(0, len(rows), 1000):  # MLflow's batch limit: 1000 metrics a call
            self.client.log_batch(self.run_id, metrics=rows[start : start + 1000])

    def log_image(self, step: int, name: str, image: "Image") -> None:
        self.client.log_image(self.run_id, image, key=name, step=step)

    def log_samples(self, step: int, name: str, samples: list[Sample]) -> None:
        """Each image under `name` at `step`, and the table (prompt, rewards) as
        `<name>/step_<step>.json`."""
        rows = []
        for index, sample in enumerate(samples):
            self.client.log_image(self.run_id, sample.image, key=f"{name}/{index}", step=step)
            rows.append({"index": index, "prompt": sample.prompt, **sample.rewards})
        self.client.log_text(self.run_id, json.dumps(rows, indent=1), f"{name}/step_{step}.json")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.client.set_terminated(self.run_id)
