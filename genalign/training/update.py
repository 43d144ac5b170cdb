"""One optimizer round over a step's trajectories: micro-batches, accumulation, clipping.

Where it fits: step 5 of the loop. Accumulation counts micro-batches x trained denoising
steps (as Flow-GRPO's accelerate counter does, docs/algorithms.md §2.5): each backward carries
loss / (num_train_steps * gradient_accumulation_steps), and one optimizer step spans
`gradient_accumulation_steps` micro-batches, counted with one counter across inner epochs.

Precision: trained weights are float32 masters; the loss is scaled by a `GradScaler` (a
pass-through except for float16 compute), so the optimizer always sees float32 gradients.
The loop avoids host syncs between backward passes: losses stay on the device and are
checked for finiteness at each optimizer step, where the gradient norm is read anyway.
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
    skipped_steps: int = 0
    """Optimizer steps the fp16 loss scaler skipped (inf/nan gradients; it then lowers the scale)."""
    trained_samples: int = 0
    total_samples: int = 0
    grad_scale: float | None = None
    grad_norms: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    stats: dict[str, list[torch.Tensor]] = field(default_factory=lambda: defaultdict(list))

    def metrics(self) -> dict[str, float]:
        out = {"optimizer_steps": float(self.optimizer_steps),
               "trained_fraction": self.trained_samples / max(self.total_samples, 1)}
        if self.grad_scale is not None:
            out["grad_scale"] = self.grad_scale
            out["skipped_steps"] = float(self.skipped_steps)
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
            if name == "log_prob_drift":
                out["log_prob_drift_max"] = flat.max().item()
        return out


def micro_batch_indices(num_samples: int, micro_batch_size: int, shuffle: bool,
                        generator: torch.Generator) -> list[torch.Tensor]:
    order = torch.randperm(num_samples, generator=generator) if shuffle else torch.arange(num_samples)  # [B]
    return list(order.split(micro_batch_size))


def trained_sample_indices(advantages: torch.Tensor, num_micro_batches: int,
                           generator: torch.Generator) -> torch.Tensor:
    """Flow-GRPO's filter: the samples whose advantage is not exactly 0, plus randomly chosen
    zero-advantage ones until the count divides by `num_micro_batches` (the number of replay
    micro-batches stays, their size shrinks). Sorted positions [K]; empty when every
    advantage is 0. `advantages` [B] (one per sample: the same at every denoising step)."""
    keep = advantages.cpu() != 0  # [B] bool
    kept = int(keep.sum())
    if kept and kept % num_micro_batches:
        dropped = torch.nonzero(~keep).flatten()  # [B - K]
        missing = num_micro_batches - kept % num_micro_batches
        if len(dropped) >= missing:
            keep[dropped[torch.randperm(len(dropped), generator=generator)[:missing]]] = True
    return torch.nonzero(keep).flatten()  # [K']


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
    scaler: torch.amp.GradScaler | None = None,
    drop_zero_advantage: bool = False,
    on_optimizer_step: Callable[[], None] = lambda: None,
    on_micro_batch: Callable[[], None] = lambda: None,
) -> UpdateResult:
    """Replay `batch` through the policy and take the optimizer steps of one training step."""
    scaler = scaler or torch.amp.GradScaler("cpu", enabled=False)  # disabled: a pass-through anywhere
    result = UpdateResult(total_samples=len(batch))
    if len(batch) == 0:  # e.g. online DPO when every group scored evenly: no pair, nothing to learn
        return result
    accumulation = actor.gradient_accumulation_steps
    step_indices = algorithm.train_step_indices(batch)
    if not step_indices:
        raise ValueError("no trainable denoising steps: check rollout.noise_level and algorithm.timestep_fraction")
    scale = 1.0 / (len(step_indices) * accumulation)
    num_micro_batches = math.ceil(len(batch) / micro_batch_size)
    samples = torch.arange(len(batch))  # [B]
    if drop_zero_advantage:
        samples = trained_sample_indices(advantages, num_micro_batches, generator)  # [K]
        if len(samples) == 0:  # every group had a constant reward: nothing to learn this step
            return result
        micro_batch_size = len(samples) // num_micro_batches
    result.trained_samples = len(samples)
    batch = algorithm.prepare_update(policy, batch, step_indices, micro_batch_size)
    optimizer.zero_grad(set_to_none=True)
    pending: list[tuple[torch.Tensor, int, list[str]]] = []  # (loss, step index, prompts) since the last check
    micro_batches_done = 0
    for _ in range(actor.num_inner_epochs):
        for indices in micro_batch_indices(len(samples), micro_batch_size, actor.shuffle_samples, generator):
            positions = samples[indices]  # [b] positions in the batch
            micro = batch.index(positions).to(policy.device)
            micro_advantages = advantages[positions].to(policy.device)  # [b]
            for step_index in step_indices:
                loss, stats = algorithm.compute_loss(policy, micro, micro_advantages, step_index)
                scaler.scale(loss * scale).backward()
                pending.append((loss.detach(), step_index, micro.prompts))
                for name, value in stats.items():
                    result.stats[name].append(value)
            micro_batches_done += 1
            if micro_batches_done % accumulation == 0:
                result.losses += _checked_losses(pending)
                pending = []
                _optimizer_step(optimizer, scaler, parameters, actor.max_grad_norm, result)
                on_optimizer_step()
            on_micro_batch()
    if scaler.is_enabled():
        result.grad_scale = float(scaler.get_scale())
    return result


def _checked_losses(pending: list[tuple[torch.Tensor, int, list[str]]]) -> list[float]:
    """The pending losses as floats (one host sync); a non-finite one is an error naming its
    denoising step and prompts."""
    values = torch.stack([loss for loss, _, _ in pending]).float().cpu().tolist()
    for value, (_, step_index, prompts) in zip(values, pending):
        if not math.isfinite(value):
            raise FloatingPointError(f"non-finite loss {value} at denoising step {step_index}; prompts: {prompts[:3]}")
    return values


def _optimizer_step(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                    parameters: list[torch.nn.Parameter], max_grad_norm: float, result: UpdateResult) -> None:
    """Unscale, clip, step, zero. With loss scaling a non-finite gradient skips the step and
    lowers the scale (torch.amp's contract); without it, it is an error."""
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm).item()
    finite = math.isfinite(grad_norm)
    if not finite and not scaler.is_enabled():
        raise FloatingPointError(f"non-finite gradient norm {grad_norm} before optimizer step")
    scaler.step(optimizer)  # skips optimizer.step() when the unscaled gradients are not finite
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    result.optimizer_steps += 1
    if finite:
        result.grad_norms.append(grad_norm)
    else:
        result.skipped_steps += 1
