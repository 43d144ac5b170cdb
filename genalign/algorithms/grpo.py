"""Flow-GRPO: PPO-clipped policy gradient over stored SDE trajectories (docs/algorithms.md §2), and
GRPO-Guard (§3.3) as a thin subclass that changes only the log-ratio and the step weight.

Where it fits: `compute_loss` replays one stored denoising step of a micro-batch through the
current policy with the rollout's kernel and guidance (`algorithms/replay.py`), scores the
stored next latent, and forms the clipped surrogate (+ optional KL to the reference policy).
Flow-GRPO-Fast, CPS, MixGRPO and DanceGRPO are this same class with a different rollout
kernel / SDE window / timestep selection (recipes, not classes).

Departures from the paper, on purpose: the log-prob is the per-dimension mean of the Gaussian
log-density and the latent-mean KL omits Δt, both as in the Flow-GRPO code (§2.2, §2.5), so
the paper's clip ranges and β values transfer.
"""

from __future__ import annotations

import dataclasses

import torch

from genalign.algorithms.advantages import clip_advantages
from genalign.algorithms.base import ClippedRatioBase
from genalign.algorithms.config import AlgorithmConfig
from genalign.algorithms.losses import (
    clipped_surrogate,
    latent_mean_kl,
    ratio_norm_log_ratio,
    rollout_correction_weights,
    velocity_kl,
)
from genalign.algorithms.replay import ReplayedStep, at_steps, replay_log_probs, replay_step, score_stored_step
from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.sampling.kernels import GAUSSIAN_KERNELS
from genalign.sampling.windows import trained_steps
from genalign.weights.reference import ReferencePolicy


class FlowGRPO(ClippedRatioBase):
    title = "Flow-GRPO"
    cfg: AlgorithmConfig
    reference: ReferencePolicy | None

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        """Flow-GRPO trains on SDE log-probs: an all-ODE rollout has none."""
        problems = super().config_problems(cfg)
        if cfg.rollout.noise_level == 0:
            problems.append(
                "rollout.noise_level=0 makes every step deterministic: Flow-GRPO has no log-probs to "
                "train; use the Flow-GRPO value 0.7"
            )
        return problems

    def trained_steps(self, batch: TrajectoryBatch) -> torch.Tensor:
        """[B, K] int64: the denoising steps each sample trains, from its own stochastic steps
        (samples of one step may carry different SDE windows): int(T * timestep_fraction) of
        them, the first ones in order (Flow-GRPO §2.6), or with timestep_selection=random a
        random subset without the final step drawn from the sample's seed (DanceGRPO §3.1).
        A function of each sample alone, so a micro-batch gets its rows of the whole batch's."""
        count = int(batch.num_steps * self.cfg.timestep_fraction)
        return trained_steps(batch.sde_mask, count, self.cfg.timestep_selection, batch.seeds)

    def train_step_indices(self, batch: TrajectoryBatch) -> list[int]:
        """Training positions 0..K−1; at position p sample b trains step `trained_steps[b, p]`."""
        return list(range(self.trained_steps(batch).shape[1]))

    def replay_log_probs(
        self, policy: FlowPolicy, batch: TrajectoryBatch, step_indices: list[int], chunk_size: int
    ) -> torch.Tensor:
        """`batch.log_probs` [B, T] with each sample's trained steps at positions `step_indices`
        recomputed under `policy` (no grad, CPU)."""
        return replay_log_probs(policy, batch, self.trained_steps(batch)[:, step_indices], chunk_size)

    def prepare_update(
        self, policy: FlowPolicy, batch: TrajectoryBatch, step_indices: list[int], micro_batch_size: int
    ) -> TrajectoryBatch:
        """Before the first optimizer step: with rollout correction on, record the current
        policy's log-probs of the trained steps (the proximal policy); otherwise the batch as is."""
        if self.cfg.rollout_correction.mode == "off":
            return batch
        proximal = self.replay_log_probs(policy, batch, step_indices, micro_batch_size)  # [B, T]
        return dataclasses.replace(batch, proximal_log_probs=proximal)

    def compute_loss(
        self, policy: FlowPolicy, batch: TrajectoryBatch, advantages: torch.Tensor, step_index: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        device = policy.device
        j = self.trained_steps(batch)[:, step_index]  # [b] each sample's denoising step at this position
        replayed = replay_step(policy, batch, j, detach_uncond=self.cfg.detach_uncond)
        step = replayed.step
        behaviour_log_probs = at_steps(batch.log_probs, j).to(device)  # [b] recorded by the rollout
        correction = self.cfg.rollout_correction
        if correction.mode == "off":
            old_log_probs, weights = behaviour_log_probs, None
        else:
            old_log_probs = at_steps(batch.proximal_log_probs, j).to(device)  # [b]
            weights = rollout_correction_weights(
                old_log_probs, behaviour_log_probs, correction.mode, correction.threshold
            )  # [b]
        clipped_adv = clip_advantages(advantages.to(device), self.cfg.adv_clip_max)  # [b]
        log_ratio = self.log_ratio(step.log_prob, old_log_probs, replayed, batch, j)  # [b]
        surrogate, surrogate_stats = self.surrogate(log_ratio, clipped_adv, weights, replayed, batch, j)
        policy_loss = surrogate * self.step_weight(batch, j)

        loss = policy_loss
        kl = torch.zeros(len(batch), device=device)  # [b]
        if self.needs_reference:
            kl = self.reference_kl(batch, j, replayed)
            loss = loss + self.cfg.kl_beta * kl.mean()

        stats = {
            "policy_loss": policy_loss.detach().expand(len(batch)),
            "kl": kl.detach(),
            **surrogate_stats,
            # |ℓ − ℓ_rollout|: 0 before the step's first optimizer update, then the policy's
            # drift from the sampler (the parity preflight is the on-policy check)
            "log_prob_drift": (step.log_prob.detach() - behaviour_log_probs).abs(),
        }
        if weights is not None:
            stats["rollout_is_weight"] = weights
            stats["rollout_is_raw_log_ratio"] = (old_log_probs - behaviour_log_probs).detach()
        return loss, stats

    def surrogate(
        self,
        log_ratio: torch.Tensor,
        advantages: torch.Tensor,
        weights: torch.Tensor | None,
        replayed: ReplayedStep,
        batch: TrajectoryBatch,
        j: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(policy loss [], detached [b] statistics) of log r [b] and Â [b] at steps j [b]: the
        PPO clip of the ratio (Flow-GRPO); Flow-DPPO bounds the step's KL instead."""
        out = clipped_surrogate(log_ratio, advantages, self.cfg.clip_range, weights)
        size = len(log_ratio)
        return out.loss, {
            "ratio": out.ratio,
            "clip_frac": out.clipped_fraction.expand(size),
            "clip_frac_high": out.clipped_fraction_high.expand(size),
            "clip_frac_low": out.clipped_fraction_low.expand(size),
            "approx_kl": out.approx_kl.expand(size),
        }

    def log_ratio(
        self,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        replayed: ReplayedStep,
        batch: TrajectoryBatch,
        j: torch.Tensor,
    ) -> torch.Tensor:
        """log r [b] with grad: ℓ_θ − ℓ_old (Flow-GRPO)."""
        return log_probs - old_log_probs.detach()

    def step_weight(self, batch: TrajectoryBatch, j: torch.Tensor) -> float:
        """Multiplier of the policy loss at steps j [b]: 1 (Flow-GRPO)."""
        return 1.0

    def reference_kl(self, batch: TrajectoryBatch, j: torch.Tensor, replayed: ReplayedStep) -> torch.Tensor:
        """KL [b] to the reference (adapter-disabled) policy at each sample's step j [b] (docs/algorithms.md §2.5)."""
        with torch.no_grad(), self.reference.active() as reference_policy:
            ref_velocity = reference_policy.velocity(
                at_steps(batch.latents, j).to(replayed.velocity.device),
                replayed.sigma_batch,
                batch.condition.to(replayed.velocity.device),
                batch.guidance_scale,
            ).float()  # [b, ...]
        if self.cfg.kl_type == "latent_mean":
            ref_mean = score_stored_step(batch, j, ref_velocity).mean  # [b, ...]
            return latent_mean_kl(replayed.step.mean, ref_mean, replayed.step.noise_scale)  # [b]
        return velocity_kl(replayed.velocity, ref_velocity)  # [b]


def rollout_means_problems(cfg, needs: str, compares: str) -> list[str]:
    """Checks of an algorithm that compares with the rollout's kernel means μ_old
    (`needs_rollout_means`: GRPO-Guard, Flow-DPPO): the kernel is Gaussian (`needs` says what
    for), and the ratio is the rollout's own, not one against recomputed log-probs (`compares`
    names what compares)."""
    rollout, algorithm = cfg.rollout, cfg.algorithm
    problems = []
    if rollout.kernel not in GAUSSIAN_KERNELS:
        problems.append(
            f"algorithm.name={algorithm.name} {needs}; rollout.kernel="
            f"{rollout.kernel!r} has none. Use one of: {', '.join(GAUSSIAN_KERNELS)}"
        )
    if algorithm.rollout_correction.mode != "off":
        problems.append(
            f"algorithm.name={algorithm.name} with algorithm.rollout_correction.mode="
            f"{algorithm.rollout_correction.mode!r}: {compares} compares with the rollout's own "
            "kernel means, so it cannot be taken against recomputed log-probs; set mode=off"
        )
    return problems


class GRPOGuard(FlowGRPO):
    """GRPO-Guard (docs/algorithms.md §3.3; flow_grpo `train_sd3_GRPO_Guard.py`, verl-omni `GRPOGuardLoss`):
    the clipped surrogate on RatioNorm's normalised log-ratio, each step's loss divided by
    mean(h)² = |Δσ_j| (algorithm.guard.reweight). Needs the rollout's kernel means μ_old and a
    Gaussian kernel (validated at config time)."""

    title = "GRPO-Guard"

    needs_rollout_means = True
    owned_options = ("guard",)

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        """RatioNorm needs a Gaussian kernel and the rollout's own log-probs."""
        problems = super().config_problems(cfg)
        problems += rollout_means_problems(cfg, "normalises a Gaussian log-ratio", "RatioNorm")
        rollout, algorithm = cfg.rollout, cfg.algorithm
        window = rollout.sde_window
        if window.size > 0 and window.schedule == "random" and window.draw == "per_batch":
            problems.append(
                "algorithm.name=grpo_guard with a random rollout.sde_window drawn per sampling batch: "
                "RatioNorm normalises each micro-batch at one denoising step, but samples of different "
                "sampling batches train different steps; set rollout.sde_window.draw=per_step"
            )
        if algorithm.timestep_selection == "random":
            problems.append(
                "algorithm.name=grpo_guard with algorithm.timestep_selection=random: each sample draws "
                "its own steps, but RatioNorm normalises each micro-batch at one denoising step; use "
                "algorithm.timestep_selection=first"
            )
        return problems

    def log_ratio(
        self,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        replayed: ReplayedStep,
        batch: TrajectoryBatch,
        j: torch.Tensor,
    ) -> torch.Tensor:
        if batch.means is None:
            raise ValueError(
                "algorithm.name=grpo_guard needs the rollout kernel means; the trajectory has none "
                "(the rollout spec must set record_means)"
            )
        if len(j) and not bool((j == j[0]).all()):  # RatioNorm pools one σ's std over the micro-batch
            raise ValueError(
                "algorithm.name=grpo_guard normalises a micro-batch at one denoising step, but its "
                f"samples train steps {sorted(set(j.tolist()))} (SDE windows drawn per sampling "
                "batch); set rollout.sde_window.draw=per_step"
            )
        old_mean = at_steps(batch.means, j).to(replayed.step.mean.device)  # [b, ...]
        return ratio_norm_log_ratio(
            log_probs,
            old_log_probs,
            replayed.step.mean,
            old_mean,
            replayed.step.std,
            per_sample_bias=self.cfg.guard.bias == "per_sample",
        )

    def step_weight(self, batch: TrajectoryBatch, j: torch.Tensor) -> float:
        if not self.cfg.guard.reweight:
            return 1.0
        step = int(j[0])  # one step per micro-batch (checked by log_ratio)
        return 1.0 / float(batch.sigmas[step] - batch.sigmas[step + 1])  # 1 / mean(h)², h = sqrt(−Δσ)
