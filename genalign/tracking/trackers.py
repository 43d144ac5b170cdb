"""Experiment trackers: TensorBoard and Weights & Biases, beside the CSV files.

Where it fits: `trainer.loggers` names them; rank 0 builds them (`training/setup.build_trackers`)
and the trainer's and evaluator's sinks forward every row to them under `train/` and `eval/`
(`PrefixedSink`), with the evaluation contact sheet as an image and, every
`trainer.sample_table.every` steps, a table of rollout samples (image, prompt, rewards). They are views: the CSV files
stay the run's record, and nothing a tracker does feeds back into training (no RNG, no state
in checkpoints except the W&B run id, so a resumed run continues the same W&B run).

Resume: TensorBoard is opened with `purge_step` = the first step being redone, so the events a
crashed run wrote past its checkpoint are hidden, as CSVSink cuts those rows. W&B is resumed
with `resume="allow"` on the same run id; W&B ignores rows for steps it has already seen (a
redone step keeps its first values there; metrics.csv has the exact ones).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genalign.tracking.config import WandbConfig, resolve_wandb
from genalign.tracking.sinks import Sample, format_value

if TYPE_CHECKING:
    from PIL.Image import Image

EXTRA_HINT = "pip install 'genalign[trackers]'"


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
            raise ImportError(f"trainer.loggers=tensorboard needs the tensorboard package: {EXTRA_HINT} "
                              "(or pip install tensorboard)") from exc
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
    else genalign's default). The run's files go to `<run_dir>/wandb/` unless $WANDB_DIR names
    another folder; the resolved config is the W&B run config. Mode "offline" needs no network
    and no login. The run id is genalign's (kept in checkpoints, so a resume continues the run)."""

    def __init__(self, cfg: WandbConfig, run_dir: Path, run_id: str, config: dict[str, Any]):
        try:
            import wandb
        except ImportError as exc:  # wandb is an optional dependency
            raise ImportError(f"trainer.loggers=wandb needs the wandb package: {EXTRA_HINT} "
                              "(or pip install wandb)") from exc
        self.wandb = wandb
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        settings = resolve_wandb(cfg, os.environ)
        self.settings = settings
        self.run = wandb.init(project=settings["project"], entity=settings["entity"],
                              name=settings["name"] or run_dir.resolve().name, group=settings["group"],
                              tags=settings["tags"], mode=settings["mode"],
                              dir=os.environ.get("WANDB_DIR") or str(run_dir), config=config, id=run_id,
                              resume="allow", reinit="create_new")
        self.closed = False

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(_scalars(metrics), step=step)

    def log_image(self, step: int, name: str, image: "Image") -> None:
        self.run.log({name: self.wandb.Image(image)}, step=step)

    def log_samples(self, step: int, name: str, samples: list[Sample]) -> None:
        names = list(samples[0].rewards) if samples else []
        table = self.wandb.Table(columns=["image", "prompt", *names])
        for sample in samples:
            table.add_data(self.wandb.Image(sample.image, caption=sample.prompt), sample.prompt,
                           *(sample.rewards[n] for n in names))
        self.run.log({name: table}, step=step)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.run.finish()
