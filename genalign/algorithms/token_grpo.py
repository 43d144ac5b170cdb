"""AR-GRPO: the GRPO clipped surrogate on image tokens of a token-autoregressive policy.

Where it fits: step 5 of the loop for `TokenTrajectoryBatch`es (Janus-Pro). The rollout,
rewards, group-normalised advantages, update loop, checkpointing and the parity preflight are
the flow families' own; only what a trajectory's log-prob *is* differs, and it comes from the
policy: `token_log_probs` scores all N image tokens with one teacher-forced forward over both
CFG streams. A token trajectory therefore has one trained position (`train_step_indices` =
[0]) whose log-probs are a [b, N] vector.

Loss (per token, then the mean over tokens and samples), as the reference AR-GRPO code
aggregates it — T2I-R1's Janus `grpo_trainer.py` (built on trl's GRPOTrainer):
`loss = (per_token_loss * mask).sum() / mask.sum()` with every image token unmasked, i.e. the
mean over the b·N tokens of

    −min(r_t Â, clip(r_t, 1 − ε, 1 + ε) Â) + β · k3_t,   r_t = exp(ℓ_t − ℓ_old,t)

(trl's clipped form with ε = algorithm.clip_range; T2I-R1 takes one update per rollout, where
r_t ≡ 1 and the clip is inactive). Every image has N tokens, so this equals the per-sample
token mean averaged over samples. k3 is `losses.token_kl` to the LoRA-disabled reference.

Departure from T2I-R1, on purpose and named: its replay scores the tokens with the
*conditional* stream alone, although they were sampled with CFG; by default
(algorithm.token_log_prob=guided) the log-prob here is of the distribution that sampled them
(CFG and temperature included), so the ratio is of the sampling policy (docs/algorithms.md
§6.1); algorithm.token_log_prob=conditional scores as T2I-R1 does. Either way the
rollout records the kind replay computes, so the ratio is exactly 1 before the update.
"""

from __future__ import annotations

import dataclasses

import torch

from genalign.algorithms.advantages import clip_advantages
from genalign.algorithms.base import ClippedRatioBase
from genalign.algorithms.config import AlgorithmConfig
from genalign.algorithms.losses import clipped_surrogate, rollout_correction_weights, token_kl
from genalign.models.base import TokenPolicy
from genalign.rollout.token_batch import TokenTrajectoryBatch
from genalign.weights.reference import ReferencePolicy


def replayed_token_log_probs(
    policy: TokenPolicy, batch: TokenTrajectoryBatch, detach_uncond: bool = False
) -> torch.Tensor:
    """log π_θ of the stored tokens [b, N] float32 with the guidance the rollout scored them at
    and its temperature (grad follows the caller's mode): the one function rollout, parity and
    the loss share."""
    device = policy.device
    return policy.token_log_probs(
        batch.condition.to(device),
        batch.tokens.to(device),
        batch.scored_guidance_scale,
        batch.temperature,
        detach_uncond=detach_uncond,
    ).float()


class TokenGRPO(ClippedRatioBase):
    title = "AR-GRPO"
    cfg: AlgorithmConfig
    reference: ReferencePolicy | None
    policy_kind = "token"
    owned_options = ("token_log_prob",)

    @classmethod
    def guided_log_probs(cls, cfg: AlgorithmConfig) -> bool:
        """algorithm.token_log_prob: the rollout records the log-prob the ratio and KL use."""
        return cfg.token_log_prob == "guided"

    def train_step_indices(self, batch: TokenTrajectoryBatch) -> list[int]:
        """One position: the whole token sequence."""
        return [0]

    @torch.no_grad()
    def replay_log_probs(
        self, policy: TokenPolicy, batch: TokenTrajectoryBatch, step_indices: list[int], chunk_size: int
    ) -> torch.Tensor:
        """Log-probs [B, 1, N] (CPU float32) of the stored tokens under `policy`, in chunks."""
        return torch.cat([replayed_token_log_probs(policy, chunk).cpu() for chunk in batch.split(chunk_size)])[:, None]

    def prepare_update(
        self, policy: TokenPolicy, batch: TokenTrajectoryBatch, step_indices: list[int], micro_batch_size: int
    ) -> TokenTrajectoryBatch:
        """With rollout correction on, record the current policy's token log-probs first."""
        if self.cfg.rollout_correction.mode == "off":
            return batch
        proximal = self.replay_log_probs(policy, batch, step_indices, micro_batch_size)  # [B, 1, N]
        return dataclasses.replace(batch, proximal_log_probs=proximal)

    def compute_loss(
        self, policy: TokenPolicy, batch: TokenTrajectoryBatch, advantages: torch.Tensor, step_index: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        device = policy.device
        log_probs = replayed_token_log_probs(policy, batch, self.cfg.detach_uncond)  # [b, N] with grad
        behaviour = batch.log_probs[:, step_index].to(device)  # [b, N] recorded by the rollout
        correction = self.cfg.rollout_correction
        if correction.mode == "off":
            old_log_probs, weights = behaviour, None
        else:  # token-level importance weights, as verl's token-level TIS
            old_log_probs = batch.proximal_log_probs[:, step_index].to(device)  # [b, N]
            weights = rollout_correction_weights(
                old_log_probs, behaviour, correction.mode, correction.threshold
            )  # [b, N]
        clipped_adv = clip_advantages(advantages.to(device), self.cfg.adv_clip_max)  # [b]
        token_adv = clipped_adv[:, None].expand_as(log_probs)  # [b, N] one advantage per sample
        policy_out = clipped_surrogate(log_probs - old_log_probs.detach(), token_adv, self.cfg.clip_range, weights)
        loss = policy_out.loss
        kl = torch.zeros(len(batch), device=device)  # [b]
        if self.needs_reference:
            with torch.no_grad(), self.reference.active() as reference_policy:
                ref_log_probs = replayed_token_log_probs(reference_policy, batch)  # [b, N]
            per_token_kl = token_kl(log_probs, ref_log_probs)  # [b, N]
            kl = per_token_kl.mean(dim=1)  # [b]
            loss = loss + self.cfg.kl_beta * per_token_kl.mean()
        stats = {
            "policy_loss": policy_out.loss.detach().expand(len(batch)),
            "kl": kl.detach(),
            "ratio": policy_out.ratio.detach(),  # [b, N] per token
            "clip_frac": policy_out.clipped_fraction.expand(len(batch)),
            "clip_frac_high": policy_out.clipped_fraction_high.expand(len(batch)),
            "clip_frac_low": policy_out.clipped_fraction_low.expand(len(batch)),
            "approx_kl": policy_out.approx_kl.expand(len(batch)),
            "log_prob_drift": (log_probs.detach() - behaviour).abs(),  # [b, N]
        }
        if weights is not None:
            stats["rollout_is_weight"] = weights
        return loss, stats
