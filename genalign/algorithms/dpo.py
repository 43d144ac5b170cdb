"""Flow-DPO: Diffusion-DPO with the flow-matching target (docs/algorithms.md §5.3).

Where it fits: trains on `PreferencePairs`. Online (`algorithm.dpo.source=online`),
`training_batch` cuts one pair from each prompt group of the step's rollout — the sample with
the highest advantage (chosen) against the lowest (rejected), the online variant of verl-omni and
Flow-GRPO App. C.1; a group whose samples all score the same gives no pair. Offline, the pairs
come from a preference dataset (`training/sources.py`) and no rollout runs. `compute_loss`
noises chosen and rejected with the same σ and ε, and compares the policy's velocity error
with the reference's (adapter-disabled) on both.

Departures from Diffusion-DPO (SalesforceAIResearch/DiffusionDPO `train.py`), on purpose:
* σ is drawn from the rollout schedule's σ's (a per-pair random permutation, as DiffusionNFT
  does; `algorithm.timestep_fraction` of them per pair and step) instead of a uniform
  t ∈ [0, 1000): the flow models here are trained and sampled on that schedule.
* The regression target is the velocity ε − x0 instead of ε (the flow-matching form, as verl-omni).
* The pair's σ and ε come from generators seeded by the pair's seed, so resume is bitwise.
Training is CFG-free (guidance 1), like Diffusion-DPO (no conditioning dropout).
"""

from __future__ import annotations

import torch

from genalign.algorithms.base import AlgorithmBase
from genalign.algorithms.config import AlgorithmConfig
from genalign.algorithms.forward_draws import num_train_positions, schedule_draws
from genalign.algorithms.forward_losses import flow_dpo_loss, noised, velocity_error
from genalign.algorithms.advantages import _dense_group_index
from genalign.models.base import Condition, FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.rollout.pairs import PreferencePairs
from genalign.training.reference import ReferencePolicy


def best_worst_pairs(advantages: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group, the position of the highest and of the lowest advantage (first on ties);
    groups whose advantages are all equal are left out. [B], [B] -> chosen [P], rejected [P]."""
    dense, num_groups = _dense_group_index(group_ids)  # [B], G
    chosen, rejected = [], []
    for group in range(num_groups):
        members = torch.nonzero(dense == group).flatten()  # [n]
        values = advantages[members]  # [n]
        if values.max() > values.min():
            chosen.append(members[int(values.argmax())])
            rejected.append(members[int(values.argmin())])
    empty = torch.zeros(0, dtype=torch.long)
    return (torch.stack(chosen), torch.stack(rejected)) if chosen else (empty, empty)


class FlowDPO(AlgorithmBase):
    needs_reference = True
    needs_old_logprob = False
    supports_multi_update = True

    def __init__(self, cfg: AlgorithmConfig, reference: ReferencePolicy | None = None,
                 parameters: dict[str, torch.nn.Parameter] | None = None):
        if reference is None:
            raise ValueError("Flow-DPO compares against the reference policy; build it with one")
        self.cfg = cfg
        self.reference = reference

    def training_batch(self, batch: TrajectoryBatch, advantages: torch.Tensor) -> tuple[PreferencePairs, torch.Tensor]:
        """One (best, worst) pair per prompt group; the unit advantage is the pair's gap (> 0)."""
        chosen, rejected = best_worst_pairs(advantages, batch.group_ids)  # [P], [P]
        pairs = PreferencePairs(prompts=[batch.prompts[int(i)] for i in chosen], seeds=batch.seeds[chosen],
                                condition=batch.condition.index(chosen.to(batch.condition.embeds.device)),
                                chosen=batch.latents[chosen, -1], rejected=batch.latents[rejected, -1],
                                sigmas=batch.sigmas)
        return pairs, advantages[chosen] - advantages[rejected]

    def train_step_indices(self, pairs: PreferencePairs) -> list[int]:
        return num_train_positions(pairs.sigmas.shape[0] - 1, self.cfg.timestep_fraction)

    def compute_loss(self, policy: FlowPolicy, pairs: PreferencePairs, advantages: torch.Tensor,
                     step_index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        device = policy.device
        size = len(pairs)
        chosen, rejected = pairs.chosen.to(device), pairs.rejected.to(device)  # [P, ...] x2
        sigma, noise = schedule_draws(pairs.seeds, step_index, pairs.sigmas, tuple(chosen.shape[1:]), device)  # [P]
        noisy_w, target_w = noised(chosen, noise, sigma)  # same σ and ε for both images of a pair
        noisy_l, target_l = noised(rejected, noise, sigma)
        latents = torch.cat([noisy_w, noisy_l])  # [2P, ...]
        sigmas = torch.cat([sigma, sigma])  # [2P]
        cond = Condition.cat([pairs.condition, pairs.condition]).to(device)
        targets = torch.cat([target_w, target_l])  # [2P, ...]
        errors = velocity_error(policy.velocity(latents, sigmas, cond, 1.0), targets)  # [2P]
        with torch.no_grad(), self.reference.active() as reference_policy:
            ref_errors = velocity_error(reference_policy.velocity(latents, sigmas, cond, 1.0), targets)  # [2P]
        out = flow_dpo_loss(errors[:size], errors[size:], ref_errors[:size], ref_errors[size:], self.cfg.dpo.beta)
        stats = {"policy_loss": out.loss.detach().expand(size), "dpo_implicit_accuracy": out.implicit_accuracy,
                 "dpo_logit": out.inside, "dpo_chosen_error": errors[:size].detach(),
                 "dpo_rejected_error": errors[size:].detach()}
        return out.loss, stats
