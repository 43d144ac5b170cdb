"""Batch sources: what a training step trains on, with its reward and advantage columns.

Where it fits: steps 1–4 of the loop (docs/architecture.md §2). The trainer asks its source for the step's
`StepData` and hands `units` and `advantages` to the update; it never asks where they came from.
* `OnlineRollout` — sample prompt groups with the rollout engine (under the algorithm's
  `rollout_weights`), score them, normalise advantages per group, and let the algorithm turn
  trajectories into its training units (`training_batch`).
* `OfflinePreferences` — Flow-DPO from a preference dataset on disk: no rollout, no scoring;
  the images are encoded to latents once, and each step draws its pairs in a seeded order.
* `OfflineImages` — flow-matching SFT from an image–prompt dataset on disk, the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from genalign.algorithms.advantages import advantage_stats, aggregate_advantages, zero_std_group_fraction
from genalign.algorithms.base import Algorithm
from genalign.config.schema import ExperimentConfig
from genalign.data.preferences import load_image, load_preference_images, read_image_prompts, read_preferences
from genalign.data.prompts import PromptExample, load_manifest
from genalign.data.sampler import PromptSampler
from genalign.finite import named_step
from genalign.models.base import FlowPolicy
from genalign.preflight.step_sizes import StepSizes
from genalign.rewards.scores import RewardScores
from genalign.rollout.batch import TrajectoryBatch, cat_batches
from genalign.rollout.collector import encode_unique
from genalign.rollout.pairs import PreferencePairs
from genalign.rollout.samples import CleanSamples
from genalign.training import distributed


@dataclass
class StepData:
    units: Any
    """What the update trains on: a `TrajectoryBatch` or `PreferencePairs` (len/index/to)."""
    advantages: torch.Tensor
    """[U] one per unit (this rank's)."""
    trajectories: TrajectoryBatch | None = None
    """The step's rollout (the parity preflight replays it); None offline."""
    generated: int = 0
    """Samples generated this step by this rank (0 offline)."""
    row: dict[str, float] = field(default_factory=dict)
    """Reward and advantage columns of the metrics row: the whole step's on every rank (the
    rewards are gathered before group normalisation; offline, the step's pair count)."""
    times: dict[str, float] = field(default_factory=dict)
    """time_rollout_s and time_reward_s (seconds of this step's collection)."""
    filler: Any = None
    """One unit this rank replays with weight 0 when it has no unit of its own (online DPO
    without a pair), so it still enters the step's collectives; None when `units` is not empty."""
    scores: RewardScores | None = None
    """The whole step's reward scores (every rank's samples, this rank's first on rank 0); None offline."""


class OnlineRollout:
    def __init__(self, cfg: ExperimentConfig, sizes: StepSizes, engine, rewards, algorithm: Algorithm, spec, ranks):
        self.cfg, self.sizes, self.engine, self.rewards = cfg, sizes, engine, rewards
        self.algorithm, self.spec, self.ranks = algorithm, spec, ranks
        self.sampler = PromptSampler(
            load_manifest(cfg.data.manifest, "data.manifest"),
            sizes.prompts_per_step,
            sizes.samples_per_prompt,
            cfg.trainer.seed,
            shuffle=cfg.data.shuffle,
            same_initial_noise=cfg.rollout.same_initial_noise,
        )

    def collect(self, step: int) -> StepData:
        times = {}
        start = time.perf_counter()
        with self.algorithm.rollout_weights(), named_step(f"step {step}"):
            batch, pending_scores = self.rollout(step)
        times["time_rollout_s"] = time.perf_counter() - start

        start = time.perf_counter()  # with async scoring: the wait for what was not done yet
        scores = self.gather_scores(pending_scores())
        step_advantages = self.advantages(batch, scores)  # [world * b], the whole step
        offset = self.ranks.rank * len(batch)
        advantages = step_advantages[offset : offset + len(batch)]  # [b] this rank's samples
        times["time_reward_s"] = time.perf_counter() - start
        units, unit_advantages = self.algorithm.training_batch(batch, advantages)
        row = {
            **scores.stats(prefix="reward"),
            "zero_std_ratio": zero_std_group_fraction(scores.total, self.global_group_ids(batch)),
            **{f"adv_{k}": v for k, v in advantage_stats(step_advantages).items()},
        }
        filler = self.algorithm.filler_unit(batch) if len(units) == 0 else None
        return StepData(units, unit_advantages, batch, len(batch), row, times, filler, scores)

    def rollout(self, step: int) -> tuple[TrajectoryBatch, Callable[[], RewardScores]]:
        """The step's trajectories and a callable returning their reward scores. With
        reward.async_scoring each finished chunk is sent to the reward runtime while the next
        one is sampled; otherwise scoring starts when the callable is called."""
        groups = self.sampler.sample(step)
        spec = self.spec.at_step(step)  # the step's SDE window (a pure function of the step)
        positions = None
        if self.ranks.world_size > 1:  # this rank's whole prompt groups
            positions = distributed.rank_positions(len(groups), self.sizes.samples_per_prompt, self.ranks)
        if self.cfg.reward.async_scoring:
            # no offload around sampling here: the reward models score while the policy samples,
            # so they stay resident (the local runtime refuses score_async while offloaded)
            chunks, futures = [], []
            for chunk in self.engine.generate_chunks(groups, spec, positions):
                chunks.append(chunk)
                futures.append(self.rewards.score_async(chunk.images, chunk.prompts, chunk.metadata))
            return cat_batches(chunks), lambda: RewardScores.cat([f.result() for f in futures])
        self.rewards.offload()
        batch = self.engine.generate(groups, spec, positions)
        self.rewards.onload()
        return batch, lambda: self.rewards.score(batch.images, batch.prompts, batch.metadata)

    def global_group_ids(self, batch: TrajectoryBatch) -> torch.Tensor:
        return distributed.all_gather_cat(batch.group_ids, self.ranks)  # [world * b]

    def gather_scores(self, scores: RewardScores) -> RewardScores:
        """Every rank sees the whole step's rewards, so group statistics cover whole groups
        and the batch std is the global one (identity on one process)."""
        if self.ranks.world_size == 1:
            return scores
        return RewardScores(
            {name: distributed.all_gather_cat(values, self.ranks) for name, values in scores.components.items()},
            scores.weights,
        )

    def advantages(self, batch: TrajectoryBatch, scores: RewardScores) -> torch.Tensor:
        """Group-normalised advantages of the whole step [world * b] (docs/algorithms.md §2.4)."""
        adv = self.cfg.algorithm.advantage
        return aggregate_advantages(
            scores.components,
            scores.weights,
            self.global_group_ids(batch),
            self.cfg.reward.aggregation,
            per_prompt=adv.per_prompt,
            global_std=adv.global_std,
            std=adv.std,
            eps=adv.eps,
            normalize_by_std=adv.normalize_by_std,
        )


class OfflinePreferences:
    """Flow-DPO pairs from `data.preference_manifest` (docs/preference_data.md).

    Every image is encoded once with the policy's `encode_images` (the VAE for SD3; pixels for
    the toy model) and kept on the CPU; prompts are encoded once. A step takes
    `rollout.rollout_batch_size` pairs — this rank's share of them under torchrun — in the
    `PromptSampler` order (seeded epoch permutations), so resume draws the same pairs."""

    def __init__(self, cfg: ExperimentConfig, sizes: StepSizes, policy: FlowPolicy, ranks):
        self.ranks = ranks
        rows = read_preferences(cfg.data.preference_manifest, size=(cfg.rollout.height, cfg.rollout.width))
        chosen_images, rejected_images = load_preference_images(rows)  # [N, 3, H, W] uint8 x2
        self.chosen = encode_images(policy, chosen_images, cfg.rollout.sample_batch_size)  # [N, ...]
        self.rejected = encode_images(policy, rejected_images, cfg.rollout.sample_batch_size)
        self.prompts = [row.prompt for row in rows]
        self.condition = encode_unique(policy, self.prompts, with_negative=False).to("cpu")
        self.sigmas = policy.sigmas(cfg.rollout.num_steps, tuple(self.chosen.shape[1:])).float().cpu()  # [T+1]
        self.sampler = row_sampler(cfg, sizes, [(row.prompt, row.source) for row in rows])

    def collect(self, step: int) -> StepData:
        start = time.perf_counter()
        drawn, take, rows = drawn_rows(self.sampler, step, self.ranks)
        pairs = PreferencePairs(
            prompts=[self.prompts[i] for i in rows],
            seeds=drawn.seeds[take],
            condition=self.condition.index(torch.tensor(rows)),
            chosen=self.chosen[rows],
            rejected=self.rejected[rows],
            sigmas=self.sigmas,
        )
        pairs.validate()
        return StepData(
            pairs,
            torch.ones(len(pairs)),
            None,
            0,
            {"pairs": float(len(drawn))},  # every rank's
            {"time_rollout_s": time.perf_counter() - start, "time_reward_s": 0.0},
        )


def encode_images(policy: FlowPolicy, images: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """uint8 [N, 3, H, W] -> latents [N, ...] on the CPU, `chunk_size` images per encoder call."""
    with torch.no_grad():
        return torch.cat([policy.encode_images(chunk).cpu() for chunk in images.split(chunk_size)])


def row_sampler(cfg: ExperimentConfig, sizes: StepSizes, rows: list[tuple[str, str]]) -> PromptSampler:
    """Seeded epoch order over a dataset's (prompt, source) rows, one sample per row."""
    examples = [PromptExample(prompt, index, source) for index, (prompt, source) in enumerate(rows)]
    return PromptSampler(examples, sizes.prompts_per_step, 1, cfg.trainer.seed, shuffle=cfg.data.shuffle)


def drawn_rows(sampler: PromptSampler, step: int, ranks) -> tuple[Any, list[int], list[int]]:
    """The step's draw, this rank's positions in it, and their manifest rows."""
    drawn = sampler.sample(step)  # samples_per_prompt 1: one sample = one row
    take = list(range(len(drawn)))
    if ranks.world_size > 1:  # this rank's share of the step's rows
        take = distributed.rank_positions(len(drawn), 1, ranks)
    return drawn, take, [int(drawn.prompt_ids[i]) for i in take]


class OfflineImages:
    """Flow-matching SFT images from `data.image_manifest` (docs/preference_data.md).

    As `OfflinePreferences`: every image is encoded once with the policy's `encode_images` and
    kept on the CPU, prompts are encoded once, and a step takes `rollout.rollout_batch_size`
    rows — this rank's share under torchrun — in a seeded epoch order, so resume draws the same
    rows (the ranks' shares are equal: `distributed.rank_positions`)."""

    def __init__(self, cfg: ExperimentConfig, sizes: StepSizes, policy: FlowPolicy, ranks):
        self.ranks = ranks
        rows = read_image_prompts(cfg.data.image_manifest, size=(cfg.rollout.height, cfg.rollout.width))
        images = torch.stack([load_image(row.image) for row in rows])  # [N, 3, H, W] uint8
        self.latents = encode_images(policy, images, cfg.rollout.sample_batch_size)  # [N, ...]
        self.prompts = [row.prompt for row in rows]
        self.condition = encode_unique(policy, self.prompts, with_negative=False).to("cpu")
        self.sampler = row_sampler(cfg, sizes, [(row.prompt, row.source) for row in rows])

    def samples(self, rows: list[int], seeds: torch.Tensor) -> CleanSamples:
        samples = CleanSamples(
            prompts=[self.prompts[i] for i in rows],
            seeds=seeds,
            condition=self.condition.index(torch.tensor(rows, dtype=torch.long)),
            latents=self.latents[rows],
        )
        samples.validate()
        return samples

    def collect(self, step: int) -> StepData:
        start = time.perf_counter()
        drawn, take, rows = drawn_rows(self.sampler, step, self.ranks)
        samples = self.samples(rows, drawn.seeds[take])
        return StepData(
            samples,
            torch.ones(len(samples)),
            None,
            0,
            {"images": float(len(drawn))},  # every rank's
            {"time_rollout_s": time.perf_counter() - start, "time_reward_s": 0.0},
        )
