"""Per-sample randomness of forward-process training: which σ, which ε (docs/algorithms.md §4.2, §5.3, §9.2).

Where it fits: DiffusionNFT and Flow-DPO train on clean samples noised afresh. The update loop
calls `compute_loss` once per training position j (0..K−1, `train_step_indices`); at position
j, sample b uses schedule index perm_b[j] — a per-sample random permutation of the rollout
schedule's T steps, as DiffusionNFT's official code does — and a fresh ε. Both are drawn from
generators seeded by the sample's own seed (already a hash of run seed, step and index), so a
sample's draws do not depend on its micro-batch and a resumed run draws the same numbers.
"""

from __future__ import annotations

import hashlib

import torch

_LIMIT = 2**63


def _mix(*parts: object) -> int:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % _LIMIT


def seeded_generator(*parts: object) -> torch.Generator:
    """A CPU generator seeded by a hash of `parts` (a tag, the sample's seed, a position): the
    per-sample draws of the forward-process and reward-feedback algorithms."""
    return torch.Generator().manual_seed(_mix(*parts))


def forward_draws(
    seeds: torch.Tensor, position: int, num_schedule_steps: int, latent_shape: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Schedule indices [B] (int64, each in 0..T−1, distinct across positions of one sample) and
    noise ε [B, *latent_shape] float32 (CPU) for training position `position` of each sample."""
    if not 0 <= position < num_schedule_steps:
        raise ValueError(f"training position {position} outside the {num_schedule_steps}-step schedule")
    indices, noises = [], []
    for seed in seeds.tolist():
        order = torch.randperm(num_schedule_steps, generator=torch.Generator().manual_seed(_mix("order", seed)))
        indices.append(order[position])
        generator = torch.Generator().manual_seed(_mix("noise", seed, position))
        noises.append(torch.randn(latent_shape, generator=generator))
    return torch.stack(indices), torch.stack(noises)  # [B], [B, ...]


def schedule_draws(
    seeds: torch.Tensor, position: int, sigmas: torch.Tensor, latent_shape: tuple[int, ...], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """σ [B] (from the non-final entries of `sigmas` [T+1]) and ε [B, ...] on `device`."""
    indices, noise = forward_draws(seeds, position, sigmas.shape[0] - 1, latent_shape)  # [B], [B, ...]
    return sigmas.float().cpu()[indices].to(device), noise.to(device)


def num_train_positions(num_steps: int, timestep_fraction: float) -> list[int]:
    """Positions 0..int(T·fraction)−1 (DiffusionNFT: 9 of a 10-step schedule)."""
    return list(range(int(num_steps * timestep_fraction)))


def first_member_seeds(seeds: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Each sample's group key: the seed of its group's first member in batch order [B]
    (DGPO draws a group's σ and ε from it, so the group shares them; the batch must hold
    whole groups, as a rank's rollout does)."""
    first: dict[int, int] = {}
    for group, seed in zip(group_ids.tolist(), seeds.tolist()):
        first.setdefault(group, seed)
    return torch.tensor([first[group] for group in group_ids.tolist()], dtype=torch.long)


def group_draws(
    group_seeds: torch.Tensor,
    sample_seeds: torch.Tensor,
    position: int,
    sigmas: torch.Tensor,
    num_indices: int,
    latent_shape: tuple[int, ...],
    device: torch.device,
    shared_noise: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """DGPO's draws at training position `position` (docs/algorithms.md §9.2): σ [B] at index
    perm_g[position] of a per-group random permutation of the schedule's first `num_indices`
    entries, and ε [B, ...] drawn per group (`shared_noise`) or per sample. Both from
    `forward_draws` seeded by the group key (`first_member_seeds`) or the sample's seed."""
    indices, noise = forward_draws(group_seeds, position, num_indices, latent_shape)  # [B], [B, ...]
    if not shared_noise:
        _, noise = forward_draws(sample_seeds, position, num_indices, latent_shape)
    return sigmas.float().cpu()[indices].to(device), noise.to(device)
