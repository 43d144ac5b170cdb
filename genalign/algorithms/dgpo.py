"""DGPO: direct group preference optimisation on the forward process (docs/algorithms.md §9).

Where it fits: the rollout samples clean images with any sampler (the Euler ODE in the
recipes, with CFG if the recipe asks: training itself is CFG-free); rewards become group
advantages as for Flow-GRPO. Nothing per-step is stored and no log-prob is read. Each prompt
group is split by the sign of its advantages into a positive and a negative subgroup, and the
policy is trained by maximum likelihood of "positive ≻ negative" (a DPO logit over groups, the
velocity error on the forward process standing in for the log-likelihood):

* `training_batch` turns the rank's trajectories into `GroupSamples` (final latents, each
  sample's group and the group's key for the σ / ε draws; a rank always holds whole groups);
* `prepare_update` computes, once per optimizer round and with no grad, each group's weight
  σ(S_g) at every training position from the policy's and the reference's velocity errors on
  the whole group, so micro-batches may cut groups anywhere;
* `compute_loss` trains mean_b w_b·A_b·e_θ,b (the gradient of −log σ(−S_g)), with the
  reference code's PPO-style clip against the EMA weights and an optional velocity KL;
* `after_update` moves the EMA weights (a `ShadowWeights` copy, algorithm state in every
  checkpoint), which the rollout samples with after `sample_with_ema_after` optimizer steps.

Departures from the reference code (Luo-Yihong/DGPO `scripts/train_sd3_dgpo.py`), on purpose:
* The group weights are computed at the start of the optimizer round, not inside each
  micro-batch's forward: equal to the reference's when a step's micro-batches make one
  optimizer step (its setting: `gradient_accumulation_steps` spans the epoch) and exact over
  whole groups however micro-batches are cut; it costs one no-grad policy forward (and one
  reference forward) per sample and position. With several optimizer steps per round the
  weights of the later steps come from the round's starting weights.
* σ and ε are drawn per group from generators seeded by the group's first sample seed
  (`forward_draws.group_draws`), so resume is bitwise; the reference draws the positions once
  per epoch for the whole batch (broadcast from rank 0) and ε per group from the global RNG.
* The EMA weights move once per training step (after its optimizer round), with the
  optimizer-step count before the round; the reference moves them after every optimizer
  step (the same at one optimizer step per round, its setting).
* The sampler is the configured rollout (Euler ODE) instead of a 2nd-order DPM solver.
"""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from genalign.algorithms.advantages import _dense_group_index, clip_advantages
from genalign.algorithms.base import AlgorithmBase, velocity_kl_problems
from genalign.algorithms.config import AlgorithmConfig
from genalign.algorithms.forward_draws import first_member_seeds, group_draws
from genalign.algorithms.forward_losses import (
    dgpo_clip_mask,
    dgpo_group_weights,
    dgpo_policy_loss,
    noised,
    old_policy_decay,
    velocity_error,
)
from genalign.algorithms.losses import velocity_kl
from genalign.models.base import Condition, FlowPolicy, SharedCondition
from genalign.rollout.batch import TrajectoryBatch
from genalign.weights.reference import ReferencePolicy
from genalign.weights.shadow import ShadowWeights, load_shadow_state, shadow_state

EMA_PREFIX = "dgpo_ema/"


@dataclass
class GroupSamples:
    """DGPO's training units: one per sample, knowing its group (B samples, latent shape `...`).

    clean        [B, ...]  the sampled x0, float32
    seeds        [B]       int64 the sample's seed (its own ε when algorithm.dgpo.shared_noise is off)
    group_seeds  [B]       int64 the group's key: the seed of its first sample (σ, shared ε)
    group_index  [B]       int64 dense group index within the rank's batch
    group_sizes  [B]       int64 members of the sample's group
    advantages   [B]       the samples' group advantages (the group weights read the whole group's)
    sigmas       [T+1]     the rollout schedule the σ's are drawn from
    group_weights [B, K]   σ(S_g) per training position (`prepare_update`; None before)
    """

    prompts: list[str]
    clean: torch.Tensor
    condition: Condition | SharedCondition
    seeds: torch.Tensor
    group_seeds: torch.Tensor
    group_index: torch.Tensor
    group_sizes: torch.Tensor
    advantages: torch.Tensor
    sigmas: torch.Tensor
    group_weights: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.prompts)

    def index(self, idx: torch.Tensor | list[int]) -> GroupSamples:
        rows = torch.as_tensor(idx, dtype=torch.long)
        return GroupSamples(
            prompts=[self.prompts[i] for i in rows.tolist()],
            clean=self.clean[rows.to(self.clean.device)],
            condition=self.condition.index(rows.to(self.condition.device)),
            seeds=self.seeds[rows],
            group_seeds=self.group_seeds[rows],
            group_index=self.group_index[rows],
            group_sizes=self.group_sizes[rows],
            advantages=self.advantages[rows],
            sigmas=self.sigmas,
            group_weights=None if self.group_weights is None else self.group_weights[rows],
        )

    def to(self, device: torch.device | str) -> GroupSamples:
        return dataclasses.replace(self, clean=self.clean.to(device), condition=self.condition.to(device))

    def split(self, chunk_size: int) -> list[GroupSamples]:
        return [self.index(list(range(s, min(s + chunk_size, len(self))))) for s in range(0, len(self), chunk_size)]


def group_samples(batch: TrajectoryBatch, advantages: torch.Tensor) -> GroupSamples:
    """The rank's trajectories and their advantages [B] as DGPO units (the batch holds whole
    prompt groups)."""
    dense, num_groups = _dense_group_index(batch.group_ids)  # [B], G
    sizes = torch.bincount(dense, minlength=num_groups)[dense]  # [B]
    return GroupSamples(
        prompts=list(batch.prompts),
        clean=batch.latents[:, -1],
        condition=batch.condition,
        seeds=batch.seeds,
        group_seeds=first_member_seeds(batch.seeds, batch.group_ids),
        group_index=dense,
        group_sizes=sizes,
        advantages=advantages,
        sigmas=batch.sigmas,
    )


class DGPO(AlgorithmBase):
    title = "DGPO"
    needs_old_logprob = False
    trainable_copies = 1  # the EMA ("old") weights: a ShadowWeights copy of the trained tensors
    owned_options = ("dgpo",)
    stat_extremes = {"dgpo_group_weight": ("min", "max")}

    @classmethod
    def reference_kind(cls, cfg: AlgorithmConfig) -> str:
        """The frozen initial model enters the preference logit (unless it compares with the
        EMA weights, `ema_reference`) and the KL term."""
        return "frozen" if (not cfg.dgpo.ema_reference or cfg.kl_beta > 0) else "none"

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        """A velocity KL, a reference CFG the rollout's prompts support, the ranges of algorithm.dgpo."""
        problems = super().config_problems(cfg)
        dgpo = cfg.algorithm.dgpo
        problems += velocity_kl_problems(cfg)
        if dgpo.reference_guidance_scale > 1 and cfg.rollout.guidance_scale <= 1:
            problems.append(
                f"algorithm.dgpo.reference_guidance_scale={dgpo.reference_guidance_scale} runs the reference "
                "with CFG, whose negative prompt the rollout encodes only under CFG: set rollout.guidance_scale "
                "> 1 or the reference scale to 1"
            )
        if dgpo.max_timestep_index >= cfg.rollout.num_steps:
            problems.append(
                f"algorithm.dgpo.max_timestep_index={dgpo.max_timestep_index} indexes the rollout schedule's "
                f"{cfg.rollout.num_steps} σ's (rollout.num_steps): set it below {cfg.rollout.num_steps}"
            )
        if cfg.rollout.n < 2:
            problems.append(
                "algorithm.name=dgpo compares the samples of a prompt group: rollout.n must be >= 2, "
                f"got {cfg.rollout.n}"
            )
        return problems + dgpo.problems()

    @classmethod
    def train_positions(cls, cfg: AlgorithmConfig) -> int:
        """algorithm.dgpo.num_timesteps σ's per sample, whatever the schedule's length."""
        return cfg.dgpo.num_timesteps

    def __init__(
        self,
        cfg: AlgorithmConfig,
        reference: ReferencePolicy | None = None,
        parameters: dict[str, torch.nn.Parameter] | None = None,
    ):
        if not parameters:
            raise ValueError("DGPO keeps its EMA weights as a copy of the trained parameters; build it with them")
        if self.reference_kind(cfg) == "frozen" and reference is None:
            raise ValueError("algorithm.name=dgpo compares with the frozen initial model: it needs a reference policy")
        self.cfg = cfg
        self._take_reference(cfg, reference)
        self.ema = ShadowWeights(parameters)  # θ_ema = θ at the start, as the reference copies the adapter
        self.optimizer_steps = 0

    def training_batch(self, batch: TrajectoryBatch, advantages: torch.Tensor) -> tuple[GroupSamples, torch.Tensor]:
        return group_samples(batch, advantages), advantages

    def filler_unit(self, batch: TrajectoryBatch) -> GroupSamples:
        """Sample 0 alone, group weight 0 at every position: a finite loss the update weights by 0."""
        unit = group_samples(batch, torch.zeros(len(batch))).index([0])
        return dataclasses.replace(unit, group_weights=torch.zeros(1, self.cfg.dgpo.num_timesteps))

    def train_step_indices(self, batch: GroupSamples) -> list[int]:
        return list(range(self.train_positions(self.cfg)))

    def rollout_weights(self) -> AbstractContextManager:
        """The EMA weights once more than `sample_with_ema_after` optimizer steps are done."""
        after = self.cfg.dgpo.sample_with_ema_after
        return self.ema.applied() if 0 <= after < self.optimizer_steps else nullcontext()

    def _draws(self, units: GroupSamples, position: int, device: torch.device):
        """(x_σ, target ε − x0, σ, condition) of `units` at training position `position`."""
        dgpo = self.cfg.dgpo
        clean = units.clean.to(device)  # [b, ...]
        sigma, noise = group_draws(
            units.group_seeds,
            units.seeds,
            position,
            units.sigmas,
            dgpo.max_timestep_index + 1,
            tuple(clean.shape[1:]),
            device,
            dgpo.shared_noise,
        )  # [b], [b, ...]
        noisy, target = noised(clean, noise, sigma)
        return noisy, target, sigma, units.condition.to(device)

    @torch.no_grad()
    def _reference_velocity(self, noisy, sigma, cond) -> torch.Tensor:
        """The frozen initial model's velocity (CFG at `reference_guidance_scale`)."""
        with self.reference.active() as reference_policy:
            return reference_policy.velocity(noisy, sigma, cond, self.cfg.dgpo.reference_guidance_scale).float()

    @torch.no_grad()
    def _logit_reference_error(self, policy: FlowPolicy, noisy, target, sigma, cond) -> torch.Tensor:
        """e_ref [b]: under the EMA weights (`ema_reference`) or the frozen initial model."""
        if self.cfg.dgpo.ema_reference:
            with self.ema.applied():
                return velocity_error(policy.velocity(noisy, sigma, cond, 1.0), target)
        return velocity_error(self._reference_velocity(noisy, sigma, cond), target)

    def prepare_update(
        self, policy: FlowPolicy, batch: GroupSamples, step_indices: list[int], micro_batch_size: int
    ) -> GroupSamples:
        """The group weights σ(S_g) [B, K] at every training position, from the current policy's
        and the reference's velocity errors on the rank's whole batch (no grad), in chunks of
        `micro_batch_size` (the same on every rank, so sharded forwards pair up)."""
        device = policy.device
        clipped = clip_advantages(batch.advantages, self.cfg.adv_clip_max)  # [B]
        columns = []
        for position in step_indices:
            gaps = []
            for chunk in batch.split(micro_batch_size):
                noisy, target, sigma, cond = self._draws(chunk, position, device)
                reference_error = self._logit_reference_error(policy, noisy, target, sigma, cond)  # [c]
                with torch.no_grad():
                    error = velocity_error(policy.velocity(noisy, sigma, cond, 1.0), target)  # [c]
                gaps.append((error - reference_error).cpu())
            gap = torch.cat(gaps) if gaps else torch.zeros(0)  # [B]
            columns.append(dgpo_group_weights(clipped, gap, batch.group_index, batch.group_sizes, self.cfg.dgpo.beta))
        weights = torch.stack(columns, dim=1) if columns else torch.zeros(len(batch), 0)  # [B, K]
        return dataclasses.replace(batch, group_weights=weights)

    def compute_loss(
        self, policy: FlowPolicy, units: GroupSamples, advantages: torch.Tensor, step_index: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if units.group_weights is None:
            raise RuntimeError("DGPO.compute_loss needs the group weights of prepare_update")
        device, dgpo = policy.device, self.cfg.dgpo
        size = len(units)
        noisy, target, sigma, cond = self._draws(units, step_index, device)
        clipped_adv = clip_advantages(advantages.to(device), self.cfg.adv_clip_max)  # [b]
        use_ema = dgpo.clip_error or dgpo.clip_kl
        use_kl = self.cfg.kl_beta > 0
        # the no-grad forwards first: swapping the EMA values into the trained tensors after the
        # policy forward would bump their versions under autograd's saved references
        ref_velocity = self._reference_velocity(noisy, sigma, cond) if use_kl else None
        old_error = None
        if use_ema:
            with torch.no_grad(), self.ema.applied():
                old_error = velocity_error(policy.velocity(noisy, sigma, cond, 1.0), target)  # [b]
        velocity = policy.velocity(noisy, sigma, cond, 1.0).float()  # [b, ...]
        error = velocity_error(velocity, target)  # [b]
        clip = torch.zeros(size, dtype=torch.bool, device=device)
        if old_error is not None:
            clip = dgpo_clip_mask(error, old_error, clipped_adv, dgpo.clip_range)
        weights = units.group_weights[:, step_index].to(device)  # [b]
        no_clip = torch.zeros_like(clip)
        policy_loss = dgpo_policy_loss(error, weights, clipped_adv, clip if dgpo.clip_error else no_clip)
        loss = policy_loss
        kl = torch.zeros(size, device=device)  # [b]
        if ref_velocity is not None:
            kl = velocity_kl(velocity, ref_velocity)  # [b]
            kept_kl = torch.where(clip, kl.detach(), kl) if dgpo.clip_kl else kl
            loss = loss + self.cfg.kl_beta * kept_kl.mean()
        stats = {
            "policy_loss": policy_loss.detach().expand(size),
            "kl": kl.detach(),
            "dgpo_group_weight": weights.detach(),
            "dgpo_velocity_error": error.detach(),
            "dgpo_clip_fraction": clip.float(),
        }
        return loss, stats

    def after_update(self, optimizer_steps: int) -> dict[str, float]:
        """θ_ema ← η·θ_ema + (1 − η)·θ, η = min(rate·g, max) with g the optimizer steps before
        this round; a round without an optimizer step leaves it (the reference moves it per step)."""
        dgpo = self.cfg.dgpo
        if optimizer_steps == 0:
            return {"dgpo_ema_decay": 1.0}  # η = 1: θ_ema unchanged
        decay = old_policy_decay(self.optimizer_steps, 0, dgpo.ema_decay_rate, dgpo.ema_decay_max)
        self.ema.blend(decay)
        self.optimizer_steps += optimizer_steps
        return {"dgpo_ema_decay": decay}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return shadow_state(self.ema, EMA_PREFIX, self.optimizer_steps)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.optimizer_steps = load_shadow_state(self.ema, EMA_PREFIX, state, "DGPO EMA weights", "dgpo")
