"""Per-sample randomness of forward-process training: which σ, which ε (docs/algorithms.md §4.2, §5.3, §9).

Where it fits: DiffusionNFT and Flow-DPO train on clean samples noised afresh. The update loop
calls `compute_loss` once per training position j (0..K−1, `train_step_indices`); at position
j, sample b uses schedule index perm_b[j] — a per-sample random permutation of the rollout
schedule's T steps, as DiffusionNFT's official code does — and a fresh ε. Both are drawn from
generators seeded by the sample's own seed (already a hash of run seed, step and index), so a
sample's draws do not depend on its micro-batch and a resumed run draws the same numbers.
Flow-matching SFT draws its σ from a density instead of the schedule (`density_draws`), with
the same seeding.
"""

from __future__ import annotations

import hashlib
from typing import Callable

import torch

_LIMIT = 2**63


def _mix(*parts: object) -> int:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % _LIMIT


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


def density_draws(
    seeds: torch.Tensor,
    position: int,
    latent_shape: tuple[int, ...],
    draw_u: Callable[[torch.Generator], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Flow-matching SFT's draws at training position `position`: u [B] (each sample's own
    generator handed to `draw_u(generator) -> [1]`) and ε [B, *latent_shape] float32 (CPU),
    both seeded by the sample's seed and the position, so resume draws the same numbers."""
    draws, noises = [], []
    for seed in seeds.tolist():
        draws.append(draw_u(torch.Generator().manual_seed(_mix("density", seed, position))))
        generator = torch.Generator().manual_seed(_mix("noise", seed, position))
        noises.append(torch.randn(latent_shape, generator=generator))
    return torch.cat(draws), torch.stack(noises)  # [B], [B, ...]
