"""DiffusionNFT: negative-aware fine-tuning on the forward process (docs/algorithms.md §4).

Where it fits: the rollout samples clean images with the *old* policy θ_old
(`rollout_weights`) using any sampler — the ODE included, nothing per-step is stored or
needed; rewards become group advantages as for Flow-GRPO, then an optimality probability
r ∈ [0, 1]. `compute_loss` noises each final latent x0 at one of the rollout schedule's σ's
with fresh ε and trains v_θ so that the implicit positive policy v⁺ fits the data weighted by
r and the implicit negative policy v⁻ by 1 − r. After each training step's optimizer round,
θ_old ← η·θ_old + (1 − η)·θ (`after_update`); θ_old is algorithm state in every checkpoint.

Departures from the official code (NVlabs/DiffusionNFT `train_nft_sd3.py`), on purpose:
* θ_old is a float32 copy of the trained tensors swapped in for the old-policy forwards and
  the rollout (`ShadowWeights`), not a second peft adapter: the same values, and it works for
  full fine-tuning and every model family alike.
* The per-sample σ permutation and ε come from generators seeded by each sample's seed
  (`forward_draws`), so resume is bitwise; the official code uses the global RNG.
* The sampler is the configured rollout (Euler ODE with rollout.noise_level=0 in the
  recipes); the official code samples with a 2nd-order DPM solver.
Training and the old/reference forwards are CFG-free (guidance 1), as in the paper; the
config refuses rollout.guidance_scale > 1, whose samples would not come from v_old.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch

from genalign.algorithms.base import ShadowCopyBase
from genalign.algorithms.forward_draws import num_train_positions, schedule_draws
from genalign.algorithms.forward_losses import nft_policy_loss, noised, old_policy_decay, optimality_probability
from genalign.algorithms.losses import velocity_kl
from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.weights.shadow import ShadowWeights


class DiffusionNFT(ShadowCopyBase):
    title = "DiffusionNFT"
    owned_options = ("nft",)
    copy_name = "old (sampling) policy"
    copy_prefix = "old_policy/"

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        """CFG-free samples from the old policy, a velocity KL, and the ranges of algorithm.nft."""
        problems = super().config_problems(cfg)
        if cfg.rollout.guidance_scale != 1.0:
            problems.append(
                f"algorithm.name=nft trains CFG-free: its samples must come from the old policy's own "
                f"velocity, so set rollout.guidance_scale=1.0 (got {cfg.rollout.guidance_scale})"
            )
        return problems + cfg.algorithm.nft.problems()

    @property
    def old(self) -> ShadowWeights:
        """θ_old, the sampling policy: the kept copy, θ at the start."""
        return self.copy

    def train_step_indices(self, batch: TrajectoryBatch) -> list[int]:
        return num_train_positions(batch.num_steps, self.cfg.timestep_fraction)

    def rollout_weights(self) -> AbstractContextManager:
        return self.old.applied()

    def compute_loss(
        self, policy: FlowPolicy, batch: TrajectoryBatch, advantages: torch.Tensor, step_index: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        device = policy.device
        clean = batch.latents[:, -1].to(device)  # [b, ...] the sampled x0
        sigma, noise = schedule_draws(batch.seeds, step_index, batch.sigmas, tuple(clean.shape[1:]), device)  # [b]
        noisy, _ = noised(clean, noise, sigma)  # [b, ...]
        cond = batch.condition.to(device)
        with torch.no_grad(), self.old.applied():
            old_velocity = policy.velocity(noisy, sigma, cond, 1.0).float()  # [b, ...]
        velocity = policy.velocity(noisy, sigma, cond, 1.0).float()  # [b, ...]
        nft = self.cfg.nft
        optimality = optimality_probability(advantages.to(device), self.cfg.adv_clip_max, nft.adv_mode)  # [b]
        out = nft_policy_loss(
            velocity,
            old_velocity,
            noisy,
            clean,
            sigma,
            optimality,
            nft.beta,
            self.cfg.adv_clip_max,
            nft.adaptive_weight_min,
        )
        loss = out.loss
        kl = torch.zeros(len(batch), device=device)  # [b]
        if self.needs_reference:
            with torch.no_grad(), self.reference.active() as reference_policy:
                ref_velocity = reference_policy.velocity(noisy, sigma, cond, 1.0).float()  # [b, ...]
            kl = velocity_kl(velocity, ref_velocity)  # [b]
            loss = loss + self.cfg.kl_beta * kl.mean()
        stats = {
            "policy_loss": out.loss.detach().expand(len(batch)),
            "kl": kl.detach(),
            "nft_positive_loss": out.positive_loss,
            "nft_negative_loss": out.negative_loss,
            "nft_optimality": optimality.detach(),
            "old_velocity_gap": velocity_kl(velocity.detach(), old_velocity),
        }
        return loss, stats

    def after_update(self, optimizer_steps: int) -> dict[str, float]:
        """θ_old ← η·θ_old + (1 − η)·θ with η from the step count after this round (§4.2)."""
        self.optimizer_steps += optimizer_steps
        nft = self.cfg.nft
        decay = old_policy_decay(self.optimizer_steps, nft.old_decay_flat, nft.old_decay_rate, nft.old_decay_max)
        self.old.blend(decay)
        return {"old_policy_decay": decay}
