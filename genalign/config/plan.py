"""`RunPlan`: quantities derived from the config, computed once, logged, never written back."""

from __future__ import annotations

from dataclasses import dataclass

from genalign.config.schema import ExperimentConfig


@dataclass(frozen=True)
class RunPlan:
    prompts_per_step: int
    samples_per_prompt: int
    samples_per_step: int
    rollout_micro_batch: int
    """Samples per denoiser forward during rollout."""
    train_micro_batch: int
    """Samples per replay micro-batch (default: the rollout's, so batch geometry matches)."""
    micro_batches_per_step: int
    optimizer_steps_per_step: int
    num_train_timesteps: int
    uses_cfg: bool
    needs_reference: bool

    @classmethod
    def from_config(cls, cfg: ExperimentConfig) -> "RunPlan":
        rollout, actor = cfg.rollout, cfg.actor
        samples = rollout.rollout_batch_size * rollout.n
        train_micro = actor.micro_batch_size or rollout.sample_batch_size
        micro_batches = samples // train_micro if train_micro > 0 else 0
        accumulation = max(actor.gradient_accumulation_steps, 1)
        return cls(
            prompts_per_step=rollout.rollout_batch_size,
            samples_per_prompt=rollout.n,
            samples_per_step=samples,
            rollout_micro_batch=rollout.sample_batch_size,
            train_micro_batch=train_micro,
            micro_batches_per_step=micro_batches,
            optimizer_steps_per_step=micro_batches * actor.num_inner_epochs // accumulation,
            num_train_timesteps=int(rollout.num_steps * cfg.algorithm.timestep_fraction),
            uses_cfg=rollout.guidance_scale > 1.0,
            needs_reference=cfg.algorithm.kl_beta > 0,
        )

    def describe(self) -> str:
        return (f"{self.prompts_per_step} prompts x {self.samples_per_prompt} samples = {self.samples_per_step} "
                f"samples/step; rollout micro-batch {self.rollout_micro_batch}, train micro-batch "
                f"{self.train_micro_batch} -> {self.micro_batches_per_step} micro-batches, "
                f"{self.optimizer_steps_per_step} optimizer step(s)/step; {self.num_train_timesteps} trained "
                f"denoising steps; CFG {'on' if self.uses_cfg else 'off'}; reference "
                f"{'on' if self.needs_reference else 'off'}")
