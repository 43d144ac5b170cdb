"""`TrainerConfig` and `ActorConfig`: the run and the optimizer rhythm."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, get_args

from genalign.config.checks import empty_path_problems, non_negative_problems, positive_problems
from genalign.tracking.config import Logger, MlflowConfig, SampleTableConfig, WandbConfig, logger_problems, with_csv

HubStrategy = Literal["every_save", "checkpoint", "all_checkpoints", "end"]
"""`TrainerConfig.hub_strategy`'s choices (export/hub_push.py)."""
HUB_STRATEGIES = get_args(HubStrategy)


@dataclass
class TrainerConfig:
    INPUT_FORMS = {"loggers": with_csv}
    """Keys whose written form the loader rewrites before the type check (`config/loader.py`)."""

    output_dir: str = "outputs/run"
    """The run directory: config.yaml, metrics.csv, train.log, checkpoints, evaluations, report.html."""
    seed: int = 42
    """One seed for the run: prompt order, per-sample noise = f(seed, step, index)."""
    num_steps: int = 1000
    """Training steps (rollout rounds, "epochs" in Flow-GRPO vocabulary)."""
    save_every: int = 60
    """Write checkpoint-<step> every this many steps (0: only checkpoint-final)."""
    resume_from: str | None = None
    """A checkpoint directory to continue from (must match this config's training keys), or
    "auto": the newest complete checkpoint in output_dir (a fresh start when there is none), or
    a checkpoint in a Hub model repository, hf://<owner>/<name>/<checkpoint folder>[@revision]
    (e.g. hf://me/sd35-ocr/last-checkpoint, as trainer.hub_strategy=checkpoint uploads it),
    downloaded into the Hugging Face cache first. Unset: a fresh run, which refuses an
    output_dir that already holds a run."""
    overwrite: bool = False
    """Let a fresh run replace the run already in output_dir (its metrics, checkpoints and
    eval_epoch_* are removed first), or a resume discard the newer checkpoints it would redo."""
    push_to_hub: str | None = None
    """A Hub model repository (<owner>/<name>, created when missing) that each saved checkpoint
    is uploaded to from a background thread, as trainer.hub_strategy says; a failed upload is
    a warning, never the end of the run. Your huggingface_hub login or $HF_TOKEN. null: no upload."""
    hub_strategy: HubStrategy = "every_save"
    """What trainer.push_to_hub uploads (transformers' hub_strategy): "every_save" the export
    folder (lora/ or transformer/, with its card) at the repository's root after each save;
    "checkpoint" that and the latest whole checkpoint in last-checkpoint/ (resumable with
    trainer.resume_from=hf://<repo>/last-checkpoint); "all_checkpoints" that with each
    checkpoint in its own checkpoint-<step>/; "end" the final export only."""
    hub_private: bool = False
    """Create the trainer.push_to_hub repository private (when it does not exist yet)."""
    keep_last: int | None = None
    """Keep only the newest this many checkpoint-<step> dirs (checkpoint-final is never
    removed); null keeps all. Same meaning as diffusers' checkpoints_total_limit."""
    parity_check: bool = True
    """On the first step, replay the rollout with unchanged weights and log the log-prob gap."""
    progress_bar: bool = True
    """tqdm over steps and evaluation batches (quiet when stderr is not a TTY)."""
    loggers: list[Logger] = field(default_factory=lambda: ["csv"])
    """Where metric rows go: `csv` (metrics.csv, eval_metrics.csv; always, added when not
    named) plus optionally `tensorboard` (<output_dir>/tensorboard), `wandb` (see
    trainer.wandb) and `mlflow` (see trainer.mlflow); `trainer.loggers=wandb` means [csv, wandb],
    as `--report_to wandb` does. Trackers get the train row under train/, the eval row and
    contact sheet under eval/, from rank 0 only."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """W&B run settings (project, entity, name, group, tags, mode), each else its WANDB_* variable."""
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    """MLflow run settings (tracking URI, experiment, run name, tags), each else its MLFLOW_* variable."""
    sample_table: SampleTableConfig = field(default_factory=SampleTableConfig)
    """Every few steps, a table of rollout samples with their prompts and rewards to the trackers."""
    signal_grace_s: float = 25.0
    """Seconds a run has after SIGTERM/SIGINT before the scheduler kills it (Kubernetes and
    Slurm wait 30 by default). The step in progress finishes; a checkpoint of it is written
    only when the estimated save (the last save's duration, else the bytes at 100 MB/s) fits
    in what is left of this; then the run exits 143 / 130 with a line saying how to resume.
    0 never saves on a signal; a second signal stops at once without saving."""
    max_idle_steps: int | None = 10
    """Stop the run (one line with the reason) after this many steps in a row that train
    nothing: every sample's advantage zero (all rewards of each group equal), no optimizer
    step, or a non-finite loss. null never stops for that."""

    def problems(self) -> list[str]:
        """The run's length, cadences, limits and logger list (whether a tracker's package is
        installed is this machine's question: tracking/config.py:tracker_problems)."""
        problems = positive_problems({"trainer.num_steps": self.num_steps})
        problems += non_negative_problems({"trainer.save_every": self.save_every}, " (0 disables it)")
        problems += empty_path_problems({"trainer.output_dir": self.output_dir})
        problems += logger_problems(self.loggers) + self.sample_table.problems()
        if self.max_idle_steps is not None and self.max_idle_steps < 1:
            problems.append(
                f"trainer.max_idle_steps={self.max_idle_steps} must be >= 1 (null never stops a run "
                "for steps that train nothing)"
            )
        if not (self.signal_grace_s >= 0 and math.isfinite(self.signal_grace_s)):
            problems.append(f"trainer.signal_grace_s={self.signal_grace_s} must be a finite number >= 0")
        if self.keep_last is not None and self.keep_last < 1:
            problems.append(f"trainer.keep_last={self.keep_last} must be >= 1 (null keeps every checkpoint)")
        return problems


LossNormalisation = Literal["rank_mean", "global_unit_mean"]
LOSS_NORMALISATIONS = get_args(LossNormalisation)
"""`ActorConfig.loss_normalisation`'s choices (training/update.py: unit_weight)."""
EMACadence = Literal["micro_batch", "optimizer_step"]


@dataclass
class EMAConfig:
    enabled: bool = True
    """Keep an exponential moving average of the trained weights (evaluated and exported with eval.use_ema)."""
    decay: float = 0.9
    """The decay once warmed up (Flow-GRPO: 0.9)."""
    update_every: int = 8
    """Update when the optimizer-step count g satisfies (g + 1) % update_every == 0
    (cadence micro_batch) or g % update_every == 0 (cadence optimizer_step). Flow-GRPO: 8."""
    warmup: bool = True
    """Use min((1 + g)/(10 + g), decay) instead of a constant decay (Flow-GRPO's EMA)."""
    cadence: EMACadence = "micro_batch"
    """"micro_batch": Flow-GRPO's call after every replay micro-batch (an update at count g
    runs once per micro-batch while g holds); "optimizer_step": once per optimizer step."""

    def problems(self) -> list[str]:
        problems = positive_problems({"actor.ema.update_every": self.update_every})
        if not 0 <= self.decay < 1:
            problems.append(f"actor.ema.decay must be in [0, 1) (1 would never move the average), got {self.decay}")
        return problems


@dataclass
class ActorConfig:
    """Optimizer and update rhythm of the trained weights."""

    lr: float = 3e-4
    """AdamW learning rate of the trained weights (constant)."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW (beta1, beta2)."""
    weight_decay: float = 1e-4
    """AdamW decoupled weight decay."""
    eps: float = 1e-8
    """AdamW epsilon."""
    max_grad_norm: float = 1.0
    """Clip the gradient's global L2 norm to this before each optimizer step."""
    gradient_accumulation_steps: int = 4
    """Micro-batches per optimizer step. Flow-GRPO: 8 groups x 8 samples / 8 per micro-batch
    = 8 micro-batches, / 4 = two optimizer updates per step."""
    micro_batch_size: int | None = None
    """Samples per replay micro-batch; null = rollout.sample_batch_size (same batch
    geometry as rollout, so replayed log-probs match bitwise in fp32)."""
    num_inner_epochs: int = 1
    """Passes over the step's samples per training step (PPO epochs; Flow-GRPO: 1)."""
    shuffle_samples: bool = True
    """Shuffle the round's training units before splitting them into micro-batches (seeded, a
    new order each inner epoch), as Flow-GRPO's train_sd3.py; false keeps the order they were
    sampled in, as its train_sd3_fast.py, train_qwenimage.py and train_sd3_dpo.py
    (base/algorithm/flow_grpo_fast, the Qwen-Image recipe, base/algorithm/dpo)."""
    loss_normalisation: LossNormalisation = "rank_mean"
    """How an optimizer step's gradient averages its trained units across training processes.
    "rank_mean" (Flow-GRPO under accelerate DDP): each rank averages over its own units, then
    DDP / FSDP2 average over ranks, so when ranks train unequal numbers of units (the
    zero-advantage filter, online DPO's pairs) a unit on a lightly loaded rank weighs more.
    "global_unit_mean": the mean over the step's units on all ranks (the unit counts are
    exchanged first), every unit weighing the same: the gradient one process would take on
    the union (verl's global token count, transformers' average_tokens_across_devices).
    Identical on one process or with equal counts on every rank."""
    ema: EMAConfig = field(default_factory=EMAConfig)

    def problems(self) -> list[str]:
        """AdamW's ranges and the update rhythm's sizes (how they divide a step's samples is
        a check across rollout.* and actor.*: preflight/validate.py)."""
        sizes = {
            "actor.gradient_accumulation_steps": self.gradient_accumulation_steps,
            "actor.num_inner_epochs": self.num_inner_epochs,
        }
        if self.micro_batch_size is not None:
            sizes["actor.micro_batch_size"] = self.micro_batch_size
        problems = positive_problems(sizes)
        if self.lr <= 0:
            problems.append(f"actor.lr must be > 0, got {self.lr}")
        if len(self.betas) != 2 or not all(0 <= beta < 1 for beta in self.betas):
            problems.append(
                f"actor.betas must be two numbers in [0, 1) (AdamW's beta1, beta2), got {self.betas}; "
                "e.g. actor.betas=[0.9,0.999]"
            )
        if self.eps <= 0:
            problems.append(f"actor.eps must be > 0, got {self.eps}")
        problems += non_negative_problems({"actor.weight_decay": self.weight_decay})
        if self.max_grad_norm <= 0:
            problems.append(f"actor.max_grad_norm must be > 0 (gradients are clipped to it), got {self.max_grad_norm}")
        return problems + self.ema.problems()
