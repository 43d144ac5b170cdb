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
from genalign.algorithms.losses import (clipped_surrogate, latent_mean_kl, ratio_norm_log_ratio,
                                        rollout_correction_weights, velocity_kl)
from genalign.algorithms.replay import ReplayedStep, replay_log_probs, replay_step, score_stored_step
from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.training.reference import ReferencePolicy


GUARD_BIASES = ("micro_batch", "per_sample")


class FlowGRPO(ClippedRatioBase):
    title = "Flow-GRPO"
    cfg: AlgorithmConfig
    reference: ReferencePolicy | None

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        """Flow-GRPO trains on SDE log-probs: an all-ODE rollout has none."""
        problems = super().config_problems(cfg)
        if cfg.rollout.noise_level == 0:
            problems.append("rollout.noise_level=0 makes every step deterministic: Flow-GRPO has no log-probs to "
                            "train; use the Flow-GRPO value 0.7")
        return problems

    def train_step_indices(self, batch: TrajectoryBatch) -> list[int]:
        """int(T * timestep_fraction) stochastic steps: the first ones in order (Flow-GRPO
        §2.6), or with timestep_selection=random a random subset without the final step
        (DanceGRPO §3.1), drawn from the batch's seeds so every caller gets the same list."""
        stochastic = torch.nonzero(batch.sde_mask).flatten()  # [S]
        count = int(batch.num_steps * self.cfg.timestep_fraction)
        if self.cfg.timestep_selection == "first":
            return stochastic[:count].tolist()
        candidates = stochastic[stochastic < batch.num_steps - 1]  # [S'] the final step never
        generator = torch.Generator().manual_seed(int(batch.seeds.sum()) % 2**63)
        chosen = candidates[torch.randperm(len(candidates), generator=generator)[:count]]  # [<=count]
        return sorted(chosen.tolist())

    def prepare_update(self, policy: FlowPolicy, batch: TrajectoryBatch, step_indices: list[int],
                       micro_batch_size: int) -> TrajectoryBatch:
        """Before the first optimizer step: with rollout correction on, record the current
        policy's log-probs of the trained steps (the proximal policy); otherwise the batch as is."""
        if self.cfg.rollout_correction.mode == "off":
            return batch
        proximal = replay_log_probs(policy, batch, step_indices, micro_batch_size)  # [B, T]
        return dataclasses.replace(batch, proximal_log_probs=proximal)

    def compute_loss(self, policy: FlowPolicy, batch: TrajectoryBatch, advantages: torch.Tensor,
                     step_index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        device = policy.device
        j = step_index
        replayed = replay_step(policy, batch, j, detach_uncond=self.cfg.detach_uncond)
        step = replayed.step
        behaviour_log_probs = batch.log_probs[:, j].to(device)  # [b] recorded by the rollout
        correction = self.cfg.rollout_correction
        if correction.mode == "off":
            old_log_probs, weights = behaviour_log_probs, None
        else:
            old_log_probs = batch.proximal_log_probs[:, j].to(device)  # [b]
            weights = rollout_correction_weights(old_log_probs, behaviour_log_probs, correction.mode,
                                                 correction.threshold)  # [b]
        clipped_adv = clip_advantages(advantages.to(device), self.cfg.adv_clip_max)  # [b]
        log_ratio = self.log_ratio(step.log_prob, old_log_probs, replayed, batch, j)  # [b]
        policy_out = clipped_surrogate(log_ratio, clipped_adv, self.cfg.clip_range, weights)
        policy_loss = policy_out.loss * self.step_weight(batch, j)

        loss = policy_loss
        kl = torch.zeros(len(batch), device=device)  # [b]
        if self.needs_reference:
            kl = self.reference_kl(batch, j, replayed)
            loss = loss + self.cfg.kl_beta * kl.mean()

        stats = {
            "policy_loss": policy_loss.detach().expand(len(batch)),
            "kl": kl.detach(),
            "ratio": policy_out.ratio.detach(),
            "clip_frac": policy_out.clipped_fraction.expand(len(batch)),
            "clip_frac_high": policy_out.clipped_fraction_high.expand(len(batch)),
            "clip_frac_low": policy_out.clipped_fraction_low.expand(len(batch)),
            "approx_kl": policy_out.approx_kl.expand(len(batch)),
            # |ℓ − ℓ_rollout|: 0 before the step's first optimizer update, then the policy's
            # drift from the sampler (the parity preflight is the on-policy check)
            "log_prob_drift": (step.log_prob.detach() - behaviour_log_probs).abs(),
        }
        if weights is not None:
            stats["rollout_is_weight"] = weights
            stats["rollout_is_raw_log_ratio"] = (old_log_probs - behaviour_log_probs).detach()
        return loss, stats

    def log_ratio(self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, replayed: ReplayedStep,
                  batch: TrajectoryBatch, j: int) -> torch.Tensor:
        """log r [b] with grad: ℓ_θ − ℓ_old (Flow-GRPO)."""
        return log_probs - old_log_probs.detach()

    def step_weight(self, batch: TrajectoryBatch, j: int) -> float:
        """Multiplier of step j's policy loss: 1 (Flow-GRPO)."""
        return 1.0

    def reference_kl(self, batch: TrajectoryBatch, j: int, replayed: ReplayedStep) -> torch.Tensor:
        """KL [b] to the reference (adapter-disabled) policy at step j (docs/algorithms.md §2.5)."""
        with torch.no_grad(), self.reference.active() as reference_policy:
            ref_velocity = reference_policy.velocity(batch.latents[:, j].to(replayed.velocity.device),
                                                     replayed.sigma_batch, batch.condition.to(replayed.velocity.device),
                                                     batch.guidance_scale).float()  # [b, ...]
        if self.cfg.kl_type == "latent_mean":
            ref_mean = score_stored_step(batch, j, ref_velocity).mean  # [b, ...]
            return latent_mean_kl(replayed.step.mean, ref_mean, replayed.step.noise_scale)  # [b]
        return velocity_kl(replayed.velocity, ref_velocity)  # [b]


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
        from genalign.sampling.kernels import GAUSSIAN_KERNELS

        problems = super().config_problems(cfg)
        rollout, algorithm = cfg.rollout, cfg.algorithm
        if algorithm.guard.bias not in GUARD_BIASES:
            problems.append(f"algorithm.guard.bias={algorithm.guard.bias!r}: choose one of {', '.join(GUARD_BIASES)}")
        if rollout.kernel not in GAUSSIAN_KERNELS:
            problems.append(f"algorithm.name=grpo_guard normalises a Gaussian log-ratio; rollout.kernel="
                            f"{rollout.kernel!r} has none. Use one of: {', '.join(GAUSSIAN_KERNELS)}")
        if algorithm.rollout_correction.mode != "off":
            problems.append("algorithm.name=grpo_guard with algorithm.rollout_correction.mode="
                            f"{algorithm.rollout_correction.mode!r}: RatioNorm compares with the rollout's own "
                            "kernel means, so it cannot be taken against recomputed log-probs; set mode=off")
        return problems

    def log_ratio(self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, replayed: ReplayedStep,
                  batch: TrajectoryBatch, j: int) -> torch.Tensor:
        if batch.means is None:
            raise ValueError("algorithm.name=grpo_guard needs the rollout kernel means; the trajectory has none "
                             "(the rollout spec must set record_means)")
        old_mean = batch.means[:, j].to(replayed.step.mean.device)  # [b, ...]
        return ratio_norm_log_ratio(log_probs, old_log_probs, replayed.step.mean, old_mean, replayed.step.std,
                                    per_sample_bias=self.cfg.guard.bias == "per_sample")

    def step_weight(self, batch: TrajectoryBatch, j: int) -> float:
        if not self.cfg.guard.reweight:
            return 1.0
        return 1.0 / float(batch.sigmas[j] - batch.sigmas[j + 1])  # 1 / mean(h)², h = sqrt(−Δσ)
