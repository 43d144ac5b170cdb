"""`StepSizes`: the sizes of one training step derived from the config (prompts, samples,
micro-batches, optimizer steps, trained positions; whether CFG and a reference forward run),
computed once, logged, never written back.

Where it fits: the trainer builds it right after `load_config` and logs `describe()`; the
collector, update round and reference pass read their sizes from it instead of re-deriving
them (and instead of anyone writing a derived value back into the config, which would give
a key two meanings). `validate()` uses the same numbers to check divisibility.
"""

from __future__ import annotations

from dataclasses import dataclass

from genalign.algorithms.registry import ALGORITHMS, algorithm_class
from genalign.config.errors import ConfigError
from genalign.config.registry import import_problem, is_dotted_path
from genalign.config.schema import ExperimentConfig
from genalign.preflight.values import family_kind


@dataclass(frozen=True)
class StepSizes:
    prompts_per_step: int
    """Prompt groups per training step (rollout.rollout_batch_size)."""
    samples_per_prompt: int
    """Group size G (rollout.n)."""
    samples_per_step: int
    """prompts_per_step * samples_per_prompt: trajectories collected and trained per step."""
    rollout_micro_batch: int
    """Samples per denoiser forward during rollout (rollout.sample_batch_size)."""
    train_micro_batch: int
    """Samples per replay micro-batch (actor.micro_batch_size, default the rollout's, so batch
    geometry matches and replayed log-probs are bitwise equal in fp32)."""
    micro_batches_per_step: int
    """samples_per_step // train_micro_batch (validate() requires exact division)."""
    optimizer_steps_per_step: int
    """micro_batches_per_step * actor.num_inner_epochs // actor.gradient_accumulation_steps."""
    num_train_timesteps: int
    """Trained denoising steps per trajectory: int(rollout.num_steps * algorithm.timestep_fraction),
    at most the stochastic steps (the SDE window's size; the final step excluded when it is an
    ODE step or with timestep_selection=random). A token family trains one position per
    trajectory, the whole image-token sequence (`TokenTrajectoryBatch`); an algorithm may
    declare its own count (`train_positions`: AWM's algorithm.awm.train_timesteps)."""
    uses_cfg: bool
    """rollout.guidance_scale > 1: rollout and replay run both CFG branches."""
    needs_reference: bool
    """The algorithm evaluates a reference policy (its `reference_kind` is not "none": a KL term
    at algorithm.kl_beta > 0, or DPO's own reference)."""

    @classmethod
    def from_config(cls, cfg: ExperimentConfig) -> "StepSizes":
        """The sizes of a validated config.

        Raises `ConfigError` when a number the sizes divide by is not positive or when no
        denoising step would be trained; `validate()` reports those (and the divisibility
        problems this floor-divides past) with the fix, so `load_config` never gets here with them.
        """
        rollout, actor = cfg.rollout, cfg.actor
        tokens = family_kind(cfg) == "token"
        samples_per_step = rollout.rollout_batch_size * rollout.n
        train_micro_batch = rollout.sample_batch_size if actor.micro_batch_size is None else actor.micro_batch_size
        num_train_timesteps = int(rollout.num_steps * cfg.algorithm.timestep_fraction)
        problems = []
        if train_micro_batch <= 0:
            problems.append(
                f"train micro-batch (actor.micro_batch_size or rollout.sample_batch_size) must be "
                f"positive, got {train_micro_batch}"
            )
        if actor.gradient_accumulation_steps <= 0:
            problems.append(
                f"actor.gradient_accumulation_steps must be positive, got {actor.gradient_accumulation_steps}"
            )
        if num_train_timesteps < 1 and counts_positions_by_fraction(cfg):
            problems.append(num_train_timesteps_problem(rollout.num_steps, cfg.algorithm.timestep_fraction))
        if problems:
            raise ConfigError(problems)
        micro_batches_per_step = samples_per_step // train_micro_batch
        return cls(
            prompts_per_step=rollout.rollout_batch_size,
            samples_per_prompt=rollout.n,
            samples_per_step=samples_per_step,
            rollout_micro_batch=rollout.sample_batch_size,
            train_micro_batch=train_micro_batch,
            micro_batches_per_step=micro_batches_per_step,
            optimizer_steps_per_step=(
                micro_batches_per_step * actor.num_inner_epochs // actor.gradient_accumulation_steps
            ),
            num_train_timesteps=_train_positions(cfg, tokens, num_train_timesteps),
            uses_cfg=rollout.guidance_scale > 1.0,
            needs_reference=algorithm_class(cfg).reference_kind(cfg.algorithm) != "none",
        )

    def describe(self) -> str:
        """One log line with every derived number."""
        return (
            f"{self.prompts_per_step} prompts x {self.samples_per_prompt} samples = {self.samples_per_step} "
            f"samples/step; rollout micro-batch {self.rollout_micro_batch}, train micro-batch "
            f"{self.train_micro_batch} -> {self.micro_batches_per_step} micro-batches, "
            f"{self.optimizer_steps_per_step} optimizer step(s)/step; {self.num_train_timesteps} trained "
            f"position(s) per trajectory; CFG {'on' if self.uses_cfg else 'off'}; reference "
            f"{'on' if self.needs_reference else 'off'}"
        )


def per_rank_accumulation(gradient_accumulation_steps: int, world_size: int) -> int:
    """Micro-batches per optimizer step on each of `world_size` ranks: together the ranks
    cover the 1-process run's `gradient_accumulation_steps` micro-batches."""
    if gradient_accumulation_steps % world_size:
        fit = -(-gradient_accumulation_steps // world_size) * world_size
        raise ConfigError(
            [
                f"actor.gradient_accumulation_steps={gradient_accumulation_steps} must be a multiple of "
                f"the {world_size} ranks (WORLD_SIZE, --nproc-per-node): the ranks share each "
                f"optimizer step's micro-batches, so it sees the 1-process global batch; set it to {fit} "
                "(or another multiple)"
            ]
        )
    return gradient_accumulation_steps // world_size


def counts_positions_by_fraction(cfg: ExperimentConfig) -> bool:
    """algorithm.timestep_fraction decides the trained positions: the algorithm declares no
    count of its own (`train_positions`), or its name does not resolve (its own problem)."""
    name, allowed = cfg.algorithm.name, cfg.algorithm.allow_import
    if ALGORITHMS.check(name, allowed) is not None:
        return True
    if is_dotted_path(name) and name not in ALGORITHMS and import_problem("algorithm.name", name):
        return True
    return algorithm_class(cfg).train_positions(cfg.algorithm) is None


def _train_positions(cfg: ExperimentConfig, tokens: bool, from_fraction: int) -> int:
    """Positions per trajectory: the algorithm's own count (`train_positions`, DGPO's σ's), one
    for a token family, else the stored steps the fraction selects, at most the trainable ones."""
    declared = algorithm_class(cfg).train_positions(cfg.algorithm)
    if declared is not None:
        return int(declared)
    return 1 if tokens else min(from_fraction, _trainable_steps(cfg))


def _trainable_steps(cfg: ExperimentConfig) -> int:
    """How many steps can be trained: the SDE window's size, else every step less the final one
    when the rollout makes it an ODE step or the selection never picks it."""
    rollout = cfg.rollout
    if rollout.sde_window.size > 0:
        return rollout.sde_window.size
    drops_final = rollout.ode_final_step or cfg.algorithm.timestep_selection == "random"
    return rollout.num_steps - 1 if drops_final else rollout.num_steps


def num_train_timesteps_problem(num_steps: int, timestep_fraction: float) -> str:
    return (
        f"algorithm.timestep_fraction={timestep_fraction} with rollout.num_steps={num_steps} trains "
        f"int({num_steps} * {timestep_fraction}) = 0 denoising steps; raise either so that at least one "
        "step is trained"
    )
