"""Flow-DPO: Diffusion-DPO with the flow-matching target (docs/algorithms.md §5.3).

Where it fits: trains on `PreferencePairs`. Online (`algorithm.dpo.source=online`),
`training_batch` cuts one pair from each prompt group of the step's rollout — the sample with
the highest advantage (chosen) against the lowest (rejected), the online variant of verl-omni and
Flow-GRPO App. C.1; a group whose samples all score the same pairs its second sample over its
first, as Flow-GRPO's `PerPromptStatTracker` does for DPO (`algorithm.dpo.tied_groups=pair`),
or gives no pair (`drop`). Offline, the pairs
come from a preference dataset (`training/sources.py`) and no rollout runs. `compute_loss`
noises chosen and rejected with the same σ and ε, and compares the policy's velocity error
with the reference's on both.

The reference, as in Flow-GRPO's `train_sd3_dpo.py`: a second set of values for the trained
tensors (`ShadowWeights`; the reference code keeps a second LoRA adapter), equal to the weights
training starts from (for a fresh LoRA, the base model), copied from the learner every
`algorithm.dpo.ref_update_step` optimizer steps (`after_update`), and — online, with
`algorithm.dpo.sample_with=reference` — the weights the rollout samples the pairs with
(`rollout_weights`). It is algorithm state in every checkpoint.

Departures from Flow-GRPO's `train_sd3_dpo.py` and Diffusion-DPO (SalesforceAIResearch/
DiffusionDPO `train.py`), on purpose:
* σ is drawn from the rollout schedule's σ's (a per-pair random permutation, as DiffusionNFT
  does; `algorithm.timestep_fraction` of them per pair and step) instead of a logit-normal
  (Flow-GRPO) or uniform (Diffusion-DPO) training timestep: the same draws as DiffusionNFT's.
* The regression target is the velocity ε − x0 (the flow-matching form, as Flow-GRPO and verl-omni;
  Diffusion-DPO regresses ε).
* The pair's σ and ε come from generators seeded by the pair's seed, so resume is bitwise.
Training is CFG-free (guidance 1), like Diffusion-DPO (no conditioning dropout).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import get_args

import torch

from genalign.algorithms.advantages import _dense_group_index
from genalign.algorithms.base import AlgorithmBase
from genalign.algorithms.config import AlgorithmConfig, DPOTiedGroups
from genalign.algorithms.forward_draws import num_train_positions, schedule_draws
from genalign.algorithms.forward_losses import flow_dpo_loss, noised, velocity_error
from genalign.models.base import Condition, FlowPolicy
from genalign.rollout.batch import TrajectoryBatch
from genalign.rollout.pairs import PreferencePairs
from genalign.weights.shadow import ShadowWeights, load_shadow_state, shadow_state

REF_PREFIX = "dpo_reference/"
DPO_TIED_GROUPS = get_args(DPOTiedGroups)


def best_worst_pairs(
    advantages: torch.Tensor, group_ids: torch.Tensor, tied_groups: DPOTiedGroups = "pair"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group, the position of the highest and of the lowest advantage (the first of each
    on ties, as torch.argmax / argmin). A group whose advantages all tie: "pair" makes its
    second member (in batch order) chosen and its first rejected, as Flow-GRPO's
    `PerPromptStatTracker.update(type="dpo")` does when argmax == argmin; "drop" leaves it out.
    [B], [B] -> chosen [P], rejected [P]."""
    if tied_groups not in DPO_TIED_GROUPS:
        raise ValueError(f"algorithm.dpo.tied_groups={tied_groups!r}: choose one of {', '.join(DPO_TIED_GROUPS)}")
    dense, num_groups = _dense_group_index(group_ids)  # [B], G
    chosen, rejected = [], []
    for group in range(num_groups):
        members = torch.nonzero(dense == group).flatten()  # [n] in batch order
        values = advantages[members]  # [n]
        if values.max() > values.min():
            chosen.append(members[int(values.argmax())])
            rejected.append(members[int(values.argmin())])
        elif tied_groups == "pair" and len(members) > 1:
            chosen.append(members[1])
            rejected.append(members[0])
    empty = torch.zeros(0, dtype=torch.long)
    return (torch.stack(chosen), torch.stack(rejected)) if chosen else (empty, empty)


class FlowDPO(AlgorithmBase):
    title = "Flow-DPO"
    needs_reference = True
    trainable_copies = 1  # the reference: a ShadowWeights copy of the trained tensors
    needs_old_logprob = False
    owned_options = ("dpo",)

    @classmethod
    def reference_kind(cls, cfg: AlgorithmConfig) -> str:
        """Its own refreshable reference weights, whatever algorithm.kl_beta."""
        return "own"

    @classmethod
    def data_source(cls, cfg: AlgorithmConfig) -> str:
        """algorithm.dpo.source: online rollout pairs, or a preference dataset."""
        return "offline" if cfg.dpo.source == "offline" else "online"

    @classmethod
    def config_problems(cls, cfg) -> list[str]:
        """Pairs to train on (rollout groups of two or more, or a manifest), the ranges of
        algorithm.dpo, and pair micro-batches that split into optimizer steps."""
        problems = super().config_problems(cfg)
        algorithm, rollout, actor, dpo = cfg.algorithm, cfg.rollout, cfg.actor, cfg.algorithm.dpo
        problems += dpo.problems()
        if algorithm.kl_beta > 0:
            problems.append(
                f"algorithm.kl_beta={algorithm.kl_beta} is unused by algorithm.name=dpo (its reference "
                "enters through the DPO logit, algorithm.dpo.beta): set it to 0"
            )
        if dpo.source == "offline" and cfg.data.preference_manifest is None:
            problems.append(
                "algorithm.dpo.source=offline needs data.preference_manifest (a .jsonl of prompt/chosen/"
                "rejected rows, docs/preference_data.md)"
            )
        elif dpo.source == "online" and rollout.n < 2:
            problems.append(
                f"algorithm.name=dpo online pairs the best and worst sample of each prompt group: "
                f"rollout.n must be >= 2, got {rollout.n}"
            )
        if rollout.rollout_batch_size > 0 and actor.gradient_accumulation_steps > 0:
            pairs = rollout.rollout_batch_size  # one pair per prompt (group) per step
            micro = actor.micro_batch_size or rollout.sample_batch_size
            micro_batches = -(-pairs // max(micro, 1)) * actor.num_inner_epochs
            if micro_batches % actor.gradient_accumulation_steps:
                problems.append(
                    f"actor.gradient_accumulation_steps={actor.gradient_accumulation_steps} must "
                    f"divide the {micro_batches} pair micro-batches per step (ceil(rollout."
                    f"rollout_batch_size={pairs} pairs / train micro-batch {micro}) * "
                    "actor.num_inner_epochs)"
                )
        return problems

    def __init__(self, cfg: AlgorithmConfig, reference=None, parameters: dict[str, torch.nn.Parameter] | None = None):
        if not parameters:
            raise ValueError("Flow-DPO keeps its reference as a copy of the trained parameters; build it with them")
        self.cfg = cfg
        self.reference = ShadowWeights(parameters)  # θ_ref = the weights training starts from
        self.optimizer_steps = 0

    def rollout_weights(self) -> AbstractContextManager:
        """Online pairs are sampled with the reference (`sample_with=reference`) or the learner."""
        return self.reference.applied() if self.cfg.dpo.sample_with == "reference" else nullcontext()

    def after_update(self, optimizer_steps: int) -> dict[str, float]:
        """θ_ref ← θ whenever the optimizer-step count crosses a multiple of ref_update_step
        (the reference checks `global_step % ref_update_step == 0` before each sampling round;
        with one optimizer step per round, the same steps)."""
        every = self.cfg.dpo.ref_update_step
        before, self.optimizer_steps = self.optimizer_steps, self.optimizer_steps + optimizer_steps
        refreshed = every > 0 and self.optimizer_steps // every > before // every
        if refreshed:
            self.reference.copy_live()
        return {"dpo_reference_refreshed": float(refreshed)}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return shadow_state(self.reference, REF_PREFIX, self.optimizer_steps)

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.optimizer_steps = load_shadow_state(self.reference, REF_PREFIX, state, "Flow-DPO reference", "dpo")

    def training_batch(self, batch: TrajectoryBatch, advantages: torch.Tensor) -> tuple[PreferencePairs, torch.Tensor]:
        """One (best, worst) pair per prompt group; the unit advantage is the pair's gap (> 0, or
        0 for a tied group's pair: the loss does not read it)."""
        chosen, rejected = best_worst_pairs(advantages, batch.group_ids, self.cfg.dpo.tied_groups)  # [P], [P]
        pairs = PreferencePairs(
            prompts=[batch.prompts[int(i)] for i in chosen],
            seeds=batch.seeds[chosen],
            condition=batch.condition.index(chosen.to(batch.condition.device)),
            chosen=batch.latents[chosen, -1],
            rejected=batch.latents[rejected, -1],
            sigmas=batch.sigmas,
        )
        return pairs, advantages[chosen] - advantages[rejected]

    def filler_unit(self, batch: TrajectoryBatch) -> PreferencePairs:
        """Sample 0 paired with itself: a well-defined loss (log 2) the update weights by 0."""
        first = torch.tensor([0])
        return PreferencePairs(
            prompts=[batch.prompts[0]],
            seeds=batch.seeds[first],
            condition=batch.condition.index(first.to(batch.condition.embeds.device)),
            chosen=batch.latents[first, -1],
            rejected=batch.latents[first, -1],
            sigmas=batch.sigmas,
        )

    def train_step_indices(self, pairs: PreferencePairs) -> list[int]:
        return num_train_positions(pairs.sigmas.shape[0] - 1, self.cfg.timestep_fraction)

    def compute_loss(
        self, policy: FlowPolicy, pairs: PreferencePairs, advantages: torch.Tensor, step_index: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        device = policy.device
        size = len(pairs)
        chosen, rejected = pairs.chosen.to(device), pairs.rejected.to(device)  # [P, ...] x2
        sigma, noise = schedule_draws(pairs.seeds, step_index, pairs.sigmas, tuple(chosen.shape[1:]), device)  # [P]
        noisy_w, target_w = noised(chosen, noise, sigma)  # same σ and ε for both images of a pair
        noisy_l, target_l = noised(rejected, noise, sigma)
        latents = torch.cat([noisy_w, noisy_l])  # [2P, ...]
        sigmas = torch.cat([sigma, sigma])  # [2P]
        cond = pairs.condition.to(device)  # a plain Condition on the device
        cond = Condition.cat([cond, cond])
        targets = torch.cat([target_w, target_l])  # [2P, ...]
        # the reference forward first: swapping its values into the trained tensors after the
        # policy forward would bump their versions under autograd's saved references
        with torch.no_grad(), self.reference.applied():
            ref_errors = velocity_error(policy.velocity(latents, sigmas, cond, 1.0), targets)  # [2P]
        errors = velocity_error(policy.velocity(latents, sigmas, cond, 1.0), targets)  # [2P]
        out = flow_dpo_loss(errors[:size], errors[size:], ref_errors[:size], ref_errors[size:], self.cfg.dpo.beta)
        stats = {
            "policy_loss": out.loss.detach().expand(size),
            "dpo_implicit_accuracy": out.implicit_accuracy,
            "dpo_logit": out.inside,
            "dpo_chosen_error": errors[:size].detach(),
            "dpo_rejected_error": errors[size:].detach(),
        }
        return out.loss, stats
