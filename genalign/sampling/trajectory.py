"""`sample_trajectory`: run a policy through a sigma schedule with the SDE/ODE kernels.

Where it fits: the rollout collector calls it (no grad) to produce latents and per-step
log-probs; the evaluator calls it with `noise_level=0` (ODE). Replay never comes here: the
algorithm re-scores stored latents with the same `transition_step` and the kernel name the
trajectory stores (see algorithms/replay.py).

Noise comes from one `torch.Generator` per sample, seeded by that sample's seed, so a
sample's trajectory does not depend on which other samples share its batch or worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from genalign.sampling.kernels import ode_step, transition_step
from genalign.sampling.windows import sde_step_mask  # noqa: F401  (re-exported: callers build masks here)

if TYPE_CHECKING:  # annotations only: sampling sits below the model families
    from genalign.models.base import Condition, FlowPolicy


SDE_STREAM = 0x5DEECE66D
"""Offset that separates a sample's SDE-noise stream from its initial-noise stream."""


def initial_noise(
    init_seeds: list[int], seeds: list[int], latent_shape: tuple[int, ...]
) -> tuple[torch.Tensor, list[torch.Generator]]:
    """x_0 ~ N(0, I) per sample from a generator seeded by its `init_seeds` entry, and one
    SDE-noise generator per sample from its own `seeds` entry (a separate stream, so a group
    sharing x_0 still diverges). Returns (noise [B, *latent_shape] float32, SDE generators)."""
    noise = torch.stack(
        [torch.randn(latent_shape, generator=torch.Generator().manual_seed(int(seed))) for seed in init_seeds]
    )  # [B, ...]
    generators = [torch.Generator().manual_seed((int(seed) + SDE_STREAM) % 2**63) for seed in seeds]
    return noise, generators


def step_noise(generators: list[torch.Generator], latent_shape: tuple[int, ...]) -> torch.Tensor:
    return torch.stack([torch.randn(latent_shape, generator=g) for g in generators])  # [B, ...]


class SampledTrajectory(NamedTuple):
    latents: torch.Tensor  # [B, T+1, ...] float32 on CPU: x at every σ of the schedule
    log_probs: torch.Tensor  # [B, T] float32 on CPU: 0 at non-stochastic steps
    means: torch.Tensor | None  # [B, T, ...] float32 on CPU: the kernel mean μ_i per step (record_means)


@torch.no_grad()
def sample_trajectory(
    policy: FlowPolicy,
    cond: Condition,
    latents: torch.Tensor,
    generators: list[torch.Generator],
    sigmas: torch.Tensor,
    guidance_scale: float,
    noise_level: float,
    sde_mask: torch.Tensor,
    kernel: str = "flow_sde",
    record_means: bool = False,
) -> SampledTrajectory:
    """Denoise `latents` [B, ...] (x at sigmas[0]) along `sigmas` [T+1].

    Steps where `sde_mask` [T] is true use the transition kernel `kernel` (sampling/kernels.py
    KERNELS) with `noise_level` and record log p(x_{i+1} | x_i); other steps are Euler ODE
    steps with log-prob 0. `record_means` also keeps each step's kernel mean μ_i (the
    Euler step's result at ODE steps), which GRPO-Guard's RatioNorm needs.
    """
    device = policy.device
    num_steps = sigmas.shape[0] - 1
    latent_shape = tuple(latents.shape[1:])
    stochastic = [bool(sde_mask[i]) and noise_level > 0 for i in range(num_steps)]
    # Every SDE step's noise is drawn up front (per sample, in step order: the same numbers as
    # drawing step by step) and copied to the device once, so the loop below never waits on
    # the host: latents and log-probs stay on the device until the end.
    noises = _to_device(
        torch.stack([step_noise(generators, latent_shape) for i in range(num_steps) if stochastic[i]])
        if any(stochastic)
        else None,
        device,
    )  # [S, B, ...]
    current = latents.to(device=device, dtype=torch.float32)  # [B, ...]
    all_latents = [current]
    log_probs, means = [], []
    zeros = torch.zeros(latents.shape[0], device=device)  # [B]
    sigma_guard = float(sigmas[1]) if num_steps > 1 else None
    drawn = 0
    for i in range(num_steps):
        sigma, sigma_next = float(sigmas[i]), float(sigmas[i + 1])
        sigma_batch = torch.full((latents.shape[0],), sigma, device=device)  # [B]
        velocity = policy.velocity(current, sigma_batch, cond, guidance_scale).float()  # [B, ...]
        if stochastic[i]:
            out = transition_step(
                kernel,
                current,
                velocity,
                sigma,
                sigma_next,
                noise_level,
                noise=noises[drawn],
                sigma_max_guard=sigma_guard,
            )
            drawn += 1
            current = out.prev_latents
            log_probs.append(out.log_prob)
            means.append(out.mean)
        else:
            current = ode_step(current, velocity, sigma, sigma_next)
            log_probs.append(zeros)
            means.append(current)
        all_latents.append(current)
    kept_means = torch.stack(means, dim=1).cpu() if record_means else None  # [B, T, ...]
    return SampledTrajectory(
        torch.stack(all_latents, dim=1).cpu(), torch.stack(log_probs, dim=1).cpu(), kept_means
    )  # [B, T+1, ...], [B, T]


def _to_device(tensor: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    """One pinned, non-blocking host-to-device copy (a plain copy on the CPU)."""
    if tensor is None or device.type == "cpu":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)
