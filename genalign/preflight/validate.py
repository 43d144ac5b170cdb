"""Whole-config checks: every problem listed, before any model loads.

Where it fits: `load_config` runs it after the typed build (so every value already has its
schema type, and every closed choice is one of its `Literal`'s values: the loader checked
both) and raises all problems as one `ConfigError`. A block's own rules live beside its fields
(`RolloutConfig.problems()`, `ActorConfig.problems()`, ...: each package's `config.py`); what
is here needs more than one block, a registry or this machine. Names chosen in config (model
family, algorithm, rewards) are checked against the lazy registries with `Registry.check`,
which never imports the implementations. Each message names the keys and how to fix them.
"""

from __future__ import annotations

import dataclasses
import difflib

from genalign.config.schema import ExperimentConfig
from genalign.models.family_checks import family_problems
from genalign.models.registry import MODEL_FAMILIES
from genalign.placement.ray_pools import resource_problems
from genalign.preflight.algorithm_checks import algorithm_problems
from genalign.preflight.float8_checks import float8_problems
from genalign.preflight.hub_checks import hub_problems
from genalign.preflight.reward_contract import registered_reward_problems
from genalign.preflight.step_sizes import counts_positions_by_fraction, num_train_timesteps_problem
from genalign.preflight.values import int64_problems, non_finite_problems, reward_package_problems
from genalign.rewards.options import reward_option_problems
from genalign.rewards.registry import REWARDS
from genalign.tracking.config import tracker_problems


def validate(cfg: ExperimentConfig, check_machine: bool = True) -> list[str]:
    """Every problem of `cfg` (empty when it can run): numbers no library takes (alone: every
    range check would echo them), then the names registries resolve, each block's own
    problems in schema order and the checks across blocks; this machine's devices last, when
    nothing else is wrong. `check_machine=False` skips what depends on this machine (installed
    packages, devices)."""
    unrepresentable = non_finite_problems(cfg) + int64_problems(cfg)
    if unrepresentable:
        return unrepresentable
    problems = name_problems(cfg) + block_problems(cfg) + cross_block_problems(cfg)
    problems += hub_problems(cfg, check_machine)  # push_to_hub, hf:// references (preflight/hub_checks.py)
    problems += float8_problems(cfg, check_machine)  # the strategy, torchao, the device (preflight/float8_checks.py)
    if check_machine:
        problems += tracker_problems(cfg.trainer.loggers, cfg.trainer.wandb, cfg.trainer.mlflow)
        problems += reward_package_problems(cfg)
    if problems or not check_machine:  # resource planning reads the keys checked above: it would echo them
        return problems
    return resource_problems(cfg)  # distributed.* against this machine's devices


def block_problems(cfg: ExperimentConfig) -> list[str]:
    """Each config block's own problems (its `problems()`, beside its fields), in schema order."""
    problems: list[str] = []
    for field in dataclasses.fields(cfg):
        block = getattr(cfg, field.name)
        if dataclasses.is_dataclass(block):  # every block has one (tests/unit/preflight/test_validate.py)
            problems += block.problems()
    return problems


def name_problems(cfg: ExperimentConfig) -> list[str]:
    """model.family, the rewards of reward.components, eval.gold_rewards and eval.quality_metrics
    against their registries (or an allowed import path), and reward.kwargs against those names."""
    allow_import = cfg.reward.allow_import
    named = (
        ("reward.components", cfg.reward.components),
        ("eval.gold_rewards", cfg.eval.gold_rewards),
        ("eval.quality_metrics", cfg.eval.quality_metrics),
    )
    problems = [MODEL_FAMILIES.check(cfg.model.family, cfg.model.allow_import)]
    problems += [
        (REWARDS.check(name, allow_import) or "").replace("reward.components", key)
        for key, names in named
        for name in names
    ]
    scorers = [name for _, names in named for name in names]
    for name in cfg.reward.kwargs:
        if name not in scorers:
            close = difflib.get_close_matches(name, scorers, n=1)
            hint = f"; did you mean reward.kwargs.{close[0]}?" if close else ""
            problems.append(
                f"reward.kwargs.{name}: no reward named {name!r} in reward.components, "
                f"eval.gold_rewards or eval.quality_metrics{hint}"
            )
    return [problem for problem in problems if problem]


def cross_block_problems(cfg: ExperimentConfig) -> list[str]:
    """The rules that read more than one block: the family's spec against model.* and the
    rollout's sizes, each scorer's options, the algorithm against everything it reads, the
    Ray pool's size, and how a step's samples split into micro-batches and optimizer steps."""
    problems = family_problems(cfg)  # sizes, frames, negative prompt, guidance, offload: the family's spec
    problems += reward_option_problems(cfg)  # rewards/options.py
    problems += registered_reward_problems(
        cfg
    )  # a reward that cannot score these frames (preflight/reward_contract.py)
    if cfg.reward.async_scoring and cfg.rollout.engine != "local":
        problems.append(
            "reward.async_scoring=true scores in-process rollout chunks as they finish; with "
            "rollout.engine=ray use reward.async_scoring=false"
        )
    problems += algorithm_problems(cfg)  # the name, its kind, its options and its own checks
    problems += overlap_placement_problems(cfg)
    rollout_workers = cfg.distributed.resources.rollout.num_workers
    if cfg.rollout.engine == "ray" and cfg.rollout.num_workers != rollout_workers:
        problems.append(
            f"rollout.num_workers={cfg.rollout.num_workers} but distributed.resources.rollout.num_workers="
            f"{rollout_workers}: the Ray rollout pool has one size; set both to the same value"
        )
    if not _step_sizes_positive(cfg):
        return problems  # the checks below divide by them; their own block reports each one
    if (
        counts_positions_by_fraction(cfg)
        and 0 < cfg.algorithm.timestep_fraction <= 1
        and int(cfg.rollout.num_steps * cfg.algorithm.timestep_fraction) < 1
    ):
        problems.append(num_train_timesteps_problem(cfg.rollout.num_steps, cfg.algorithm.timestep_fraction))
    problems += _batch_geometry_problems(cfg)
    if cfg.rollout.kernel.startswith("cps") and _trains_final_step(cfg):
        problems.append(
            f"rollout.kernel={cfg.rollout.kernel}: the final step (σ_next = 0) of CPS is deterministic "
            "and has no log-prob to train; keep it out of training (algorithm.timestep_fraction < 1, or "
            "an rollout.sde_window that ends before the final step)"
        )
    return problems


def overlap_placement_problems(cfg: ExperimentConfig) -> list[str]:
    """rollout.overlap=one_step needs rollout workers that sample while the trainer trains
    (what the algorithm needs of it: `algorithm_checks.overlap_problems`)."""
    if cfg.rollout.overlap == "off":
        return []
    problems = []
    if cfg.rollout.engine != "ray":
        problems.append(
            "rollout.overlap=one_step runs the next step's rollout on Ray workers while the trainer "
            f"updates; rollout.engine={cfg.rollout.engine} samples in the trainer's process: use rollout.engine=ray"
        )
    if cfg.distributed.colocated:
        problems.append(
            "rollout.overlap=one_step needs rollout workers on their own devices; distributed.colocated=true "
            "shares the trainer's, so the two cannot run at once"
        )
    return problems


def _step_sizes_positive(cfg: ExperimentConfig) -> bool:
    """Whether the sizes a training step's geometry divides by are all positive."""
    rollout, actor = cfg.rollout, cfg.actor
    sizes = (
        rollout.n,
        rollout.rollout_batch_size,
        rollout.sample_batch_size,
        rollout.num_steps,
        actor.gradient_accumulation_steps,
        actor.num_inner_epochs,
        actor.micro_batch_size or 1,
    )
    return all(size > 0 for size in sizes)


def _batch_geometry_problems(cfg: ExperimentConfig) -> list[str]:
    """Samples per step must split evenly into rollout and replay micro-batches, and replay
    micro-batches evenly into optimizer steps (the `StepSizes` numbers; sizes already positive)."""
    problems: list[str] = []
    samples_per_step = cfg.rollout.rollout_batch_size * cfg.rollout.n
    rollout_micro_batch = cfg.rollout.sample_batch_size
    train_micro_batch = cfg.actor.micro_batch_size or rollout_micro_batch
    if samples_per_step % rollout_micro_batch:
        problems.append(
            f"rollout.sample_batch_size={rollout_micro_batch} must divide the {samples_per_step} samples "
            "per step (rollout.rollout_batch_size * rollout.n)"
        )
    if samples_per_step % train_micro_batch:
        if cfg.actor.micro_batch_size is not None:  # else it is the rollout micro-batch, reported above
            problems.append(
                f"actor.micro_batch_size={train_micro_batch} must divide the {samples_per_step} "
                "samples per step (rollout.rollout_batch_size * rollout.n)"
            )
        return problems
    micro_batches = samples_per_step // train_micro_batch * cfg.actor.num_inner_epochs
    if micro_batches % cfg.actor.gradient_accumulation_steps:
        problems.append(
            f"actor.gradient_accumulation_steps={cfg.actor.gradient_accumulation_steps} must divide the "
            f"{micro_batches} micro-batches per step ((rollout.rollout_batch_size * rollout.n / train "
            "micro-batch) * actor.num_inner_epochs), or the last gradients of a step would be dropped"
        )
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
