"""Flow-GRPO: PPO-clipped policy gradient over stored SDE trajectories (ALGORITHMS §2).

Where it fits: `compute_loss` replays one stored denoising step of a micro-batch through the
current policy with the same kernel and the same guidance as the rollout, scores the stored
next latent, and forms the clipped surrogate (+ optional KL to the reference policy).

Departures from the paper, on purpose: the log-prob is the per-dimension mean of the Gaussian
log-density and the latent-mean KL omits Δt, both as in the Flow-GRPO code (§2.2, §2.5), so
the paper's clip ranges and β values transfer.
"""

from __future__ import annotations

import torch

from genalign.algorithms.config import AlgorithmConfig
from genalign.algorithms.losses import clipped_policy_loss, latent_mean_kl, velocity_kl
from genalign.algorithms.advantages import clip_advantages
from genalign.algorithms.base import AlgorithmBase
from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.sampling.kernels import flow_sde_step, sde_noise_scale
from genalign.training.reference import ReferencePolicy


class FlowGRPO(AlgorithmBase):
    needs_old_logprob = True
    supports_multi_update = True

    def __init__(self, cfg: AlgorithmConfig, reference: ReferencePolicy | None = None,
                 parameters: dict[str, torch.nn.Parameter] | None = None):
        """`parameters` (the trained tensors) is part of the common constructor; Flow-GRPO keeps
        no copy of them."""
        self.cfg = cfg
        self.needs_reference = cfg.kl_beta > 0
        if self.needs_reference and reference is None:
            raise ValueError("algorithm.kl_beta > 0 needs a reference policy")
        self.reference = reference

    def train_step_indices(self, batch: TrajectoryBatch) -> list[int]:
        """The first int(T * timestep_fraction) stochastic steps, in order (Flow-GRPO §2.6)."""
        stochastic = torch.nonzero(batch.sde_mask).flatten().tolist()
        count = int(batch.num_steps * self.cfg.timestep_fraction)
        return stochastic[:count]

    def compute_loss(self, policy: FlowPolicy, batch: TrajectoryBatch, advantages: torch.Tensor,
                     step_index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        device = policy.device
        j = step_index
        latents = batch.latents[:, j].to(device)  # [b, ...]
        next_latents = batch.latents[:, j + 1].to(device)  # [b, ...]
        cond = batch.condition.to(device)
        sigma, sigma_next = float(batch.sigmas[j]), float(batch.sigmas[j + 1])
        sigma_guard = float(batch.sigmas[1])
        sigma_batch = torch.full((len(batch),), sigma, device=device)  # [b], filled on the device: no copy

        velocity = policy.velocity(latents, sigma_batch, cond, batch.guidance_scale,
                                   detach_uncond=self.cfg.detach_uncond).float()  # [b, ...]
        step = flow_sde_step(latents, velocity, sigma, sigma_next, batch.noise_level,
                             prev_latents=next_latents, sigma_max_guard=sigma_guard)
        old_log_probs = batch.log_probs[:, j].to(device)  # [b]
        clipped_adv = clip_advantages(advantages.to(device), self.cfg.adv_clip_max)  # [b]
        policy_out = clipped_policy_loss(step.log_prob, old_log_probs, clipped_adv, self.cfg.clip_range)

        loss = policy_out.loss
        kl = torch.zeros(len(batch), device=device)  # [b]
        if self.needs_reference:
            with torch.no_grad(), self.reference.active() as reference_policy:
                ref_velocity = reference_policy.velocity(latents, sigma_batch, cond, batch.guidance_scale).float()
            if self.cfg.kl_type == "latent_mean":
                ref_mean = flow_sde_step(latents, ref_velocity, sigma, sigma_next, batch.noise_level,
                                         prev_latents=next_latents, sigma_max_guard=sigma_guard).mean
                noise_scale = sde_noise_scale(torch.tensor(sigma), batch.noise_level, sigma_guard)  # [] on the CPU
                kl = latent_mean_kl(step.mean, ref_mean, noise_scale.to(device, non_blocking=True))  # [b]
            else:
                kl = velocity_kl(velocity, ref_velocity)  # [b]
            loss = loss + self.cfg.kl_beta * kl.mean()

        stats = {
            "policy_loss": policy_out.loss.detach().expand(len(batch)),
            "kl": kl.detach(),
            "ratio": policy_out.ratio.detach(),
            "clip_frac": policy_out.clipped_fraction.expand(len(batch)),
            "clip_frac_high": policy_out.clipped_fraction_high.expand(len(batch)),
            "clip_frac_low": policy_out.clipped_fraction_low.expand(len(batch)),
            "approx_kl": policy_out.approx_kl.expand(len(batch)),
            # |ℓ − ℓ_old|: 0 before the step's first optimizer update, then the policy's drift
            # from the sampler (the parity preflight is the on-policy check)
            "log_prob_drift": (step.log_prob.detach() - old_log_probs).abs(),
        }
        return loss, stats
