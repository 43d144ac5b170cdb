"""One optimizer round over a step's trajectories: micro-batches, accumulation, clipping.

Where it fits: step 5 of the loop. Accumulation counts micro-batches x trained denoising
steps (as Flow-GRPO's accelerate counter does, ALGORITHMS §2.5): each backward carries
loss / (num_train_steps * gradient_accumulation_steps), and one optimizer step spans
`gradient_accumulation_steps` micro-batches.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import torch

from genalign.algorithms.base import Algorithm
from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.training.config import ActorConfig


@dataclass
class UpdateResult:
    optimizer_steps: int = 0
    grad_norms: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    stats: dict[str, list[torch.Tensor]] = field(default_factory=lambda: defaultdict(list))

    def metrics(self) -> dict[str, float]:
        out = {"optimizer_steps": float(self.optimizer_steps)}
        if self.losses:
            out["loss"] = sum(self.losses) / len(self.losses)
        if self.grad_norms:
            out["grad_norm"] = sum(self.grad_norms) / len(self.grad_norms)
            out["grad_norm_max"] = max(self.grad_norms)
        for name, values in self.stats.items():
            flat = torch.cat([v.flatten().float().cpu() for v in values])
            out[name] = flat.mean().item()
            if name == "ratio":
                out["ratio_min"], out["ratio_max"] = flat.min().item(), flat.max().item()
            if name == "log_prob_gap":
                out["log_prob_gap_max"] = flat.max().item()
        return out


def micro_batch_indices(num_samples: int, micro_batch_size: int, shuffle: bool,
                        generator: torch.Generator) -> list[torch.Tensor]:
    order = torch.randperm(num_samples, generator=generator) if shuffle else torch.arange(num_samples)  # [B]
    return list(order.split(micro_batch_size))


def run_update(
    policy: FlowPolicy,
    algorithm: Algorithm,
    optimizer: torch.optim.Optimizer,
    parameters: list[torch.nn.Parameter],
    batch: TrajectoryBatch,
    advantages: torch.Tensor,
    actor: ActorConfig,
    micro_batch_size: int,
    generator: torch.Generator,
    on_optimizer_step: Callable[[], None] = lambda: None,
) -> UpdateResult:
    """Replay `batch` through the policy and take the optimizer steps of one training step."""
    result = UpdateResult()
    accumulation = actor.gradient_accumulation_steps
    step_indices = algorithm.train_step_indices(batch)
    if not step_indices:
        raise ValueError("no trainable denoising steps: check rollout.noise_level and algorithm.timestep_fraction")
    scale = 1.0 / (len(step_indices) * accumulation)
    optimizer.zero_grad(set_to_none=True)
    for _ in range(actor.num_inner_epochs):
        micro_batches = micro_batch_indices(len(batch), micro_batch_size, actor.shuffle_samples, generator)
        for position, indices in enumerate(micro_batches):
            micro = batch.index(indices)
            micro_advantages = advantages[indices]  # [b]
            for step_index in step_indices:
                loss, stats = algorithm.compute_loss(policy, micro, micro_advantages, step_index)
                if not torch.isfinite(loss):
                    raise FloatingPointError(
                        f"non-finite loss {loss.item()} at denoising step {step_index}; prompts: {micro.prompts[:3]}")
                (loss * scale).backward()
                result.losses.append(loss.item())
                for name, value in stats.items():
                    result.stats[name].append(value)
            if (position + 1) % accumulation == 0:
                grad_norm = torch.nn.utils.clip_grad_norm_(parameters, actor.max_grad_norm)
                if not math.isfinite(grad_norm.item()):
                    raise FloatingPointError(f"non-finite gradient norm {grad_norm.item()} before optimizer step")
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                result.grad_norms.append(grad_norm.item())
                result.optimizer_steps += 1
                on_optimizer_step()
    return result
