"""AWM, advantage-weighted matching: the pretraining flow-matching loss on the rollout's x0,
weighted by advantage (docs/algorithms.md §11).

Where it fits: the rollout samples clean images with the live weights (on-policy; nothing
per-step is read, so any sampler serves: the reference's SA-Solver by default,
rollout.sampler=sa_solver, docs/algorithms.md §11.4); rewards become group advantages as for Flow-GRPO,
clamped and rescaled to ±algorithm.awm.advantage_max. `compute_loss` noises each final latent
x0 at one σ per training position — position k of K draws a schedule index from the k-th of K
equal strata — with fresh ε (`forward_draws.stratified_draws`), and weights the sample's
flow-matching error by its advantage: positive samples are fitted, negative ones pushed away.
Two velocity KLs regularise it: to the frozen base (algorithm.kl_beta) and to an anchor, a
lagging float32 copy of the trained weights soft-updated after each training step
(algorithm.awm.anchor_*); the anchor is algorithm state in every checkpoint.

Departures from the reference code (scxue/advantage_weighted_matching
`scripts/train_sd3_awm.py`, commit be51372), on purpose:
* The SA-Solver's noise is drawn from each sample's own generator (the reference uses the global
  RNG), so a sample's x0 depends on its seed alone.
* Each sample draws its own schedule index within the stratum (the reference shares one per
  micro-batch) and its own ε, from generators seeded by its seed, so resume is bitwise and a
  sample's draws do not depend on its micro-batch.
* The anchor (the reference's second "ema" LoRA adapter) is a `ShadowWeights` copy swapped in
  for its forward, as DiffusionNFT's old policy: the same values, for full fine-tuning too.
* The reference's PPO clip (clip_range 1 on a ratio that is exactly 1 on-policy), its
  `sum_first` loss (the same gradient on-policy), its ELBO-weighted KLs, its continuous
  (logit-normal, uniform) time samplers and its off-policy mode are not ported: none is used
  by its shipped configs.
Training and every KL forward are CFG-free (guidance 1), as the reference's `train.cfg=False`.
"""

from __future__ import annotations

import torch

from genalign.algorithms.base import ShadowCopyBase
from genalign.algorithms.config import AlgorithmConfig
from genalign.algorithms.forward_draws import stratified_draws
from genalign.algorithms.forward_losses import (
    awm_advantages,
    awm_log_prob,
    awm_policy_loss,
    noised,
    old_policy_decay,
)
from genalign.algorithms.losses import velocity_kl
from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.weights.shadow import ShadowWeights

FIRST_INDEX = {"discrete": 0, "discrete_wo_init": 1}
"""The first schedule index the strata cover, per algorithm.awm.time_sampling."""


def last_index(num_steps: int, timestep_fraction: float) -> int:
    """The upper end of the strata: int(num_steps · timestep_fraction), as the reference cuts it."""
    return int(num_steps * timestep_fraction)


class AdvantageWeightedMatching(ShadowCopyBase):
    title = "AWM"
    final_sample_only = True  # the loss noises batch.latents[:, -1] afresh: rollout.sampler=sa_solver serves it
    owned_options = ("awm",)
    copy_name = "anchor"
    copy_prefix = "awm_anchor/"

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        """A velocity KL (the base class's check), strata inside the schedule, and the ranges of
        algorithm.awm."""
        problems = super().config_problems(cfg)
        algorithm, awm = cfg.algorithm, cfg.algorithm.awm
        first, last = FIRST_INDEX[awm.time_sampling], last_index(cfg.rollout.num_steps, algorithm.timestep_fraction)
        if last <= first:
            problems.append(
                f"algorithm.name=awm draws its σ's from schedule indices {first}..int(rollout.num_steps · "
                f"algorithm.timestep_fraction) = {last}: raise rollout.num_steps ({cfg.rollout.num_steps}) or "
                f"algorithm.timestep_fraction ({algorithm.timestep_fraction})"
            )
        return problems + awm.problems()

    @classmethod
    def train_positions(cls, cfg: AlgorithmConfig) -> int:
        """algorithm.awm.train_timesteps σ's per sample, whatever the schedule's length."""
        return cfg.awm.train_timesteps

    @property
    def anchor(self) -> ShadowWeights:
        """The lagging copy the anchor KL compares with: the kept copy, θ at the start."""
        return self.copy

    def train_step_indices(self, batch: TrajectoryBatch) -> list[int]:
        return list(range(self.cfg.awm.train_timesteps))

    def compute_loss(
        self, policy: FlowPolicy, batch: TrajectoryBatch, advantages: torch.Tensor, step_index: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        device, awm = policy.device, self.cfg.awm
        clean = batch.latents[:, -1].to(device)  # [b, ...] the sampled x0
        first = FIRST_INDEX[awm.time_sampling]
        last = last_index(batch.num_steps, self.cfg.timestep_fraction)
        sigma, noise = stratified_draws(
            batch.seeds, step_index, awm.train_timesteps, first, last, batch.sigmas, tuple(clean.shape[1:]), device
        )  # [b], [b, ...]
        noisy, target = noised(clean, noise, sigma)  # [b, ...] x2
        cond = batch.condition.to(device)
        anchor_velocity = None
        if awm.anchor_kl_beta > 0:  # before the graph is built: swapping the anchor in writes the weights
            with torch.no_grad(), self.anchor.applied():
                anchor_velocity = policy.velocity(noisy, sigma, cond, 1.0).float()  # [b, ...]
        velocity = policy.velocity(noisy, sigma, cond, 1.0).float()  # [b, ...]
        log_prob = awm_log_prob(velocity, target, sigma, awm.weighting, awm.ghuber_power)  # [b] float64
        scaled = awm_advantages(advantages.to(device), self.cfg.adv_clip_max, awm.advantage_max)  # [b]
        policy_loss = awm_policy_loss(log_prob, scaled).float()
        loss = policy_loss
        kl = torch.zeros(len(batch), device=device)  # [b]
        if self.needs_reference:
            with torch.no_grad(), self.reference.active() as reference_policy:
                ref_velocity = reference_policy.velocity(noisy, sigma, cond, 1.0).float()  # [b, ...]
            kl = velocity_kl(velocity, ref_velocity)  # [b]
            loss = loss + self.cfg.kl_beta * kl.mean()
        anchor_kl = torch.zeros(len(batch), device=device)  # [b]
        if anchor_velocity is not None:
            anchor_kl = velocity_kl(velocity, anchor_velocity)  # [b]
            loss = loss + awm.anchor_kl_beta * anchor_kl.mean()
        stats = {
            "policy_loss": policy_loss.detach().expand(len(batch)),
            "kl": kl.detach(),
            "awm_anchor_kl": anchor_kl.detach(),
            "awm_matching_loss": -log_prob.detach().float(),
            "awm_advantage": scaled.detach().float(),
        }
        return loss, stats

    def after_update(self, optimizer_steps: int) -> dict[str, float]:
        """anchor ← η·anchor + (1 − η)·θ with η = min(rate · optimizer steps, max) (§11.3)."""
        self.optimizer_steps += optimizer_steps
        awm = self.cfg.awm
        decay = old_policy_decay(self.optimizer_steps, 0, awm.anchor_decay_rate, awm.anchor_decay_max)
        self.anchor.blend(decay)
        return {"awm_anchor_decay": decay}
