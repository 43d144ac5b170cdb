"""Batch sources: what a training step trains on, with its reward and advantage columns.

Where it fits: steps 1–4 of the loop (docs/architecture.md §2). The trainer asks its source for the step's
`StepData` and hands `units` and `advantages` to the update; it never asks where they came from.
* `OnlineRollout` — sample prompt groups with the rollout engine (under the algorithm's
  `rollout_weights`), score them, normalise advantages per group, and let the algorithm turn
  trajectories into its training units (`training_batch`).
* `OneStepAhead` — the online rollout with rollout.overlap=one_step: step k+1's rollout is
  begun on the Ray workers before step k trains, so from step 2 on a step trains on samples
  one update old (the algorithm corrects them, `algorithm.rollout_correction`).
* `OfflinePreferences` — Flow-DPO from a preference dataset on disk: no rollout, no scoring;
  the images are encoded to latents once, and each step draws its pairs in a seeded order.
* `OfflineImages` — flow-matching SFT from an image–prompt dataset on disk, the same way.
Every source also decides when the trained weights reach the rollout (`after_update`, the
trainer's `sync` handed in), what of that a checkpoint keeps (`state_dict`) and how a resume
puts it back (`restore`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from genalign.algorithms.advantages import advantage_stats, aggregate_advantages, zero_std_group_fraction
from genalign.algorithms.base import Algorithm
from genalign.config.schema import ExperimentConfig
from genalign.data.preferences import load_preference_images, read_image_prompts, read_preferences
from genalign.data.prompts import PromptExample, load_manifest
from genalign.data.sampler import PromptGroupBatch, PromptSampler
from genalign.data.source_images import load_image
from genalign.finite import named_step
from genalign.models.base import FlowPolicy
from genalign.preflight.step_sizes import StepSizes
from genalign.rewards.scores import RewardScores
from genalign.rollout.batch import TrajectoryBatch, cat_batches
from genalign.rollout.collector import SamplingSpec, encode_unique
from genalign.rollout.pairs import PreferencePairs
from genalign.rollout.samples import CleanSamples
from genalign.runs.checkpoint import CheckpointState
from genalign.training import distributed

Sync = Callable[[int], dict[str, float]]
"""The trainer's `sync`: the trained weights after step `version` to the rollout; its columns."""


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


class WeightsAfterEachUpdate:
    """The rollout gets the trained weights right after each update, and a resume gives it the
    checkpoint's: every step samples with the weights its update starts from."""

    sync: Sync

    def after_update(self, step: int) -> dict[str, float]:
        return self.sync(step)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {}

    def restore(self, checkpoint: CheckpointState) -> None:
        self.sync(checkpoint.step)  # rollout workers start from the restored weights, not the fresh adapter


class OnlineRollout(WeightsAfterEachUpdate):
    def __init__(
        self, cfg: ExperimentConfig, sizes: StepSizes, engine, rewards, algorithm: Algorithm, spec, ranks, sync: Sync
    ):
        self.cfg, self.sizes, self.engine, self.rewards = cfg, sizes, engine, rewards
        self.algorithm, self.spec, self.ranks, self.sync = algorithm, spec, ranks, sync
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
        row = self.before_rollout(step)
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
            **row,
            **scores.stats(prefix="reward"),
            "zero_std_ratio": zero_std_group_fraction(scores.total, self.global_group_ids(batch)),
            **{f"adv_{k}": v for k, v in advantage_stats(step_advantages).items()},
        }
        filler = self.algorithm.filler_unit(batch) if len(units) == 0 else None
        return StepData(units, unit_advantages, batch, len(batch), row, times, filler, scores)

    def before_rollout(self, step: int) -> dict[str, float]:
        """Work before the step's rollout (none here); its metrics columns."""
        return {}

    def work(self, step: int) -> tuple[PromptGroupBatch, SamplingSpec, list[int] | None]:
        """What step `step` samples: its prompt groups, its sampling spec (the SDE window is a
        pure function of the step) and this rank's positions among them (None: all)."""
        groups = self.sampler.sample(step)
        positions = None
        if self.ranks.world_size > 1:  # this rank's whole prompt groups
            positions = distributed.rank_positions(len(groups), self.sizes.samples_per_prompt, self.ranks)
        return groups, self.spec.at_step(step), positions

    def sample(self, step: int) -> TrajectoryBatch:
        """The step's trajectories, sampled now."""
        return self.engine.generate(*self.work(step))

    def rollout(self, step: int) -> tuple[TrajectoryBatch, Callable[[], RewardScores]]:
        """The step's trajectories and a callable returning their reward scores. With
        reward.async_scoring each finished chunk is sent to the reward runtime while the next
        one is sampled; otherwise scoring starts when the callable is called."""
        if self.cfg.reward.async_scoring:
            groups, spec, positions = self.work(step)
            # no offload around sampling here: the reward models score while the policy samples,
            # so they stay resident (the local runtime refuses score_async while offloaded)
            chunks, futures = [], []
            for chunk in self.engine.generate_chunks(groups, spec, positions):
                chunks.append(chunk)
                futures.append(self.rewards.score_async(chunk.images, chunk.prompts, chunk.metadata))
            return cat_batches(chunks), lambda: RewardScores.cat([f.result() for f in futures])
        self.rewards.offload()
        batch = self.sample(step)
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


class OneStepAhead(OnlineRollout):
    """rollout.overlap=one_step: step k+1's rollout is begun on the workers before step k
    trains, with the weights of update k-1, and read at step k+1.

    At step k: begin step k's rollout if none is under way (the launch's first step); read its
    shards (a worker that died is replaced and its shard sampled again with the weights the
    others used); push the weights of update k-1; begin step k+1's rollout with them. So step 1
    trains on its own weights' samples and every later step on samples one update old
    (`rollout_policy_lag` 1). The weights the rollout under way samples with are what a
    checkpoint keeps (`state_dict`); a resume pushes them back before its first rollout, so
    it samples exactly what the uninterrupted run sampled."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ahead: tuple[int, Iterator[TrajectoryBatch], int | None] | None = None
        """The rollout under way: its step, its shards (read when iterated) and the weights' version."""
        self.ready: tuple[int, TrajectoryBatch, float] | None = None
        """The step's rollout once read: its step, its trajectories and its policy lag."""

    def begin(self, step: int) -> None:
        self.ahead = (step, self.engine.start(*self.work(step)), self.engine.version)

    def before_rollout(self, step: int) -> dict[str, float]:
        if self.ahead is None:
            self.begin(step)  # the launch's first step: nothing was begun for it
        assert self.ahead is not None and self.ahead[0] == step, f"the rollout under way is not step {step}'s"
        _, shards, version = self.ahead
        self.ready = (step, cat_batches(list(shards)), float(step - 1 - (version or 0)))
        self.ahead = None
        return self.sync(step - 1) if self.engine.version != step - 1 else {}

    def sample(self, step: int) -> TrajectoryBatch:
        assert self.ready is not None and self.ready[0] == step, f"no rollout read for step {step}"
        if step < self.cfg.trainer.num_steps:
            self.begin(step + 1)
        return self.ready[1]

    def collect(self, step: int) -> StepData:
        data = super().collect(step)
        assert self.ready is not None
        data.row["rollout_policy_lag"] = self.ready[2]  # updates between the sampling weights and the trained ones
        self.ready = None
        return data

    def after_update(self, step: int) -> dict[str, float]:
        return {}  # the weights of this update go out before the next rollout begins (before_rollout)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The weights the rollout under way samples with (`restore` puts them back)."""
        return self.engine.rollout_state()[0]

    def restore(self, checkpoint: CheckpointState) -> None:
        """The workers get the weights that sampled checkpoint.step + 1 in the run being resumed
        (those of update checkpoint.step - 1); a checkpoint of a run without overlap has none,
        and its own weights sample the first rollout."""
        if checkpoint.rollout:
            self.engine.sync(checkpoint.rollout, version=checkpoint.step - 1)
        else:
            super().restore(checkpoint)


class OfflinePreferences(WeightsAfterEachUpdate):
    """Flow-DPO pairs from `data.preference_manifest` (docs/preference_data.md).

    Every image is encoded once with the policy's `encode_images` (the VAE for SD3; pixels for
    the toy model) and kept on the CPU; prompts are encoded once. A step takes
    `rollout.rollout_batch_size` pairs — this rank's share of them under torchrun — in the
    `PromptSampler` order (seeded epoch permutations), so resume draws the same pairs."""

    def __init__(self, cfg: ExperimentConfig, sizes: StepSizes, policy: FlowPolicy, ranks, sync: Sync):
        self.ranks, self.sync = ranks, sync
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


class OfflineImages(WeightsAfterEachUpdate):
    """Flow-matching SFT images from `data.image_manifest` (docs/preference_data.md).

    As `OfflinePreferences`: every image is encoded once with the policy's `encode_images` and
    kept on the CPU, prompts are encoded once, and a step takes `rollout.rollout_batch_size`
    rows — this rank's share under torchrun — in a seeded epoch order, so resume draws the same
    rows (the ranks' shares are equal: `distributed.rank_positions`)."""

    def __init__(self, cfg: ExperimentConfig, sizes: StepSizes, policy: FlowPolicy, ranks, sync: Sync):
        self.ranks, self.sync = ranks, sync
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
