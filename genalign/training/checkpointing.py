"""Saving a run's state to a checkpoint and restoring it: what the trainer's parts hold.

Where it fits: step 7 of the loop (docs/architecture.md §2) and the start of a resumed run.
`Checkpointer.save` gathers every part on every rank (FSDP2 shards become whole tensors),
writes on rank 0 (`runs/checkpoint.py`: atomic, safetensors and JSON) with the export beside
it (`export/folder.py`), and waits at a barrier; `Checkpointer.restore` loads a checkpoint
into the freshly built parts. The file layout is `runs/checkpoint.py`'s; which part keeps
what is each part's own (`state_dict` / `load_state_dict`).
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from genalign.algorithms.base import Algorithm
from genalign.config.loader import config_to_dict
from genalign.config.schema import ExperimentConfig
from genalign.evaluation.evaluator import EvalHistory, Evaluator
from genalign.export.folder import checkpoint_export
from genalign.models.base import Policy
from genalign.runs import run_dir, stopping
from genalign.runs.checkpoint import CheckpointState, save_checkpoint
from genalign.runs.resume import ResumeError
from genalign.tracking.logs import timed_phase
from genalign.training import distributed
from genalign.training.ema import EMA
from genalign.weights.lora import load_trainable_state_dict

log = logging.getLogger(__name__)


@dataclass
class Checkpointer:
    """The parts of a run a checkpoint holds, and where it goes (`trainer.output_dir`)."""

    cfg: ExperimentConfig
    ranks: distributed.RankInfo
    policy: Policy
    parameters: dict[str, torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    ema: EMA | None
    algorithm: Algorithm
    evaluator: Evaluator
    tracker_run_id: str
    """One tracker run across resumes: the id travels in the checkpoint's trainer_state."""
    on_save: Callable[[int, Path], None] = lambda step, path: None
    """Called after every save with (step, path): the run's callbacks (rank 0's; the others have none)."""
    rollout_state: Callable[[], dict[str, torch.Tensor]] = dict
    """The weights the rollout under way samples with (rollout.overlap), or {}: the source's `state_dict`."""
    last_save_s: float | None = None
    """Seconds the last save took on rank 0 in this launch (the estimate for a save on a signal)."""

    def save(self, name: str, step: int) -> Path:
        """Gather on every rank, write on rank 0 (atomically), then wait for it."""
        trainable = distributed.full_state(self.parameters)
        ema = self.ema.state_dict() if self.ema else None
        ema_weights = distributed.full_state(ema.pop("weights")) if ema else None  # FSDP2 shards: whole tensors
        optimizer = distributed.full_optimizer_state(self.policy.transformer, self.optimizer)
        algorithm_state = distributed.full_state(self.algorithm.state_dict())  # NFT's old policy: FSDP2 shards
        rollout_state = self.rollout_state()  # whole tensors already: they went to the rollout workers
        output_dir = Path(self.cfg.trainer.output_dir)
        path = output_dir / name
        if self.ranks.is_main:
            history = self.evaluator.history.to_dict()
            export = checkpoint_export(
                self.cfg,
                self.policy,
                trainable,
                ema_weights,
                self.cfg.eval.use_ema,
                step,
                history,
                final=name == "checkpoint-final",
                ema_tracker=self.ema,
            )
            started = time.perf_counter()
            with timed_phase(log, f"saving {path}"):
                trainer_state = {
                    "eval_history": history,
                    "grad_scaler": self.scaler.state_dict(),
                    "world_size": self.ranks.world_size,
                    "tracker_run_id": self.tracker_run_id,
                    **({"ema": ema} if ema else {}),
                }  # the EMA's counters beside ema.safetensors
                save_checkpoint(
                    path,
                    step=step,
                    config=config_to_dict(self.cfg),
                    trainable=trainable,
                    ema=ema_weights,
                    optimizer=optimizer,
                    trainer_state=trainer_state,
                    algorithm=algorithm_state or None,
                    rollout=rollout_state or None,
                    export=export,
                )
            self.last_save_s = time.perf_counter() - started
            if name != "checkpoint-final":
                run_dir.prune_checkpoints(output_dir, self.cfg.trainer.keep_last)
        distributed.barrier(self.ranks)
        self.on_save(step, path)
        return path

    def restore(self, checkpoint: CheckpointState) -> None:
        """Load `checkpoint` into the parts (the trainer then hands the rollout its weights)."""
        try:
            load_trainable_state_dict(self.policy.transformer, checkpoint.trainable)
        except ValueError as exc:  # names and shapes are known only now, with the model built
            raise ResumeError(f"trainer.resume_from: {checkpoint.path}/trainable.safetensors: {exc}") from None
        try:
            self.algorithm.load_state_dict(checkpoint.algorithm or {})
        except ValueError as exc:
            raise ResumeError(f"{checkpoint.path}/algorithm.safetensors: {exc}") from exc
        distributed.load_full_optimizer_state(self.policy.transformer, self.optimizer, checkpoint.optimizer)
        if self.ema is not None:
            if checkpoint.ema is None:
                raise ResumeError(f"{checkpoint.path} has no EMA state but actor.ema.enabled=true")
            self.ema.load_state_dict({"weights": checkpoint.ema, **ema_counters(checkpoint.trainer_state)})
        if checkpoint.trainer_state.get("grad_scaler"):
            self.scaler.load_state_dict(checkpoint.trainer_state["grad_scaler"])
        self.evaluator.history = EvalHistory.from_dict(checkpoint.trainer_state["eval_history"])

    def stop_after_signal(self, step: int, signum: int, saved: bool, stop_check: stopping.StopCheck) -> None:
        """After a SIGTERM/SIGINT: checkpoint this step when the save fits in the grace left
        (every rank agrees first: the save is collective), say how to resume, raise.
        `saved`: this step's regular checkpoint is already written."""
        grace = self.cfg.trainer.signal_grace_s
        estimate = self.estimated_save_s()
        left = grace - stop_check.watch.seconds_since_signal()
        fits = stop_check.every_rank(estimate <= left)
        if saved:
            what = f"checkpoint-{step} is written"
        elif fits:
            self.save(f"checkpoint-{step}", step)
            what = f"checkpoint-{step} written"
        else:
            what = (
                f"no checkpoint of it (an estimated {estimate:.0f} s save does not fit in the {max(left, 0):.0f} s "
                f"left of trainer.signal_grace_s={grace:g})"
            )
        resume = run_dir.resume_hint(Path(self.cfg.trainer.output_dir), self.ranks.world_size, sys.argv)
        message = (
            f"stopped by {signal.Signals(signum).name} after step {step} of {self.cfg.trainer.num_steps}: "
            f"{what}; {resume}"
        )
        if self.ranks.is_main:  # every rank stops after this step; one line per job says so
            log.warning("%s", message)
        raise stopping.RunInterrupted(signum, message, logged=True)

    def estimated_save_s(self) -> float:
        """How long a save will take: the last one of this launch, else the bytes a checkpoint
        writes, roughly (the trained tensors, Adam's two moments, the EMA), at a slow disk's pace."""
        trained = sum(p.numel() * p.element_size() for p in self.parameters.values())
        return stopping.estimated_save_s(self.last_save_s, trained * (3 + (1 if self.ema is not None else 0)))


def ema_counters(trainer_state: dict[str, Any]) -> dict[str, Any]:
    """The EMA's counters a checkpoint's trainer_state.json holds: its "ema" entry, or in a
    checkpoint written before the EMA saved its own state the flat ema_* keys. One written
    before the EMA counted its updates has only ema_optimizer_steps: the updates and the
    starting weights' share are unknown (-1, NaN), which the model card says."""
    if "ema" in trainer_state:
        return trainer_state["ema"]
    return {
        "optimizer_steps": trainer_state["ema_optimizer_steps"],
        "updates": trainer_state.get("ema_updates", -1),
        "initial_share": trainer_state.get("ema_initial_share", float("nan")),
    }


def resumed_run_id(checkpoint: CheckpointState | None) -> str | None:
    """The tracker run id a checkpoint carries (None: a fresh start, or none recorded)."""
    return checkpoint.trainer_state.get("tracker_run_id") if checkpoint is not None else None
