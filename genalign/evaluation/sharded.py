"""Sample and score an evaluation's samples, sharded over ranks, gathered once to rank 0.

Where it fits: the one code path of every evaluation: the trainer's fixed evaluation
(evaluator.py) and `genalign eval` (training/model_eval.py) both call `evaluate_samples`. Each
rank takes a contiguous shard of the sample list (sizes differ by at most one), samples it
through the `sample` callable it is given (in-process, or a Ray rollout engine that shards it
again over its workers), scores it with every runtime, and rank 0 gathers the shards.

Every rank enters every collective whatever its shard: shards are padded to the longest one
with filler samples (a copy of the rank's last sample, or the first sample for an empty shard),
so every rank runs as many denoiser forwards (FSDP2 gathers weights inside each) and sends
tensors of one shape; fillers carry index -1 and are dropped on rank 0, which checks that every
sample index arrived exactly once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from genalign.data.sampler import PromptGroupBatch
from genalign.rewards.scores import RewardScores
from genalign.rollout.batch import TrajectoryBatch

GatherToMain = Callable[[torch.Tensor], "list[torch.Tensor] | None"]
"""Collective: each rank's tensor (one shape on every rank) -> every rank's, in rank order, on
rank 0; None on the other ranks."""


class ScoringRuntime(Protocol):
    def score(self, images: torch.Tensor, prompts: list[str], metadata: list[dict]) -> RewardScores: ...


@dataclass(frozen=True)
class Shard:
    """This process's place among the evaluating ranks."""

    rank: int = 0
    world_size: int = 1
    gather: GatherToMain | None = None
    """The collective (training/distributed.py `gather_to_main`); None for one process."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def shard_range(total: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, end) of rank's contiguous shard of `total` samples; the first total % world_size
    ranks get one more."""
    base, extra = divmod(total, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def padded_positions(total: int, shard: Shard) -> tuple[list[int], int]:
    """(positions this rank samples, how many of them are real): its shard padded with filler
    copies to ceil(total / world_size) samples."""
    if total < 1:
        raise ValueError("evaluation has no samples")
    start, end = shard_range(total, shard.rank, shard.world_size)
    real = list(range(start, end))
    length = math.ceil(total / shard.world_size)
    filler = real[-1] if real else 0
    return real + [filler] * (length - len(real)), len(real)


@dataclass
class EvalOutcome:
    samples: PromptGroupBatch
    """Every sample of the evaluation, in order (the same on every rank)."""
    images: torch.Tensor | None
    """uint8 media of every sample, in order [N, ...]: rank 0 only (None elsewhere)."""
    scores: dict[str, RewardScores] | None
    """Runtime name -> every sample's scores, in order: rank 0 only."""


Sampler = Callable[[PromptGroupBatch, "list[int]"], TrajectoryBatch]
"""(every sample, this rank's positions) -> the trajectories of those positions, in order (the
rollout engines' `generate(groups, spec, positions)`: prompts are encoded for the whole list,
so a shard is bitwise the same samples as in one process)."""


def evaluate_samples(
    sample: Sampler, samples: PromptGroupBatch, runtimes: dict[str, ScoringRuntime], shard: Shard = Shard()
) -> EvalOutcome:
    """Sample and score this rank's shard; rank 0 gets every sample's images and scores once."""
    positions, real = padded_positions(len(samples), shard)
    batch = sample(samples, positions)
    scores = {name: runtime.score(batch.images, batch.prompts, batch.metadata) for name, runtime in runtimes.items()}
    if shard.world_size == 1:
        return EvalOutcome(samples, batch.images, scores)
    if shard.gather is None:
        raise ValueError(f"evaluation on {shard.world_size} ranks needs a gather collective")
    index = torch.tensor(positions[:real] + [-1] * (len(positions) - real), dtype=torch.int64)  # [L]
    gathered_index = shard.gather(index)
    gathered_images = shard.gather(batch.images.contiguous())
    gathered = {
        name: {component: shard.gather(values.contiguous()) for component, values in s.components.items()}
        for name, s in scores.items()
    }  # the same order on every rank: runtimes and components come from one config
    if not shard.is_main:
        return EvalOutcome(samples, None, None)
    order = ordered_rows(torch.cat(gathered_index), len(samples))
    images = torch.cat(gathered_images)[order]
    merged = {
        name: RewardScores(
            {component: torch.cat(parts)[order] for component, parts in components.items()}, dict(scores[name].weights)
        )
        for name, components in gathered.items()
    }
    return EvalOutcome(samples, images, merged)


def ordered_rows(indices: torch.Tensor, total: int) -> torch.Tensor:
    """Rows of the gathered tensors holding samples 0..total-1, in order; fillers (-1) dropped.
    Every sample must arrive exactly once: a lost or doubled one is an error, never a silent
    change of the benchmark."""
    rows = (indices >= 0).nonzero().flatten()  # [N']
    kept = indices[rows]
    if kept.numel() != total or not torch.equal(kept.sort().values, torch.arange(total)):
        counts = torch.bincount(kept.clamp(min=0), minlength=total)
        raise RuntimeError(
            f"evaluation gather: {int((counts == 0).sum())} sample(s) missing and "
            f"{int((counts > 1).sum())} doubled out of {total}"
        )
    return rows[kept.argsort()]
