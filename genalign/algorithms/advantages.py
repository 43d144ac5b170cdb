"""Group-relative advantages (docs/algorithms.md §2.4, §7.1 multi-reward).

Where it fits: step 4 of the loop, between the reward runtime and the loss. The trainer
gathers every sample's reward and group id (a group = the G samples of one prompt, §2.4),
calls `aggregate_advantages`, and the algorithm clamps them with `clip_advantages`.

Pure torch: rewards [B] and group ids [B] in, float32 advantages [B] out. Groups are
handled with `unique(return_inverse)` + `index_add_`/`scatter_reduce_` — no Python loop
over groups — and statistics are accumulated in float64 so that a constant group is
detected exactly (min == max) rather than through a rounded std.
"""

from __future__ import annotations

from typing import get_args

import torch

from genalign.algorithms.config import StdConvention
from genalign.rewards.config import Aggregation

STD_CONVENTIONS = get_args(StdConvention)
AGGREGATION_MODES = get_args(Aggregation)


def _check_rewards(rewards: torch.Tensor, group_ids: torch.Tensor) -> None:
    if rewards.dim() != 1 or rewards.numel() == 0:
        raise ValueError(f"rewards must be a non-empty [B] tensor, got shape {tuple(rewards.shape)}")
    if group_ids.shape != rewards.shape:
        raise ValueError(f"group_ids shape {tuple(group_ids.shape)} != rewards shape {tuple(rewards.shape)}")
    if not bool(torch.isfinite(rewards).all()):
        bad = torch.nonzero(~torch.isfinite(rewards)).flatten().tolist()
        raise ValueError(
            f"rewards are not finite at samples {bad[:10]}: a NaN/inf reward would poison "
            "the group statistics; fix the reward function"
        )


def _dense_group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Arbitrary (unsorted, interleaved) ids -> dense indices [B] in 0..G-1, and G."""
    unique_ids, dense = torch.unique(group_ids, return_inverse=True)  # [G], [B]
    return dense, unique_ids.numel()


def _group_sum(values: torch.Tensor, dense: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Σ over each group: [B] -> [G]."""
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, dense, values)


def _is_constant_group(rewards: torch.Tensor, dense: torch.Tensor, num_groups: int) -> torch.Tensor:
    """[G] bool: every reward of the group is equal (min == max, exact)."""
    full = torch.full((num_groups,), float("inf"), dtype=rewards.dtype, device=rewards.device)
    group_min = full.scatter_reduce(0, dense, rewards, reduce="amin")  # [G]
    group_max = (-full).scatter_reduce(0, dense, rewards, reduce="amax")  # [G]
    return group_min == group_max


def _group_mean_std(
    rewards: torch.Tensor, dense: torch.Tensor, num_groups: int, ddof: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group mean and std [G], [G] (float64 in, float64 out).

    With ddof=1 a group of one sample has an undefined std (0/0); it is treated as 0, and the
    sample's advantage is 0 anyway because it is its own group mean.
    """
    counts = _group_sum(torch.ones_like(rewards), dense, num_groups)  # [G]
    means = _group_sum(rewards, dense, num_groups) / counts  # [G]
    squared = (rewards - means[dense]) ** 2  # [B]
    sq_sums = _group_sum(squared, dense, num_groups)  # [G]
    variance = torch.where(counts > ddof, sq_sums / (counts - ddof).clamp(min=1), torch.zeros_like(sq_sums))  # [G]
    return means, variance.sqrt()  # [G], [G]


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    per_prompt: bool = True,
    global_std: bool = True,
    std: StdConvention = "population",
    eps: float = 1e-4,
    normalize_by_std: bool = True,
) -> torch.Tensor:
    """A_k = (R_k − mean_group(R)) / (std + eps), float32 [B] (docs/algorithms.md §2.4).

    rewards [B], group_ids [B] (any integer ids, in any order; equal id = same prompt group).
    * `global_std=True` (Flow-GRPO SD3 default): std of the whole batch; else the group's std.
    * `std`: "population" (ddof=0; numpy, Flow-GRPO) or "unbiased" (ddof=1; torch.std,
      DanceGRPO/verl). Under "unbiased" a group of one sample has std 0 (and advantage 0).
    * `per_prompt=False`: the whole batch is one group, A = (R − mean(R)) / (std(R) + eps).
    * `normalize_by_std=False`: mean-centering only, A = R − mean_group(R) (Dr.GRPO).
    A zero-variance group (all rewards equal, incl. a group of one) gets exactly 0: its
    numerator is 0, and the division is skipped, so eps = 0 cannot produce 0/0 (§2.4).
    """
    if std not in STD_CONVENTIONS:
        raise ValueError(f"algorithm.advantage.std={std!r}: choose one of {STD_CONVENTIONS}")
    if eps < 0:
        raise ValueError(f"algorithm.advantage.eps must be >= 0, got {eps}")
    _check_rewards(rewards, group_ids)
    ddof = 0 if std == "population" else 1
    values = rewards.double()  # [B]
    if per_prompt:
        dense, num_groups = _dense_group_index(group_ids)  # [B], G
    else:
        dense, num_groups = torch.zeros_like(group_ids, dtype=torch.long), 1  # [B]
    means, group_std = _group_mean_std(values, dense, num_groups, ddof)  # [G], [G]
    constant = _is_constant_group(values, dense, num_groups)[dense]  # [B]
    centred = values - means[dense]  # [B]
    if normalize_by_std:
        if global_std:
            whole_batch = torch.zeros_like(dense)  # [B]
            scale = _group_mean_std(values, whole_batch, 1, ddof)[1].expand_as(values)  # [B]
        else:
            scale = group_std[dense]  # [B]
        denominator = torch.where(constant, torch.ones_like(scale), scale + eps)  # [B]
        centred = centred / denominator  # [B]
    advantages = torch.where(constant, torch.zeros_like(centred), centred)  # [B]
    return advantages.float()


def zero_std_group_fraction(rewards: torch.Tensor, group_ids: torch.Tensor) -> float:
    """Fraction of groups whose rewards are all equal: they carry no learning signal
    (Flow-GRPO logs it as `zero_std_ratio`, §2.4)."""
    _check_rewards(rewards, group_ids)
    dense, num_groups = _dense_group_index(group_ids)  # [B], G
    constant = _is_constant_group(rewards.double(), dense, num_groups)  # [G]
    return constant.double().mean().item()


def aggregate_advantages(
    component_rewards: dict[str, torch.Tensor],
    weights: dict[str, float],
    group_ids: torch.Tensor,
    mode: Aggregation,
    **group_kwargs,
) -> torch.Tensor:
    """Combine reward components into one advantage, float32 [B] (docs/algorithms.md §2.4, §7.1).

    * "weighted_sum": R = Σ_k w_k r_k, then one `group_advantages(R)` (Flow-GRPO, NFT).
    * "advantage_sum": A = Σ_k w_k · group_advantages(r_k) (DanceGRPO / MixGRPO
      `advantage_aggr`). Each component is normalised with the same `group_kwargs` — the
      same eps (default 1e-4, as Flow-GRPO) and std convention — so switching the mode
      changes only the aggregation, not the normaliser.
    `group_kwargs` are passed to `group_advantages`. `weights` must name exactly the components.
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"reward.aggregation={mode!r}: choose one of {AGGREGATION_MODES}")
    if not component_rewards:
        raise ValueError("aggregate_advantages needs at least one reward component")
    if set(component_rewards) != set(weights):
        raise ValueError(
            f"reward components {sorted(component_rewards)} and weights {sorted(weights)} must name the same rewards"
        )
    names = list(component_rewards)
    if mode == "weighted_sum":
        total = sum(weights[name] * component_rewards[name].double() for name in names)  # [B]
        return group_advantages(total, group_ids, **group_kwargs)
    per_component = [
        weights[name] * group_advantages(component_rewards[name], group_ids, **group_kwargs).double() for name in names
    ]  # K x [B]
    return torch.stack(per_component).sum(dim=0).float()  # [B]


def clip_advantages(advantages: torch.Tensor, adv_clip_max: float) -> torch.Tensor:
    """Â = clamp(A, −adv_clip_max, +adv_clip_max) (docs/algorithms.md §2.5; Flow-GRPO: 5). Same shape."""
    if adv_clip_max <= 0:
        raise ValueError(f"algorithm.adv_clip_max must be > 0, got {adv_clip_max}")
    return advantages.clamp(-adv_clip_max, adv_clip_max)


def advantage_stats(advantages: torch.Tensor) -> dict[str, float]:
    """mean / std (population) / min / max / abs_mean of the advantages, for logging."""
    values = advantages.double()
    return {
        "mean": values.mean().item(),
        "std": values.std(unbiased=False).item(),
        "min": values.min().item(),
        "max": values.max().item(),
        "abs_mean": values.abs().mean().item(),
    }


def trained_sample_indices(
    advantages: torch.Tensor, num_micro_batches: int, generator: torch.Generator
) -> torch.Tensor:
    """Flow-GRPO's filter: the samples whose advantage is not exactly 0, plus randomly chosen
    zero-advantage ones until the count divides by `num_micro_batches` (the number of replay
    micro-batches stays, their size shrinks). Sorted positions [K]; empty when every
    advantage is 0. `advantages` [B] (one per sample: the same at every denoising step)."""
    keep = advantages.cpu() != 0  # [B] bool
    kept = int(keep.sum())
    if kept and kept % num_micro_batches:
        dropped = torch.nonzero(~keep).flatten()  # [B - K]
        missing = num_micro_batches - kept % num_micro_batches
        if len(dropped) >= missing:
            keep[dropped[torch.randperm(len(dropped), generator=generator)[:missing]]] = True
    return torch.nonzero(keep).flatten()  # [K']


def nonzero_advantage_units(
    advantages: torch.Tensor, micro_batch_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, int]:
    """`trained_sample_indices` over the micro-batches `micro_batch_size` cuts [U] into: the
    kept positions [K] and the smaller micro-batch size that keeps their number (Flow-GRPO)."""
    if not len(advantages):
        return torch.arange(0), micro_batch_size
    num_micro_batches = -(-len(advantages) // micro_batch_size)
    kept = trained_sample_indices(advantages, num_micro_batches, generator)  # [K]
    return kept, (len(kept) // num_micro_batches if len(kept) else micro_batch_size)
