"""Whole-config checks across blocks: every problem listed, before any model loads.

Where it fits: `load_config` runs it after the typed build (so every value already has its
schema type) and raises all problems as one `ConfigError`. Names chosen in config (model
family, algorithm, rewards) are checked against the lazy registries with `Registry.check`,
which never imports the implementations. Each message names the keys and how to fix them.
"""

from __future__ import annotations

import difflib
import math

from genalign.config.schema import ExperimentConfig
from genalign.hub import HUB_ID
from genalign.preflight.algorithm_checks import algorithm_problems
from genalign.preflight.step_sizes import num_train_timesteps_problem
from genalign.preflight.values import non_finite_problems, reward_package_problems, value_problems
from genalign.tracking.config import logger_problems
from genalign.training.config import LOSS_NORMALISATIONS

CHOICES = {
    "reward.aggregation": ("weighted_sum", "advantage_sum"),
    "reward.runtime": ("local", "ray", "http"),
    "rollout.engine": ("local", "ray"),
    "rollout.kernel": ("flow_sde", "dance_sde", "cps", "cps_gaussian"),
    "rollout.sde_window.schedule": ("random", "progressive", "fixed"),
    "rollout.sde_window.draw": ("per_batch", "per_step"),
    "algorithm.timestep_selection": ("first", "random"),
    "algorithm.rollout_correction.mode": ("off", "truncate", "mask"),
    "model.train_mode": ("lora", "full"),
    "model.dtype": ("float32", "float16", "bfloat16"),
    "algorithm.kl_type": ("latent_mean", "velocity"),
    "algorithm.token_log_prob": ("guided", "conditional"),
    "algorithm.advantage.std": ("population", "unbiased"),
    "distributed.training.strategy": ("none", "ddp", "fsdp2"),
    "distributed.training.backend": ("auto", "gloo", "nccl"),
    "actor.loss_normalisation": LOSS_NORMALISATIONS,
}


def _get(cfg: ExperimentConfig, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def validate(cfg: ExperimentConfig, check_machine: bool = True) -> list[str]:
    """Every cross-field problem of `cfg` (empty when it can run); `check_machine=False` skips
    planning `distributed.*` against this machine's devices."""
    from genalign.models.registry import MODEL_FAMILIES
    from genalign.rewards.registry import REWARDS
    from genalign.placement.ray_pools import resource_problems

    problems: list[str] = []
    for key, choices in CHOICES.items():
        value = _get(cfg, key)
        if value not in choices:
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"{key}={value!r} is not supported{hint} Choose one of: {', '.join(choices)}")

    non_finite = non_finite_problems(cfg)
    if non_finite:  # every range check below would only repeat "nan is not in range"
        return problems + non_finite
    message = MODEL_FAMILIES.check(cfg.model.family, cfg.model.allow_import)
    if message:
        problems.append(message)
    if not cfg.reward.components:
        problems.append("reward.components is empty: name at least one reward, e.g. reward.components.ocr=1.0")
    allow_import = cfg.reward.allow_import
    for name in cfg.reward.components:
        message = REWARDS.check(name, allow_import)
        if message:
            problems.append(message)
    if cfg.reward.components and all(w == 0 for w in cfg.reward.components.values()):
        problems.append("reward.components: every weight is 0, so nothing would be scored")
    for key, names in (("eval.gold_rewards", cfg.eval.gold_rewards), ("eval.quality_metrics", cfg.eval.quality_metrics)):
        for name in names:
            message = REWARDS.check(name, allow_import)
            if message:
                problems.append(message.replace("reward.components", key))
    scorers = list(cfg.reward.components) + list(cfg.eval.gold_rewards) + list(cfg.eval.quality_metrics)
    for name in cfg.reward.kwargs:
        if name not in scorers:
            close = difflib.get_close_matches(name, scorers, n=1)
            hint = f"; did you mean reward.kwargs.{close[0]}?" if close else ""
            problems.append(f"reward.kwargs.{name}: no reward named {name!r} in reward.components, "
                            f"eval.gold_rewards or eval.quality_metrics{hint}")

    positive = {"rollout.n": cfg.rollout.n, "rollout.rollout_batch_size": cfg.rollout.rollout_batch_size,
                "rollout.sample_batch_size": cfg.rollout.sample_batch_size, "rollout.num_steps": cfg.rollout.num_steps,
                "rollout.height": cfg.rollout.height, "rollout.width": cfg.rollout.width,
                "actor.gradient_accumulation_steps": cfg.actor.gradient_accumulation_steps,
                "actor.num_inner_epochs": cfg.actor.num_inner_epochs, "trainer.num_steps": cfg.trainer.num_steps,
                "eval.num_steps": cfg.eval.num_steps, "eval.max_prompts": cfg.eval.max_prompts,
                "eval.batch_size": cfg.eval.batch_size, "reward.batch_size": cfg.reward.batch_size,
                "model.lora.rank": cfg.model.lora.rank, "actor.ema.update_every": cfg.actor.ema.update_every,
                "rollout.num_workers": cfg.rollout.num_workers, "reward.num_workers": cfg.reward.num_workers,
                "distributed.training.timeout_s": cfg.distributed.training.timeout_s}
    if cfg.actor.micro_batch_size is not None:
        positive["actor.micro_batch_size"] = cfg.actor.micro_batch_size
    bad_sizes = [key for key, value in positive.items() if value <= 0]
    problems += [f"{key} must be positive, got {positive[key]}" for key in bad_sizes]
    problems += value_problems(cfg)
    for key, value in {"eval.every": cfg.eval.every, "trainer.save_every": cfg.trainer.save_every}.items():
        if value < 0:
            problems.append(f"{key} must be >= 0 (0 disables it), got {value}")
    card = cfg.model.card
    if card.license == "other" and not card.license_name:
        problems.append("model.card.license=other needs model.card.license_name (and license_link): the Hub shows "
                        "that name for a licence it does not list")
    if card.base_model is not None and not HUB_ID.match(card.base_model):
        problems.append(f"model.card.base_model={card.base_model!r} is not a Hub id (org/name); set the id the base "
                        "model has on the Hub, or null")
    problems += logger_problems(cfg.trainer.loggers, cfg.trainer.wandb, check_installed=check_machine)
    if check_machine:
        problems += reward_package_problems(cfg)
    if cfg.trainer.sample_table.every < 0:
        problems.append(f"trainer.sample_table.every must be >= 0 (0 disables it), got {cfg.trainer.sample_table.every}")
    if cfg.trainer.sample_table.count < 1:
        problems.append(f"trainer.sample_table.count must be >= 1, got {cfg.trainer.sample_table.count}")
    if cfg.trainer.max_idle_steps is not None and cfg.trainer.max_idle_steps < 1:
        problems.append(f"trainer.max_idle_steps={cfg.trainer.max_idle_steps} must be >= 1 (null never stops a run "
                        "for steps that train nothing)")
    if not (cfg.trainer.signal_grace_s >= 0 and math.isfinite(cfg.trainer.signal_grace_s)):
        problems.append(f"trainer.signal_grace_s={cfg.trainer.signal_grace_s} must be a finite number >= 0")
    if cfg.trainer.keep_last is not None and cfg.trainer.keep_last < 1:
        problems.append(f"trainer.keep_last={cfg.trainer.keep_last} must be >= 1 (null keeps every checkpoint)")
    if cfg.rollout.noise_level < 0:
        problems.append(f"rollout.noise_level must be >= 0, got {cfg.rollout.noise_level}")
    if cfg.algorithm.clip_range <= 0:
        problems.append(f"algorithm.clip_range must be > 0, got {cfg.algorithm.clip_range}")
    if cfg.algorithm.kl_beta < 0:
        problems.append(f"algorithm.kl_beta must be >= 0, got {cfg.algorithm.kl_beta}")
    fraction_in_range = 0 < cfg.algorithm.timestep_fraction <= 1
    if not fraction_in_range:
        problems.append(f"algorithm.timestep_fraction must be in (0, 1], got {cfg.algorithm.timestep_fraction}")
    if cfg.reward.num_threads < 1:
        problems.append(f"reward.num_threads must be positive, got {cfg.reward.num_threads}")
    problems += cfg.reward.http_problems()
    if cfg.reward.async_scoring and cfg.rollout.engine != "local":
        problems.append("reward.async_scoring=true scores in-process rollout chunks as they finish; with "
                        "rollout.engine=ray use reward.async_scoring=false")
    if cfg.actor.ema.cadence not in ("micro_batch", "optimizer_step"):
        problems.append(f"actor.ema.cadence={cfg.actor.ema.cadence!r}: choose micro_batch (Flow-GRPO) or optimizer_step")
    if cfg.model.cfg_batch not in ("joint", "split"):
        problems.append(f"model.cfg_batch={cfg.model.cfg_batch!r}: choose joint (one forward) or split (two)")
    if cfg.model.compile_mode not in ("regional", "full"):
        problems.append(f"model.compile_mode={cfg.model.compile_mode!r}: choose regional (repeated blocks) or full")
    problems += algorithm_problems(cfg)  # the name, its kind, its options and its own checks
    rollout_workers = cfg.distributed.resources.rollout.num_workers
    if cfg.rollout.engine == "ray" and cfg.rollout.num_workers != rollout_workers:
        problems.append(f"rollout.num_workers={cfg.rollout.num_workers} but distributed.resources.rollout.num_workers="
                        f"{rollout_workers}: the Ray rollout pool has one size; set both to the same value")
    if bad_sizes:
        return problems  # the divisibility checks below divide by these
    if fraction_in_range and int(cfg.rollout.num_steps * cfg.algorithm.timestep_fraction) < 1:
        problems.append(num_train_timesteps_problem(cfg.rollout.num_steps, cfg.algorithm.timestep_fraction))
    problems += _batch_geometry_problems(cfg)
    problems += _variant_problems(cfg)
    if problems:  # resource planning reads the keys checked above; it would only echo their errors
        return problems
    return resource_problems(cfg) if check_machine else []  # distributed.* vs this machine


def _batch_geometry_problems(cfg: ExperimentConfig) -> list[str]:
    """Samples per step must split evenly into rollout and replay micro-batches, and replay
    micro-batches evenly into optimizer steps (the `StepSizes` numbers; sizes already positive)."""
    problems: list[str] = []
    samples_per_step = cfg.rollout.rollout_batch_size * cfg.rollout.n
    rollout_micro_batch = cfg.rollout.sample_batch_size
    train_micro_batch = cfg.actor.micro_batch_size or rollout_micro_batch
    if samples_per_step % rollout_micro_batch:
        problems.append(f"rollout.sample_batch_size={rollout_micro_batch} must divide the {samples_per_step} samples "
                        "per step (rollout.rollout_batch_size * rollout.n)")
    if samples_per_step % train_micro_batch:
        if cfg.actor.micro_batch_size is not None:  # else it is the rollout micro-batch, reported above
            problems.append(f"actor.micro_batch_size={train_micro_batch} must divide the {samples_per_step} "
                            "samples per step (rollout.rollout_batch_size * rollout.n)")
        return problems
    micro_batches = samples_per_step // train_micro_batch * cfg.actor.num_inner_epochs
    if micro_batches % cfg.actor.gradient_accumulation_steps:
        problems.append(f"actor.gradient_accumulation_steps={cfg.actor.gradient_accumulation_steps} must divide the "
                        f"{micro_batches} micro-batches per step ((rollout.rollout_batch_size * rollout.n / train "
                        "micro-batch) * actor.num_inner_epochs), or the last gradients of a step would be dropped")
    return problems


def _variant_problems(cfg: ExperimentConfig) -> list[str]:
    """The GRPO variants' rollout options: SDE window range, kernel/step combinations."""
    problems: list[str] = []
    rollout, algorithm = cfg.rollout, cfg.algorithm
    window = rollout.sde_window
    num_steps = rollout.num_steps
    if window.size < 0:
        problems.append(f"rollout.sde_window.size must be >= 0 (0 = no window), got {window.size}")
    if window.size > 0:
        lo, hi = window.bounds_range(num_steps)
        if not (0 <= lo and lo + window.size <= hi <= num_steps):
            problems.append(f"rollout.sde_window: a window of {window.size} steps must fit in [lo, hi) = [{lo}, {hi}) "
                            f"inside the {num_steps} rollout steps (0 <= lo, lo + size <= hi <= rollout.num_steps; "
                            "hi null = rollout.num_steps // 2, negative = counted from the end)")
        if window.shift_every < 1 or window.shift_by < 1:
            problems.append(f"rollout.sde_window.shift_every ({window.shift_every}) and shift_by ({window.shift_by}) "
                            "must be >= 1")
    if algorithm.rollout_correction.threshold <= 1:
        problems.append(f"algorithm.rollout_correction.threshold must be > 1, got "
                        f"{algorithm.rollout_correction.threshold}")
    if rollout.kernel.startswith("cps") and _trains_final_step(cfg):
        problems.append(f"rollout.kernel={rollout.kernel}: the final step (σ_next = 0) of CPS is deterministic and "
                        "has no log-prob to train; keep it out of training (algorithm.timestep_fraction < 1, or an "
                        "rollout.sde_window that ends before the final step)")
    return problems


def _trains_final_step(cfg: ExperimentConfig) -> bool:
    """Whether the last denoising step can be among the trained ones (with selection=first)."""
    num_steps, window = cfg.rollout.num_steps, cfg.rollout.sde_window
    if cfg.algorithm.timestep_selection == "random":
        return False  # random selection never includes the final step
    if cfg.rollout.ode_final_step:
        return False
    if window.size > 0:
        return window.bounds_range(num_steps)[1] == num_steps
    return int(num_steps * cfg.algorithm.timestep_fraction) >= num_steps
