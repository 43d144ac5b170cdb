"""Flow-matching SFT: the rectified-flow pretraining loss on clean images (docs/algorithms.md §12).

Where it fits: trains on `CleanSamples`. From a dataset (`algorithm.sft.source=dataset`), the
images of `data.image_manifest` are encoded once by the family's encoder
(`training/sources.py`) and no rollout runs; online (`best_of_n`), `training_batch` keeps the
`algorithm.sft.keep_per_group` highest-reward samples of each prompt group of the step's
rollout (rejection-sampling fine-tuning: RAFT, the best-of-N baseline of the RL papers).
`compute_loss` draws σ the way diffusers' SD3 training scripts do — u from the SD3 paper's
timestep density (`algorithm.sft.weighting_scheme`, logit-normal by default), σ = the
scheduler's training table at ⌊u·T⌋ — noises x0 with fresh ε, and regresses the model's
prediction: the x0 estimate x_σ − σ·v̂ on x0 with `precondition_outputs` (diffusers' default),
else v̂ on ε − x0, each weighted by `sd3_loss_weighting`.

Departures from diffusers' `train_dreambooth_lora_sd3.py`, on purpose:
* u and ε come from generators seeded by each sample's seed and the training position
  (`forward_draws.density_draws`), so a sample's draws do not depend on its micro-batch and
  resume is bitwise; diffusers draws from the global RNG.
* The training σ table's shift is `algorithm.sft.timestep_shift` (the family's scheduler
  shift; the reference reads it from the scheduler it loads).
* No prior preservation and no text-encoder training (DreamBooth's options); training is
  CFG-free (the conditional velocity, guidance 1), as the reference's.
No reference model, no log-probs, no algorithm state: the checkpoint is the trained weights.
"""

from __future__ import annotations

from functools import partial
from typing import get_args

import torch

from genalign.algorithms.advantages import _dense_group_index
from genalign.algorithms.base import AlgorithmBase
from genalign.algorithms.config import AlgorithmConfig, SFTTiedGroups
from genalign.algorithms.forward_draws import density_draws
from genalign.algorithms.forward_losses import (
    density_sigmas,
    flow_matching_loss,
    noised,
    sd3_loss_weighting,
    timestep_density,
    training_sigma_table,
)
from genalign.models.base import FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.rollout.samples import CleanSamples

SFT_TIED_GROUPS = get_args(SFTTiedGroups)


def top_of_groups(
    advantages: torch.Tensor, group_ids: torch.Tensor, keep: int, tied_groups: SFTTiedGroups = "keep"
) -> torch.Tensor:
    """Per group, the positions of its `keep` highest advantages (all of a smaller group),
    highest first, ties in batch order; groups in the order of their sorted ids. A group whose
    advantages all tie gives its first `keep` ("keep") or none ("drop").
    [B], [B] -> [K] int64."""
    if tied_groups not in SFT_TIED_GROUPS:
        raise ValueError(f"algorithm.sft.tied_groups={tied_groups!r}: choose one of {', '.join(SFT_TIED_GROUPS)}")
    dense, num_groups = _dense_group_index(group_ids)  # [B], G
    kept = []
    for group in range(num_groups):
        members = torch.nonzero(dense == group).flatten()  # [n] in batch order
        values = advantages[members]  # [n]
        if tied_groups == "drop" and not values.max() > values.min():
            continue
        order = torch.sort(values, descending=True, stable=True).indices  # [n]
        kept.append(members[order[:keep]])
    return torch.cat(kept) if kept else torch.zeros(0, dtype=torch.long)


class FlowSFT(AlgorithmBase):
    title = "flow-matching SFT"
    needs_reference = False
    needs_old_logprob = False
    owned_options = ("sft",)
    stat_extremes = {"sft_sigma": ("min", "max")}

    @classmethod
    def reference_kind(cls, cfg: AlgorithmConfig) -> str:
        """No reference: the loss is plain regression (algorithm.kl_beta is refused)."""
        return "none"

    @classmethod
    def data_source(cls, cfg: AlgorithmConfig) -> str:
        """algorithm.sft.source: an image–prompt dataset, or the online rollout (best of N)."""
        return "images" if cfg.sft.source == "dataset" else "online"

    @classmethod
    def train_positions(cls, cfg: AlgorithmConfig) -> int:
        """`algorithm.sft.draws_per_sample` (σ, ε) draws per sample, not the rollout's steps."""
        return cfg.sft.draws_per_sample

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        """Data to train on (an image manifest, or groups to pick from), no KL, and the ranges
        of algorithm.sft."""
        problems = super().config_problems(cfg)
        algorithm, sft = cfg.algorithm, cfg.algorithm.sft
        problems += sft.problems()
        if algorithm.kl_beta > 0:
            problems.append(
                f"algorithm.kl_beta={algorithm.kl_beta} is unused by algorithm.name=sft (plain regression "
                "on the data, no reference model): set it to 0"
            )
        if sft.source == "dataset" and cfg.data.image_manifest is None:
            problems.append(
                "algorithm.sft.source=dataset needs data.image_manifest (a .jsonl of prompt/image rows, "
                "docs/preference_data.md#image-prompt-data-flow-matching-sft)"
            )
        if sft.source == "best_of_n" and cfg.rollout.n <= sft.keep_per_group:
            problems.append(
                f"algorithm.sft.source=best_of_n keeps the best {sft.keep_per_group} of each prompt group: "
                f"rollout.n must be > algorithm.sft.keep_per_group, got {cfg.rollout.n}"
            )
        return problems

    def __init__(self, cfg: AlgorithmConfig, reference=None, parameters: dict[str, torch.nn.Parameter] | None = None):
        self.cfg = cfg
        self.reference = None
        sft = cfg.sft
        self.sigma_table = training_sigma_table(sft.num_train_timesteps, sft.timestep_shift)  # [T]
        self.draw_u = partial(
            timestep_density, sft.weighting_scheme, 1, sft.logit_mean, sft.logit_std, sft.mode_scale
        )  # generator -> [1]

    def training_batch(self, batch: TrajectoryBatch, advantages: torch.Tensor) -> tuple[CleanSamples, torch.Tensor]:
        """The best `keep_per_group` final latents of each prompt group; unit advantages 1 (the
        loss does not read them: every kept sample weighs the same)."""
        sft = self.cfg.sft
        kept = top_of_groups(advantages, batch.group_ids, sft.keep_per_group, sft.tied_groups)  # [K]
        return self._clean(batch, kept), torch.ones(len(kept))

    def filler_unit(self, batch: TrajectoryBatch) -> CleanSamples:
        """Sample 0 (a rank whose groups all tied under tied_groups=drop replays it with weight 0)."""
        return self._clean(batch, torch.tensor([0]))

    @staticmethod
    def _clean(batch: TrajectoryBatch, positions: torch.Tensor) -> CleanSamples:
        return CleanSamples(
            prompts=[batch.prompts[int(i)] for i in positions],
            seeds=batch.seeds[positions],
            condition=batch.condition.index(positions.to(batch.condition.device)),
            latents=batch.latents[positions, -1],
        )

    def train_step_indices(self, samples: CleanSamples) -> list[int]:
        return list(range(self.train_positions(self.cfg)))

    def compute_loss(
        self, policy: FlowPolicy, samples: CleanSamples, advantages: torch.Tensor, step_index: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        sft, device = self.cfg.sft, policy.device
        clean = samples.latents.to(device)  # [B, ...]
        u, noise = density_draws(samples.seeds, step_index, tuple(clean.shape[1:]), self.draw_u)  # [B], [B, ...]
        sigma = density_sigmas(u, self.sigma_table).to(device)  # [B]
        noisy, _ = noised(clean, noise.to(device), sigma)  # [B, ...]
        velocity = policy.velocity(noisy, sigma, samples.condition.to(device), 1.0)  # [B, ...]
        weight = sd3_loss_weighting(sft.weighting_scheme, sigma)  # [B]
        per_sample = flow_matching_loss(
            velocity, noisy, clean, noise.to(device), sigma, weight, sft.precondition_outputs
        )  # [B]
        loss = per_sample.mean()
        return loss, {"policy_loss": per_sample.detach(), "sft_sigma": sigma.detach()}
