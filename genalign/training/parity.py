"""Rollout/replay parity: replay stored steps with unchanged weights, compare log-probs.

With fp32 and the rollout's batch geometry the gap is exactly 0 and every importance ratio
is exactly 1 (docs/algorithms.md §2.10), for every kernel and SDE window: the replay
goes through the same `algorithms.replay` path as the loss. A non-zero gap means the replay
is not scoring the policy that sampled: a different code path, dtype, batch shape or guidance.
"""

from __future__ import annotations

import logging
from typing import Any

from genalign.algorithms.base import Algorithm
from genalign.algorithms.replay import replay_log_probs
from genalign.models.base import Policy
from genalign.rollout.token_batch import Trajectories
from genalign.training import distributed
from genalign.training.update import agreed_positions

log = logging.getLogger(__name__)


def replay_parity(
    policy: Policy,
    batch: Trajectories,
    step_indices: list[int],
    chunk_size: int,
    replay: Any = replay_log_probs,
    ranks: distributed.RankInfo = distributed.RankInfo(),
) -> dict[int, float]:
    """Max |log_prob_replay - log_prob_rollout| per denoising step, over all samples (and, for a
    token trajectory, all tokens of its one position) of every rank: under torchrun each rank
    replays its own trajectories (its forwards are collective under FSDP2, so every rank calls
    this with as many `step_indices`, `update.agreed_positions`) and the gaps are the largest
    over ranks (one all-gather). `replay(policy, batch, step_indices, chunk_size)` is
    `batch.log_probs` with the trained entries recomputed (the algorithm's own
    `Algorithm.replay_log_probs`; the samples of one step may train different steps, so a step
    that no sample trains keeps its stored values and a gap of 0; the default is the flow
    replay, a token algorithm passes its own)."""
    replayed = replay(policy, batch, step_indices, chunk_size)  # [B, T, ...]
    gaps = (replayed - batch.log_probs).abs()  # [B, T, ...]
    per_step = gaps.transpose(0, 1).flatten(1).amax(1).double().cpu()  # [T] this rank's
    per_step = distributed.all_gather_cat(per_step[None], ranks).amax(0)  # [T] every rank's
    return dict(enumerate(per_step.tolist()))


def parity_preflight(
    policy: Policy, batch: Trajectories, algorithm: Algorithm[Any], chunk_size: int, ranks: distributed.RankInfo
) -> dict[str, float]:
    """The first step's check: the algorithm's trained positions replayed with unchanged
    weights; each position's gap logged, the largest the step's column (exactly 0 expected)."""
    gaps = replay_parity(
        policy,
        batch,
        agreed_positions(algorithm, batch, ranks),
        chunk_size,
        replay=algorithm.replay_log_probs,
        ranks=ranks,
    )
    per_step = " ".join(f"{j}:{gap:.2e}" for j, gap in gaps.items())
    log.info("parity preflight: max |log_prob_replay - log_prob_rollout| per step: %s", per_step)
    return {"parity_max_abs_log_prob_diff": max(gaps.values())}
