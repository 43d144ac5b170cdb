"""One optimizer round over a step's trajectories: micro-batches, accumulation, clipping.

Where it fits: step 5 of the loop. Accumulation counts micro-batches x trained denoising
steps (as Flow-GRPO's accelerate counter does, docs/algorithms.md §2.5): one optimizer step spans
`gradient_accumulation_steps` micro-batches (this rank's share under torchrun), counted with
one counter across inner epochs; a shorter remainder at the round's end is a step of its own.
The loss of an optimizer step is the mean over its trained units, per rank then over ranks
or over all ranks at once (`actor.loss_normalisation`, `unit_weight`).

Under torchrun every rank runs the same `MicroBatchSchedule` — agreed with one small all-gather
of each rank's unit count, micro-batch size and positions per unit (which must be equal: a
mismatch is a one-line error naming the algorithm, before any forward) — so every rank enters
every collective whatever its data: a rank with no trainable sample, no DPO pair or fewer
micro-batches replays a filler unit with weight 0. Gradients are reduced once per optimizer
step (`distributed.gradient_sync`); the round's logged columns are reduced over ranks after
it (`job_metrics`).
The loop is the same for every algorithm: which units train (`Algorithm.trained_units`),
at which positions, with which loss and which logged extremes is the algorithm's to say.

Precision: trained weights are float32 masters; the loss is scaled by a `GradScaler` (a
pass-through except for float16 compute; the sharded one under torchrun, so every rank agrees
on skipping a step), so the optimizer always sees float32 gradients.
The loop avoids host syncs between backward passes: losses stay on the device and are
checked for finiteness at each optimizer step, where the gradient norm is read anyway.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch

from genalign.algorithms.base import Algorithm, TrainingUnits
from genalign.config.errors import UserError
from genalign.models.base import Policy
from genalign.training import distributed, job_metrics
from genalign.training.config import LOSS_NORMALISATIONS, ActorConfig
from genalign.training.ema import EMA


@dataclass
class UpdateContext:
    """What every optimizer round of a run shares; `run_update` takes it with the round's data."""

    policy: Policy
    """Flow or token: the algorithm's hooks take it (`Algorithm[PolicyT]` pairs them)."""
    algorithm: Algorithm[Any]
    optimizer: torch.optim.Optimizer
    parameters: list[torch.nn.Parameter]
    """The trained tensors (their gradient norm is clipped)."""
    actor: ActorConfig
    """With this rank's share of actor.gradient_accumulation_steps under torchrun."""
    scaler: torch.amp.GradScaler | None = None
    """The loss scaler (None: a disabled pass-through)."""
    ranks: distributed.RankInfo = field(default_factory=distributed.RankInfo)
    module: torch.nn.Module | None = None
    """The wrapped denoiser: gradients sync only on the backward that ends an optimizer step."""
    ema: EMA | None = None
    """Told of every optimizer step and micro-batch (`on_optimizer_step`, `on_micro_batch`)."""


@dataclass
class UpdateResult:
    """This rank's record of one optimizer round; `job_metrics.step_columns` makes the job's
    metrics columns of it (`metrics()`: this rank's alone, the columns of a one-process run)."""

    optimizer_steps: int = 0
    skipped_steps: int = 0
    """Optimizer steps the fp16 loss scaler skipped (inf/nan gradients; it then lowers the scale)."""
    trained_samples: int = 0
    total_samples: int = 0
    grad_scale: float | None = None
    grad_norms: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    """Each real micro-batch's mean loss at each trained position."""
    loss_units: list[int] = field(default_factory=list)
    """The units each entry of `losses` averages (its weight in the logged loss)."""
    stats: dict[str, list[torch.Tensor]] = field(default_factory=lambda: defaultdict(list))
    stat_names: dict[str, None] = field(default_factory=dict)
    """Every statistic `compute_loss` returned, filler replays included, in first-seen order."""
    stat_extremes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The algorithm's `stat_extremes`: "ratio" -> ("min", "max") adds ratio_min and ratio_max."""

    def metrics(self) -> dict[str, float]:
        return job_metrics.update_columns(job_metrics.update_totals(self), self)


def micro_batch_indices(
    num_samples: int, micro_batch_size: int, shuffle: bool, generator: torch.Generator
) -> list[torch.Tensor]:
    order = torch.randperm(num_samples, generator=generator) if shuffle else torch.arange(num_samples)  # [B]
    return [part for part in order.split(micro_batch_size) if len(part)]  # none for no samples


@dataclass(frozen=True)
class MicroBatchSchedule:
    """One optimizer round as every rank runs it: the same number of micro-batch slots per
    inner epoch and the same optimizer-step boundaries everywhere, so every rank enters every
    collective (gradient reduction, FSDP2's gathers) whatever its data. A rank with fewer real
    micro-batches than another fills its last slots with a zero-weight replay."""

    slots: int
    """Micro-batch slots per inner epoch on every rank (the largest rank's count)."""
    epochs: int
    accumulation: int
    step_units: tuple[int, ...]
    """Trained units in each optimizer step, summed over ranks (`global_unit_mean`'s normaliser)."""
    rank_step_units: tuple[tuple[int, ...], ...]
    """Per rank, its own trained units in each optimizer step (`rank_mean`'s normaliser)."""

    def step_of(self, slot: int) -> int:
        return slot // self.accumulation

    def closes_step(self, slot: int) -> bool:
        """The slot's backward ends an optimizer step: every `accumulation` slots, and the
        round's last slot (a shorter last step, as accelerate's end-of-data sync)."""
        return (slot + 1) % self.accumulation == 0 or slot + 1 == self.slots * self.epochs

    @property
    def total_units(self) -> int:
        return sum(self.step_units)


def micro_batch_sizes(num_units: int, micro_batch_size: int) -> list[int]:
    """Sizes of `micro_batch_indices`' parts: full micro-batches, then the remainder."""
    full, rest = divmod(num_units, micro_batch_size)
    return [micro_batch_size] * full + ([rest] if rest else [])


def micro_batch_schedule(sizes_by_rank: list[list[int]], epochs: int, accumulation: int) -> MicroBatchSchedule:
    """The shared schedule from every rank's real micro-batch sizes (per inner epoch)."""
    slots = max(len(sizes) for sizes in sizes_by_rank)
    num_slots = slots * epochs
    rank_units = [[0] * math.ceil(num_slots / accumulation) for _ in sizes_by_rank]
    for slot in range(num_slots):
        for units, sizes in zip(rank_units, sizes_by_rank):
            units[slot // accumulation] += sizes[slot % slots] if slot % slots < len(sizes) else 0
    step_units = tuple(sum(column) for column in zip(*rank_units))
    return MicroBatchSchedule(slots, epochs, accumulation, step_units, tuple(tuple(units) for units in rank_units))


def unit_weight(
    units: int, positions: int, schedule: MicroBatchSchedule, slot: int, ranks: distributed.RankInfo, normalisation: str
) -> float:
    """The factor on a backward's micro-batch mean loss (`units` units, each averaged over
    `positions` trained positions); DDP / FSDP2 then divide the summed gradients by the world.

    `rank_mean` (Flow-GRPO under accelerate DDP): each rank's gradient is the mean over its
    own units in the step, averaged over ranks: b / (K · n_rank). `global_unit_mean`: the mean
    over the step's units on all ranks, b · world / (K · N) (N from the agreed schedule). Both
    are exact rationals, so equal micro-batches give 1 / (K · accumulation) bit for bit."""
    step = schedule.step_of(slot)
    if normalisation == "global_unit_mean":
        return units * ranks.world_size / (positions * schedule.step_units[step])
    if normalisation == "rank_mean":
        return units / (positions * schedule.rank_step_units[ranks.rank][step])
    raise ValueError(f"actor.loss_normalisation={normalisation!r}: choose one of {', '.join(LOSS_NORMALISATIONS)}")


class PositionMismatch(UserError, RuntimeError):
    """Ranks train different numbers of positions per unit: their forwards and backwards, which
    the ranks take together, would not pair up (a hang until the timeout, or a size mismatch)."""


def check_positions(counts_by_rank: list[int], algorithm: Algorithm[Any]) -> None:
    """Every rank's number of positions per unit (`train_step_indices`) must be the same."""
    cls = type(algorithm)
    for rank, count in enumerate(counts_by_rank):
        if count != counts_by_rank[0]:
            raise PositionMismatch(
                f"algorithm {cls.__module__}:{cls.__qualname__}: train_step_indices gives {count} positions per unit "
                f"on rank {rank} but {counts_by_rank[0]} on rank 0; every rank must train as many positions per unit "
                "(each is a forward and a backward the ranks take together): derive them from the config, not from a "
                "rank's data"
            )
    if not counts_by_rank[0]:
        raise ValueError("no trainable denoising steps: check rollout.noise_level and algorithm.timestep_fraction")


def agreed_positions(algorithm: Algorithm[Any], batch: TrainingUnits, ranks: distributed.RankInfo) -> list[int]:
    """`algorithm.train_step_indices(batch)` once every rank is known to train as many (one
    small all-gather): for the parity preflight, which replays them before the round agrees."""
    positions = algorithm.train_step_indices(batch)
    check_positions(distributed.all_gather_cat(torch.tensor([len(positions)]), ranks).tolist(), algorithm)
    return positions


def agree_round(
    num_units: int,
    micro_batch_size: int,
    num_positions: int,
    epochs: int,
    accumulation: int,
    ranks: distributed.RankInfo,
    algorithm: Algorithm[Any],
) -> MicroBatchSchedule:
    """Every rank's (units, micro-batch size, positions per unit) in one small all-gather, then
    the shared schedule; ranks that disagree on positions per unit stop here, before any forward."""
    mine = torch.tensor([num_units, micro_batch_size, num_positions], dtype=torch.int64)  # [3]
    everyone = distributed.all_gather_cat(mine[None], ranks).tolist()  # [world, 3]
    check_positions([positions for _, _, positions in everyone], algorithm)
    return micro_batch_schedule([micro_batch_sizes(n, b) for n, b, _ in everyone], epochs, accumulation)


def run_update(
    ctx: UpdateContext, batch, advantages: torch.Tensor, micro_batch_size: int, generator: torch.Generator, filler=None
) -> UpdateResult:
    """Replay `batch` (this rank's training units, advantages [U]) through the policy and take
    the optimizer steps of one training step.

    Gradient of one optimizer step: each unit's loss averaged over the trained positions,
    then averaged per `actor.loss_normalisation` (`unit_weight`): over each rank's own units
    and then over ranks (`rank_mean`, Flow-GRPO's), or over the step's units on all ranks
    (`global_unit_mean`). On one rank, or with equal micro-batches everywhere, both are
    1 / (T · gradient_accumulation_steps) per micro-batch, Flow-GRPO's normalisation.
    `filler` is one unit a rank with no units of its own replays with weight 0 (online DPO
    without a pair)."""
    policy, algorithm, actor, ranks = ctx.policy, ctx.algorithm, ctx.actor, ctx.ranks
    scaler = ctx.scaler or torch.amp.GradScaler("cpu", enabled=False)  # disabled: a pass-through anywhere
    result = UpdateResult(total_samples=len(batch), stat_extremes=dict(algorithm.stat_extremes))
    accumulation = actor.gradient_accumulation_steps
    step_indices = algorithm.train_step_indices(batch)
    replay_chunk = micro_batch_size  # the same on every rank: prepare_update's forwards must match
    samples, micro_batch_size = algorithm.trained_units(advantages, micro_batch_size, generator)  # [K]
    schedule = agree_round(
        len(samples), micro_batch_size, len(step_indices), actor.num_inner_epochs, accumulation, ranks, algorithm
    )
    if schedule.total_units == 0:  # no rank has a trainable unit (constant rewards, no DPO pair): no step
        return result
    result.trained_samples = len(samples)
    batch = algorithm.prepare_update(policy, batch, step_indices, replay_chunk)
    if len(batch):
        filler = batch.index(torch.tensor([0]))
    elif filler is None:
        raise ValueError("a rank with no training unit needs a filler unit to take part in the step's collectives")
    optimizer = ctx.optimizer
    optimizer.zero_grad(set_to_none=True)
    pending: list[tuple[torch.Tensor, int, list[str]]] = []  # (loss, step index, prompts) since the last check
    slot = 0
    for _ in range(actor.num_inner_epochs):
        parts = micro_batch_indices(len(samples), micro_batch_size, actor.shuffle_samples, generator)
        for index in range(schedule.slots):
            real = index < len(parts)
            if real:
                positions = samples[parts[index]]  # [b] positions in the batch
                micro = batch.index(positions).to(policy.device)
                micro_advantages = advantages[positions].to(policy.device)  # [b]
                weight = unit_weight(len(positions), len(step_indices), schedule, slot, ranks, actor.loss_normalisation)
            else:  # zero contribution: this rank has fewer micro-batches than another
                micro = filler.to(policy.device)
                micro_advantages = torch.zeros(len(filler), device=policy.device)  # [1]
                weight = 0.0
            closes = schedule.closes_step(slot)
            for step_index in step_indices:
                sync = closes and step_index == step_indices[-1]  # one gradient reduction per optimizer step
                with distributed.gradient_sync(ctx.module, sync):
                    loss, stats = algorithm.compute_loss(policy, micro, micro_advantages, step_index)
                    scaler.scale(loss * weight).backward()
                result.stat_names.update(dict.fromkeys(stats))  # a filler's too: every rank names them
                if real:
                    pending.append((loss.detach(), step_index, micro.prompts))
                    for name, value in stats.items():
                        result.stats[name].append(value)
            if closes:
                result.losses += _checked_losses(pending)
                result.loss_units += [len(prompts) for _, _, prompts in pending]
                pending = []
                _optimizer_step(optimizer, scaler, ctx.parameters, actor.max_grad_norm, result)
                if ctx.ema is not None:
                    ctx.ema.on_optimizer_step()
            if ctx.ema is not None:
                ctx.ema.on_micro_batch()
            slot += 1
    if scaler.is_enabled():
        result.grad_scale = float(scaler.get_scale())
    return result


def _checked_losses(pending: list[tuple[torch.Tensor, int, list[str]]]) -> list[float]:
    """The pending losses as floats (one host sync); a non-finite one is an error naming its
    trained position (an entry of the algorithm's `train_step_indices`: a denoising step, or
    under per-sample windows a position in each sample's window) and prompts."""
    if not pending:  # a step this rank only filled
        return []
    values = torch.stack([loss for loss, _, _ in pending]).float().cpu().tolist()
    for value, (_, step_index, prompts) in zip(values, pending):
        if not math.isfinite(value):
            raise FloatingPointError(
                f"non-finite loss {value} at trained position {step_index}; prompts: {prompts[:3]}"
            )
    return values


def _optimizer_step(
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    parameters: list[torch.nn.Parameter],
    max_grad_norm: float,
    result: UpdateResult,
) -> None:
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
