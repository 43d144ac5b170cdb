"""Per-sample randomness of forward-process training: which σ, which ε (docs/algorithms.md §4.2, §5.3, §9.2, §11.2,
§12).

Where it fits: DiffusionNFT and Flow-DPO train on clean samples noised afresh. The update loop
calls `compute_loss` once per training position j (0..K−1, `train_step_indices`); at position
j, sample b uses schedule index perm_b[j] — a per-sample random permutation of the rollout
schedule's T steps, as DiffusionNFT's official code does — and a fresh ε. Both are drawn from
generators seeded by the sample's own seed (already a hash of run seed, step and index), so a
sample's draws do not depend on its micro-batch and a resumed run draws the same numbers.
AWM instead draws position k's σ from the k-th of K equal strata of the schedule
(`stratified_draws`), with the same per-sample ε.
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


def seeded_generator(*parts: object) -> torch.Generator:
    """A CPU generator seeded by a hash of `parts` (a tag, the sample's seed, a position): the
    per-sample draws of the forward-process and reward-feedback algorithms."""
    return torch.Generator().manual_seed(_mix(*parts))


def _noise(seed: int, position: int, latent_shape: tuple[int, ...]) -> torch.Tensor:
    """ε [*latent_shape] float32 of one sample at one training position."""
    return torch.randn(latent_shape, generator=seeded_generator("noise", seed, position))


def forward_draws(
    seeds: torch.Tensor, position: int, num_schedule_steps: int, latent_shape: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Schedule indices [B] (int64, each in 0..T−1, distinct across positions of one sample) and
    noise ε [B, *latent_shape] float32 (CPU) for training position `position` of each sample."""
    if not 0 <= position < num_schedule_steps:
        raise ValueError(f"training position {position} outside the {num_schedule_steps}-step schedule")
    indices, noises = [], []
    for seed in seeds.tolist():
        order = torch.randperm(num_schedule_steps, generator=seeded_generator("order", seed))
        indices.append(order[position])
        noises.append(_noise(seed, position, latent_shape))
    return torch.stack(indices), torch.stack(noises)  # [B], [B, ...]


def strata(first: int, last: int, num_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Lower and upper schedule-index bounds [K] (int64) of K equal strata of [first, last], cut
    as AWM's reference does: linspace(first, last, K + 1) in float32, truncated. A stratum
    narrower than one index has lower == upper."""
    boundaries = torch.linspace(first, last, steps=num_positions + 1)  # [K+1] float32
    return boundaries[:-1].long(), boundaries[1:].long()


def stratified_draws(
    seeds: torch.Tensor,
    position: int,
    num_positions: int,
    first: int,
    last: int,
    sigmas: torch.Tensor,
    latent_shape: tuple[int, ...],
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """AWM's draws (docs/algorithms.md §11.2): at training position k of K, each sample takes the
    schedule index lower_k + ⌊u·(upper_k − lower_k)⌋ of stratum k of [first, last] (`strata`),
    u ~ U[0, 1) from its own seed, and a fresh ε. Returns σ [B] (from `sigmas` [T+1]) and
    ε [B, ...] on `device`."""
    if not 0 <= position < num_positions:
        raise ValueError(f"training position {position} outside the {num_positions} AWM strata")
    lower, upper = strata(first, last, num_positions)  # [K] x2
    width = upper[position] - lower[position]
    indices, noises = [], []
    for seed in seeds.tolist():
        u = torch.rand(1, generator=seeded_generator("stratum", seed, position))  # [1]
        indices.append(lower[position] + (u * width).long()[0])
        noises.append(_noise(seed, position, latent_shape))
    index = torch.stack(indices)  # [B]
    if int(index.max()) >= sigmas.shape[0] - 1:
        raise ValueError(f"AWM schedule index {int(index.max())} outside the {sigmas.shape[0] - 1}-step schedule")
    return sigmas.float().cpu()[index].to(device), torch.stack(noises).to(device)  # [B], [B, ...]


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
        draws.append(draw_u(seeded_generator("density", seed, position)))
        noises.append(_noise(seed, position, latent_shape))
    return torch.cat(draws), torch.stack(noises)  # [B], [B, ...]
