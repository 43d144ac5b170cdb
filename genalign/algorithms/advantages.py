"""Group-relative advantages (ALGORITHMS §2.4, §7 multi-reward).

Where it fits: step 4 of the loop, between the reward runtime and the loss. Pure torch:
rewards [B] and group ids [B] in, advantages [B] out, no Python loop over groups.
"""

from __future__ import annotations

import torch

STD_CONVENTIONS = ("population", "unbiased")
AGGREGATION_MODES = ("weighted_sum", "advantage_sum")


def _group_moments(rewards: torch.Tensor, group_ids: torch.Tensor, ddof: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample group mean and std [B], via scatter sums over dense group indices."""
    _, dense = torch.unique(group_ids, return_inverse=True)  # [B] in 0..G-1
    num_groups = int(dense.max().item()) + 1
    rewards = rewards.double()
    counts = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, dense, torch.ones_like(rewards))  # [G]
    sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, dense, rewards)  # [G]
    means = sums / counts  # [G]
    squared = (rewards - means[dense]) ** 2  # [B]
    sq_sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, dense, squared)  # [G]
    # a group of one sample has no spread under either convention (unbiased would be 0/0)
    variance = torch.where(counts > ddof, sq_sums / (counts - ddof).clamp(min=1), torch.zeros_like(sq_sums))  # [G]
    return means[dense], variance.sqrt()[dense]  # [B], [B]


def group_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, *, per_prompt: bool = True,
                     global_std: bool = True, std: str = "population", eps: float = 1e-4,
                     normalize_by_std: bool = True) -> torch.Tensor:
    """A = (r − mean_group) / (std + eps), float32 [B].

    std is the whole batch's (`global_std`, Flow-GRPO SD3 default) or the group's;
    "population" (ddof=0, numpy, Flow-GRPO) or "unbiased" (ddof=1, torch, DanceGRPO/verl).
    A zero-variance group gets exactly 0 (its numerator is 0). `per_prompt=False`
    normalises over the whole batch; `normalize_by_std=False` only centres (Dr.GRPO).
    """
    if std not in STD_CONVENTIONS:
        raise ValueError(f"algorithm.advantage.std={std!r}: choose one of {STD_CONVENTIONS}")
    ddof = 0 if std == "population" else 1
    if not per_prompt:
        group_ids = torch.zeros_like(group_ids)
    means, group_std = _group_moments(rewards, group_ids, ddof)  # [B], [B]
    centred = rewards.double() - means  # [B]
    if not normalize_by_std:
        return centred.float()
    if global_std:
        _, batch_std = _group_moments(rewards, torch.zeros_like(group_ids), ddof)
        scale = batch_std
    else:
        scale = group_std
    return (centred / (scale + eps)).float()  # [B]


def zero_std_group_fraction(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Fraction of groups whose rewards are all equal (they carry no learning signal)."""
    _, group_std = _group_moments(rewards, group_ids, ddof=0)  # [B], constant within a group
    _, dense = torch.unique(group_ids, return_inverse=True)  # [B]
    per_group = torch.zeros(int(dense.max()) + 1, dtype=torch.float64).scatter_(0, dense, group_std)  # [G]
    return (per_group == 0).double().mean().item()


def aggregate_advantages(component_rewards: dict[str, torch.Tensor], weights: dict[str, float],
                         group_ids: torch.Tensor, mode: str, **group_kwargs) -> torch.Tensor:
    """Combine reward components into one advantage [B].

    "weighted_sum": R = Σ_k w_k r_k, then one group normalisation (Flow-GRPO, NFT).
    "advantage_sum": A = Σ_k w_k·A_k with each A_k normalised in its group (DanceGRPO /
    MixGRPO `advantage_aggr`); uses the same eps and std convention as `group_kwargs`.
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"reward.aggregation={mode!r}: choose one of {AGGREGATION_MODES}")
    names = list(component_rewards)
    if mode == "weighted_sum":
        total = sum(weights[name] * component_rewards[name].double() for name in names)  # [B]
        return group_advantages(total, group_ids, **group_kwargs)
    return sum(weights[name] * group_advantages(component_rewards[name], group_ids, **group_kwargs).double()
               for name in names).float()  # [B]


def clip_advantages(advantages: torch.Tensor, adv_clip_max: float) -> torch.Tensor:
    """Â = clamp(A, −adv_clip_max, +adv_clip_max) (Flow-GRPO: 5)."""
    return advantages.clamp(-adv_clip_max, adv_clip_max)


def advantage_stats(advantages: torch.Tensor) -> dict[str, float]:
    values = advantages.double()
    return {"mean": values.mean().item(), "std": values.std(unbiased=False).item(), "min": values.min().item(),
            "max": values.max().item(), "abs_mean": values.abs().mean().item()}
