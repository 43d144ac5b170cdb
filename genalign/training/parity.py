"""Rollout/replay parity: replay stored steps with unchanged weights, compare log-probs.

With fp32 and the rollout's batch geometry the gap is exactly 0 and every importance ratio
is exactly 1 (docs/algorithms.md §2.10), for every kernel and SDE window: the replay
goes through the same `algorithms.replay` path as the loss. A non-zero gap means the replay
is not scoring the policy that sampled: a different code path, dtype, batch shape or guidance.
"""

from __future__ import annotations

from genalign.algorithms.replay import replay_log_probs
from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.training import distributed


def replay_parity(policy: FlowPolicy, batch: TrajectoryBatch, step_indices: list[int],
                  chunk_size: int, replay=replay_log_probs,
                  ranks: distributed.RankInfo = distributed.RankInfo()) -> dict[int, float]:
    """Max |log_prob_replay - log_prob_rollout| per denoising step, over all samples (and, for a
    token trajectory, all tokens of its one position) of every rank: under torchrun each rank
    replays its own trajectories (its forwards are collective under FSDP2, so every rank calls
    this with as many `step_indices`, `update.agreed_positions`) and the gaps are the largest
    over ranks (one all-gather). `replay(policy, batch, step_indices, chunk_size)` is
    `batch.log_probs` with the trained entries recomputed (the algorithm's own
    `Algorithm.replay_log_probs`; the samples of one step may train different steps, so a step
    that no sample trains keeps its stored values and a gap of 0)."""
    replayed = replay(policy, batch, step_indices, chunk_size)  # [B, T, ...]
    gaps = (replayed - batch.log_probs).abs()  # [B, T, ...]
    per_step = gaps.transpose(0, 1).flatten(1).amax(1).double().cpu()  # [T] this rank's
    per_step = distributed.all_gather_cat(per_step[None], ranks).amax(0)  # [T] every rank's
    return dict(enumerate(per_step.tolist()))
