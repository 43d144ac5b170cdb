"""Rollout engines: where trajectories are generated.

Where it fits: steps 2 and 6 of the loop. The trainer asks its engine to `generate` the
step's prompt groups (or `generate_chunks`, to score each part as it arrives) and, after the
optimizer round, to `sync` fresh trainable weights. `LocalRolloutEngine` samples with the
trained module itself (sync is a no-op); the Ray engine (`ray_engine.py`) runs the same
collector inside rollout actors.
"""

from __future__ import annotations

from typing import Iterator, Protocol

import torch

from genalign.data.sampler import PromptGroupBatch
from genalign.models.base import FlowPolicy, TokenPolicy
from genalign.rollout.collector import SamplingSpec, generate, generate_chunks
from genalign.rollout.token_batch import Trajectories


class RolloutEngine(Protocol):
    needs_sync: bool
    """True when the rollout samples with its own copy of the weights (`sync` pushes them)."""
    version: int | None
    """The version of the weights the rollout samples with (the last `sync`'s); None in-process."""

    def generate(
        self, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
    ) -> Trajectories:
        """The step's trajectories (only `positions` of them when given: a rank's shard)."""
        ...

    def generate_chunks(
        self, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
    ) -> Iterator[Trajectories]:
        """The same trajectories in parts, in order, each as soon as it is sampled (their
        `cat_batches` is `generate`'s result): `reward.async_scoring` scores one while the
        next is sampled."""
        ...

    def start(
        self, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
    ) -> Iterator[Trajectories]:
        """`generate_chunks` begun now, with the weights the rollout holds now: an engine whose
        workers have their own devices samples while the caller trains (rollout.overlap)."""
        ...

    def sync(self, trainable_state: dict[str, torch.Tensor], version: int) -> dict[str, float]:
        """Push trainable weights of policy `version`; return sync metrics (seconds, bytes)."""
        ...

    def rollout_state(self) -> tuple[dict[str, torch.Tensor], int | None]:
        """The trainable weights the rollout samples with and their version (the last `sync`);
        ({}, None) for a rollout that samples with the trainer's own weights."""
        ...

    def close(self) -> None: ...


class LocalRolloutEngine:
    """In-process: the trainer's own policy samples, so there is nothing to sync."""

    needs_sync = False
    version = None

    def __init__(self, policy: FlowPolicy | TokenPolicy):
        self.policy = policy

    def generate(
        self, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
    ) -> Trajectories:
        self.policy.transformer.eval()
        return generate(self.policy, groups, spec, positions)

    def generate_chunks(
        self, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
    ) -> Iterator[Trajectories]:
        """The same trajectories, one `rollout.sample_batch_size` chunk at a time."""
        self.policy.transformer.eval()
        return generate_chunks(self.policy, groups, spec, positions)

    def start(
        self, groups: PromptGroupBatch, spec: SamplingSpec, positions: list[int] | None = None
    ) -> Iterator[Trajectories]:
        """In-process there is no other device to sample on: the trajectories are sampled now
        (the weights of this moment, as `start` promises) and handed on when read."""
        return iter([self.generate(groups, spec, positions)])

    def sync(self, trainable_state: dict[str, torch.Tensor], version: int) -> dict[str, float]:
        return {}

    def rollout_state(self) -> tuple[dict[str, torch.Tensor], int | None]:
        return {}, None

    def close(self) -> None:
        pass
