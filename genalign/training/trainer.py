"""The training loop: rollout -> reward -> advantage -> update -> log -> eval -> checkpoint.

Where it fits: the top of the stack below the CLI. `Trainer.train` reads like docs/architecture.md §2;
each phase is a named method. The checks before anything loads live in `preflight/start.py`,
building the parts in `setup.py`, saving and restoring them in `checkpointing.py`, the math in
`algorithms/` and `sampling/`. The loop never asks which model or algorithm it runs.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any, Iterable

import torch
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from genalign.algorithms.registry import algorithm_class
from genalign.config.loader import config_to_yaml
from genalign.config.schema import ExperimentConfig
from genalign.evaluation.console import eval_line
from genalign.finite import named_step
from genalign.placement.ray_pools import start_ray_for_run, stop_ray_for_run
from genalign.placement.resources import resolve_resources
from genalign.preflight.cautions import config_cautions
from genalign.preflight.start import check_start
from genalign.preflight.step_sizes import StepSizes
from genalign.reporting.provenance import record_start
from genalign.reporting.report import refresh_report
from genalign.rewards.composite import build_reward_runtime
from genalign.runs import run_dir, stopping
from genalign.runs.checkpoint import CheckpointState
from genalign.tracking.logs import RunLog, StepClock, timed_phase
from genalign.tracking.samples import log_rollout_samples
from genalign.tracking.trackers import new_run_id
from genalign.training import distributed, setup
from genalign.training.callbacks import run_callbacks
from genalign.training.checkpointing import Checkpointer, resumed_run_id
from genalign.training.job_metrics import step_columns, step_line, throughput_columns
from genalign.training.memory import PeakMemory
from genalign.training.optim import build_optimizer
from genalign.training.parity import parity_preflight
from genalign.training.precision import build_grad_scaler
from genalign.training.sources import StepData
from genalign.training.update import UpdateResult, run_update

log = logging.getLogger(__name__)


class Trainer:
    """One run, whole once built: `Trainer.for_config(cfg)` is None when the run has nothing
    left to train, so every Trainer that exists has its model, optimizer and sinks."""

    @classmethod
    def for_config(cls, cfg: ExperimentConfig, callbacks: Iterable[Any] = ()) -> Trainer | None:
        """The run's trainer, or None (logged) when its checkpoint is at trainer.num_steps already."""
        start = run_dir.decide_start(cfg)
        if start.finished:
            if distributed.rank_info_from_env().is_main:
                start.apply()  # stale temp dirs only
            log.info("%s", start.nothing_left())
            return None
        return cls(cfg, start, callbacks)

    def __init__(
        self, cfg: ExperimentConfig, start: run_dir.StartDecision | None = None, callbacks: Iterable[Any] = ()
    ):
        """`start`: the run directory's decision (`run_dir.decide_start(cfg)` when not given);
        it and the checks that need no model may refuse the run before any model loads.
        `callbacks`: objects with any of `training/callbacks.py`'s hooks, called on rank 0."""
        self.cfg = cfg
        self.sizes = StepSizes.from_config(cfg)
        self.output_dir = Path(cfg.trainer.output_dir)
        self.start = run_dir.decide_start(cfg) if start is None else start
        job = distributed.rank_info_from_env()
        checkpoint = check_start(
            cfg, self.start, job.world_size, lambda text: log.info("%s", text) if job.is_main else None
        )
        strategy = cfg.distributed.training
        devices = resolve_resources(cfg).trainer_cuda_indices  # the planned (or pinned) trainer GPUs
        self.ranks = distributed.init_distributed(strategy.strategy, strategy.backend, devices, strategy.timeout_s)
        self.run_log = None
        if self.ranks.is_main:
            self.start.apply()  # stale temp dirs; the old run's files when overwriting
            self.run_log = RunLog(self.output_dir)  # after apply: an overwritten run's train.log is gone
        try:
            self.callbacks = run_callbacks(cfg, callbacks, self.ranks.is_main)
            self._build(cfg, checkpoint)
        except BaseException:
            self.close_run_log()
            raise

    def _build(self, cfg: ExperimentConfig, checkpoint: CheckpointState | None) -> None:
        distributed.barrier(self.ranks)
        log.info("step sizes: %s", self.sizes.describe())
        for caution in config_cautions(cfg) if self.ranks.is_main else ():  # one line per job, not per rank
            log.warning("%s", caution)
        torch.manual_seed(cfg.trainer.seed)  # adapter initialisation is the only global-RNG use
        with timed_phase(log, f"loading model {cfg.model.family} from {cfg.model.path}"):
            self.policy = setup.build_policy(cfg)
        reference = setup.build_reference(cfg, self.policy)  # before wrapping: a full copy stays a plain module
        distributed.wrap_for_training(
            self.policy.transformer, cfg.distributed.training.strategy, self.policy.repeated_blocks
        )
        self.parameters = setup.named_trainable_parameters(self.policy.transformer)
        self.optimizer = build_optimizer(list(self.parameters.values()), cfg.actor)
        scaler = build_grad_scaler(self.policy.dtype, self.policy.device, self.ranks.world_size > 1)
        self.ema = setup.build_ema(cfg.actor.ema, self.parameters)
        self.algorithm = algorithm_class(cfg)(cfg.algorithm, reference, parameters=self.parameters)
        self.update_context = setup.update_context(
            cfg, self.policy, self.algorithm, self.optimizer, self.parameters, scaler, self.ema, self.ranks
        )
        self.owns_ray = start_ray_for_run(cfg)  # once, sized for every actor pool (rewards, gold, metrics, rollout)
        with timed_phase(log, f"loading rewards {', '.join(cfg.reward.active_components())}"):
            self.rewards = build_reward_runtime(cfg.reward, self.policy.device)
        self.algorithm.attach_rewards(self.rewards)  # reward feedback scores with grad inside its loss
        self.spec = setup.rollout_spec(cfg)
        self.memory = PeakMemory(self.policy.device)
        self.engine = setup.build_rollout_engine(cfg, self.policy)
        self.source = setup.build_batch_source(
            cfg, self.sizes, self.policy, self.engine, self.rewards, self.algorithm, self.spec, self.ranks, self.sync
        )
        run_id = resumed_run_id(checkpoint) or new_run_id()  # one tracker run across resumes
        # rank 0 alone writes metrics, evaluation artefacts and checkpoints
        self.trackers, self.metrics, self.evaluator = setup.build_sinks(
            cfg,
            self.rewards,
            self.policy.device,
            self.start.checkpoint_step + 1 if checkpoint else None,
            run_id,
            self.ranks,
        )
        self.checkpointer = Checkpointer(
            cfg,
            self.ranks,
            self.policy,
            self.parameters,
            self.optimizer,
            scaler,
            self.ema,
            self.algorithm,
            self.evaluator,
            run_id,
            self.callbacks.on_save,
            self.source.state_dict,
        )
        self.start_step = self.current_step = 1
        if checkpoint is not None:
            self.checkpointer.restore(checkpoint)
            self.source.restore(checkpoint)  # the rollout's weights: the restored ones, or the in-flight rollout's
            self.start_step = checkpoint.step + 1
            log.info("resumed from %s at step %d", checkpoint.path, self.start_step)

    # ---------------------------------------------------------------- the loop
    def train(self) -> None:
        try:
            if self.ranks.is_main:
                record_start(self.output_dir, self.start_step, config_to_yaml(self.cfg))
            self.callbacks.on_train_begin(self)
            with stopping.SignalWatch() as watch:
                self.stop_check = stopping.StopCheck(
                    watch, self.cfg.trainer.max_idle_steps, partial(distributed.max_over_ranks, info=self.ranks)
                )
                try:
                    self.run_steps()
                except stopping.RunInterrupted as interrupted:  # a second signal: the step was abandoned
                    resume = run_dir.resume_hint(self.output_dir, self.ranks.world_size, sys.argv)
                    interrupted.log_once(log, f"during step {self.current_step}; {resume}", self.ranks.is_main)
                    raise
        finally:  # a failed run too releases the Ray actors, reward threads, process group and log file
            try:
                self.callbacks.on_train_end()  # e.g. waits for the last Hub upload
            finally:
                self.close()

    def run_steps(self) -> None:
        last = self.cfg.trainer.num_steps
        if self.start_step == 1 and self.evaluator.due(0, last):
            self.evaluate(0)
            self.report()
        quiet = not (self.cfg.trainer.progress_bar and sys.stderr.isatty() and self.ranks.is_main)
        clock = StepClock(self.start_step, last)
        # with a bar on the terminal, log lines are printed above it (tqdm.write) instead of
        # through it; without one the console handler is left as it is
        with nullcontext() if quiet else logging_redirect_tqdm():
            for step in tqdm(
                range(self.start_step, last + 1), desc="train", disable=quiet, initial=self.start_step - 1, total=last
            ):
                self.current_step = step
                row = self.train_step(step, clock)
                evaluated = self.evaluator.due(step, last)
                if evaluated:
                    row["time_eval_s"] = self.evaluate(step)
                self.metrics.log(step, row)
                self.callbacks.on_step_end(step, row)
                if evaluated and step != last:  # the page shows this row; the last is reported after saving
                    self.report()
                saved = bool(self.cfg.trainer.save_every and step % self.cfg.trainer.save_every == 0 and step != last)
                if saved:
                    self.checkpointer.save(f"checkpoint-{step}", step)
                verdict = self.stop_check.after_step(step, row)  # every rank, every step (one all-reduce)
                if verdict.stalled:
                    raise stopping.TrainingStalled(verdict.stalled)
                if verdict.signum and step != last:  # on the last step the run simply finishes
                    self.checkpointer.stop_after_signal(step, verdict.signum, saved, self.stop_check)
            self.checkpointer.save("checkpoint-final", last)
        self.report()

    def train_step(self, step: int, clock: StepClock | None = None) -> dict[str, float]:
        """One step (docs/architecture.md §2): the step's data, the parity preflight on step 1,
        one optimizer round, the weights to the rollout; the job's metrics row."""
        # CPU seconds beside the wall-clock phases: they do not grow with other processes' load
        cpu_start, step_start = time.process_time(), time.perf_counter()
        self.memory.start()
        data: StepData = self.source.collect(step)  # rollout + rewards + advantages, or offline pairs
        times = dict(data.times)
        start = time.perf_counter()
        parity: dict[str, float] = {}  # the preflight replays stored log-probs: for an algorithm trained on them
        if step == 1 and self.cfg.trainer.parity_check and self.algorithm.needs_old_logprob:
            parity = parity_preflight(self.policy, data.trajectories, self.algorithm, self.spec.chunk_size, self.ranks)
        update, algorithm_row = self.update(data, step)
        times["time_train_s"] = time.perf_counter() - start
        synced = self.source.after_update(step)  # the weights to the rollout (now, or before its next rollout)
        times["time_cpu_s"], times["time_step_s"] = time.process_time() - cpu_start, time.perf_counter() - step_start
        log_rollout_samples(
            self.metrics, step, self.cfg.trainer.sample_table, bool(self.trackers), data.trajectories, data.scores
        )
        # the job's update and phase columns, not this rank's: one all-gather (training/job_metrics.py)
        job = step_columns(update, {**times, **self.memory.metrics()}, self.ranks)
        row = {
            **data.row,
            **job,
            **algorithm_row,
            **synced,
            **parity,
            "lr": self.optimizer.param_groups[0]["lr"],
            **throughput_columns(data.generated * self.ranks.world_size, job),
        }
        log.info("%s", step_line(clock.describe(step) if clock else f"step {step}/{self.cfg.trainer.num_steps}", row))
        return row

    # ---------------------------------------------------------------- phases
    def update(self, data: StepData, step: int) -> tuple[UpdateResult, dict[str, float]]:
        """One optimizer round over the step's units, then the algorithm's after-update hook."""
        self.policy.transformer.train()
        generator = torch.Generator().manual_seed(self.cfg.trainer.seed * 1_000_003 + step)
        result = run_update(
            self.update_context,
            data.units,
            data.advantages,
            self.sizes.train_micro_batch,
            generator,
            filler=data.filler,
        )
        self.policy.transformer.eval()
        return result, self.algorithm.after_update(result.optimizer_steps)

    def sync(self, step: int) -> dict[str, float]:
        """Hand the fresh trainable weights to the rollout engine (no-op in-process)."""
        if not self.engine.needs_sync:
            return {}
        with self.algorithm.rollout_weights():  # the weights the rollout samples with (NFT: the old policy)
            state = distributed.full_state(self.parameters)  # whole tensors: every rank gathers its shards
        return self.engine.sync(state, version=step)

    def evaluate(self, step: int) -> float:
        start = time.perf_counter()
        weights = self.ema.applied() if self.ema is not None and self.cfg.eval.use_ema else nullcontext()
        with (
            weights,
            named_step(f"eval step {step}"),
            timed_phase(log, f"eval step {step} ({len(self.evaluator.groups.prompts)} samples)"),
        ):
            metrics = self.evaluator.evaluate(self.policy, step)
        self.callbacks.on_eval(step, metrics)
        log.info("%s", eval_line(step, metrics))  # the headline figures; eval_metrics.csv has them all
        return time.perf_counter() - start

    def report(self) -> None:
        """Rewrite report.html from the run directory (rank 0). A failure is a logged
        warning, never an exception: the report is a view of the run, not part of it."""
        if self.ranks.is_main:
            refresh_report(self.output_dir)

    def close(self) -> None:
        for part in (self.engine, self.rewards, self.metrics, self.evaluator):
            part.close()
        stop_ray_for_run(self.owns_ray)
        distributed.shutdown()
        self.close_run_log()

    def close_run_log(self) -> None:
        if self.run_log is not None:
            self.run_log.close()
            self.run_log = None
