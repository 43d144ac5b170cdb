"""Whole-config checks across blocks: every problem listed, before any model loads."""

from __future__ import annotations

import difflib

from genalign.config.plan import RunPlan
from genalign.config.schema import ExperimentConfig

CHOICES = {
    "reward.aggregation": ("weighted_sum", "advantage_sum"),
    "reward.runtime": ("local", "ray"),
    "rollout.engine": ("local", "ray"),
    "rollout.kernel": ("flow_sde",),
    "model.train_mode": ("lora", "full"),
    "model.dtype": ("float32", "float16", "bfloat16"),
    "algorithm.kl_type": ("latent_mean", "velocity"),
    "algorithm.advantage.std": ("population", "unbiased"),
    "distributed.training.strategy": ("none", "ddp", "fsdp2"),
    "distributed.training.backend": ("auto", "gloo", "nccl"),
}


def _get(cfg: ExperimentConfig, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def validate(cfg: ExperimentConfig) -> list[str]:
    from genalign.algorithms.registry import ALGORITHMS
    from genalign.models.registry import MODEL_FAMILIES
    from genalign.rewards.registry import REWARDS

    problems: list[str] = []
    for key, choices in CHOICES.items():
        value = _get(cfg, key)
        if value not in choices:
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"{key}={value!r} is not supported{hint} Choose one of: {', '.join(choices)}")

    for message in (MODEL_FAMILIES.check(cfg.model.family), ALGORITHMS.check(cfg.algorithm.name)):
        if message:
            problems.append(message)
    if not cfg.reward.components:
        problems.append("reward.components is empty: name at least one reward, e.g. reward.components.ocr=1.0")
    for name in cfg.reward.components:
        message = REWARDS.check(name)
        if message:
            problems.append(message)
    if cfg.reward.components and all(w == 0 for w in cfg.reward.components.values()):
        problems.append("reward.components: every weight is 0, so nothing would be scored")
    for name in cfg.eval.gold_rewards:
        message = REWARDS.check(name)
        if message:
            problems.append(message.replace("reward.components", "eval.gold_rewards"))
    for name in cfg.reward.kwargs:
        if name not in cfg.reward.components and name not in cfg.eval.gold_rewards:
            close = difflib.get_close_matches(name, list(cfg.reward.components) + list(cfg.eval.gold_rewards), n=1)
            hint = f"; did you mean reward.kwargs.{close[0]}?" if close else ""
            problems.append(f"reward.kwargs.{name}: no reward named {name!r} in reward.components or "
                            f"eval.gold_rewards{hint}")

    positive = {"rollout.n": cfg.rollout.n, "rollout.rollout_batch_size": cfg.rollout.rollout_batch_size,
                "rollout.sample_batch_size": cfg.rollout.sample_batch_size, "rollout.num_steps": cfg.rollout.num_steps,
                "rollout.height": cfg.rollout.height, "rollout.width": cfg.rollout.width,
                "actor.gradient_accumulation_steps": cfg.actor.gradient_accumulation_steps,
                "actor.num_inner_epochs": cfg.actor.num_inner_epochs, "trainer.num_steps": cfg.trainer.num_steps,
                "eval.num_steps": cfg.eval.num_steps, "eval.max_prompts": cfg.eval.max_prompts,
                "eval.batch_size": cfg.eval.batch_size, "reward.batch_size": cfg.reward.batch_size,
                "model.lora.rank": cfg.model.lora.rank, "actor.ema.update_every": cfg.actor.ema.update_every}
    if cfg.actor.micro_batch_size is not None:
        positive["actor.micro_batch_size"] = cfg.actor.micro_batch_size
    bad_sizes = [key for key, value in positive.items() if value <= 0]
    problems += [f"{key} must be positive, got {positive[key]}" for key in bad_sizes]
    if cfg.rollout.noise_level < 0:
        problems.append(f"rollout.noise_level must be >= 0, got {cfg.rollout.noise_level}")
    if cfg.algorithm.clip_range <= 0:
        problems.append(f"algorithm.clip_range must be > 0, got {cfg.algorithm.clip_range}")
    if cfg.algorithm.kl_beta < 0:
        problems.append(f"algorithm.kl_beta must be >= 0, got {cfg.algorithm.kl_beta}")
    if not 0 < cfg.algorithm.timestep_fraction <= 1:
        problems.append(f"algorithm.timestep_fraction must be in (0, 1], got {cfg.algorithm.timestep_fraction}")
    if cfg.rollout.guidance_scale > 1 and not cfg.algorithm.train_cfg:
        problems.append("algorithm.train_cfg=false with rollout.guidance_scale>1: replay must recompute CFG exactly "
                        "as the rollout did; set algorithm.train_cfg=true or rollout.guidance_scale=1.0")
    if cfg.rollout.noise_level == 0:
        problems.append("rollout.noise_level=0 makes every step deterministic: Flow-GRPO has no log-probs to train; "
                        "use the Flow-GRPO value 0.7")
    if bad_sizes:
        return problems

    plan = RunPlan.from_config(cfg)
    if plan.samples_per_step % plan.rollout_micro_batch:
        problems.append(f"rollout.sample_batch_size={plan.rollout_micro_batch} must divide the {plan.samples_per_step} "
                        "samples per step (rollout.rollout_batch_size * rollout.n)")
    if plan.samples_per_step % plan.train_micro_batch:
        problems.append(f"actor.micro_batch_size={plan.train_micro_batch} must divide the {plan.samples_per_step} "
                        "samples per step")
    elif (plan.micro_batches_per_step * cfg.actor.num_inner_epochs) % cfg.actor.gradient_accumulation_steps:
        problems.append(f"actor.gradient_accumulation_steps={cfg.actor.gradient_accumulation_steps} must divide the "
                        f"{plan.micro_batches_per_step * cfg.actor.num_inner_epochs} micro-batches per step, or the "
                        "last gradients of a step would be dropped")
    if plan.num_train_timesteps < 1:
        problems.append(f"algorithm.timestep_fraction={cfg.algorithm.timestep_fraction} trains "
                        f"int({cfg.rollout.num_steps} * fraction) = 0 denoising steps")
    return problems
