"""Transition kernels: one denoising step, used by rollout (draw) and replay (score).

Where it fits: `sampling/trajectory.py` calls `flow_sde_step` with `prev_latents=None` to
draw x_{i+1} and record its log-prob; the algorithm calls it again with the stored x_{i+1}
to score it under the current policy. One function for both is what makes the on-policy
ratio exactly 1 (ALGORITHMS §2.10, §9.1): the same inputs give a bitwise-equal log-prob.

All math runs in float32 whatever the model dtype: the 1/(2 s² h²) factor amplifies
rounding, and bf16 can overflow in the mean (comment in the Flow-GRPO code, §2.2, §9.1).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

Scalar = float | torch.Tensor
"""A python float, a 0-d tensor, or a per-sample [B] tensor."""


class StepOutput(NamedTuple):
    prev_latents: torch.Tensor  # [B, ...] float32 x_{i+1} (drawn, or the given one detached)
    log_prob: torch.Tensor  # [B] mean over non-batch dims of log N(x_{i+1}; mean, std²)
    mean: torch.Tensor  # [B, ...] μ_i, carries the gradient of the velocity
    std: torch.Tensor  # [B] transition std s_i·sqrt(−Δσ_i)


def _per_sample(value: Scalar, batch_size: int) -> torch.Tensor:
    """A python float, 0-d or [B] tensor -> float32 [B], on the value's device (the CPU for
    floats: schedule arithmetic stays on the host, see `_to_device`)."""
    tensor = torch.as_tensor(value, dtype=torch.float32)
    if tensor.dim() == 0:
        return tensor.expand(batch_size)
    if tensor.numel() != batch_size:
        raise ValueError(f"per-sample sigma has {tensor.numel()} values for a batch of {batch_size}")
    return tensor.reshape(batch_size)


def _to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Per-sample schedule values are computed on the host (the σ = 1 guard reads them) and
    copied without blocking: a blocking copy, or a read-back, would stall the CPU until the
    GPU has drained its queue at every denoising step."""
    return tensor.to(device, non_blocking=True)


def _broadcast(per_sample: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[B] -> [B, 1, ..., 1] with as many dims as `like`."""
    return per_sample.view(-1, *([1] * (like.dim() - 1)))  # [B, 1, ...]


def sde_noise_scale(sigma: Scalar, noise_level: float, sigma_max_guard: Scalar | None = None) -> torch.Tensor:
    """The Flow-GRPO noise scale s_i = a·sqrt(σ / (1 − σ̃)) (ALGORITHMS §2.2 step 1; `std_dev_t`).

    σ̃ = σ except where σ = 1, which would divide by zero: there σ̃ = σ_1, the schedule's second
    entry — the caller passes `sigma_max_guard=sigmas[1]`. Raises ValueError if σ = 1 occurs
    and no guard is given. This is the scale *without* sqrt(−Δσ): the transition std is
    s_i·sqrt(−Δσ_i), and the Flow-GRPO latent-mean KL divides by s_i² (§2.5).
    Float32, shape of `sigma` (broadcast with the guard).
    """
    sigma = torch.as_tensor(sigma, dtype=torch.float32)
    at_one = sigma >= 1.0
    if bool(at_one.any()):
        if sigma_max_guard is None:
            raise ValueError("sigma == 1 needs sigma_max_guard: pass the schedule's second sigma (sigmas[1])")
        guard = torch.as_tensor(sigma_max_guard, dtype=torch.float32, device=sigma.device)
        denominator_sigma = torch.where(at_one, guard, sigma)
    else:
        denominator_sigma = sigma
    return noise_level * torch.sqrt(sigma / (1 - denominator_sigma))


def gaussian_log_prob(sample: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """ℓ = mean_{non-batch dims} [ −(x − μ)²/(2 std²) − log std − ½ log 2π ]  -> [B].

    A per-dimension log density, not a sum: the Flow-GRPO/DDPO reduction (ALGORITHMS §2.2
    step 4), so exp(ℓ − ℓ_old) is a geometric-mean per-dimension ratio. `std` is [B] (one
    std per sample) or broadcastable to `sample`. Computed in the dtype of the inputs.
    """
    std_b = _broadcast(std, sample) if std.dim() == 1 else std  # [B, 1, ...]
    log_density = (-((sample - mean) ** 2) / (2 * std_b ** 2)
                   - torch.log(std_b) - 0.5 * math.log(2 * math.pi))  # [B, ...]
    return log_density.flatten(1).mean(dim=1)  # [B]


def ode_step(latents: torch.Tensor, velocity: torch.Tensor, sigma: Scalar, sigma_next: Scalar) -> torch.Tensor:
    """Deterministic Euler step x_{i+1} = x_i + Δσ_i·v, Δσ_i = σ_{i+1} − σ_i < 0 (ALGORITHMS §1).

    float32 [B, ...] whatever the input dtype; σ's are floats, 0-d or [B] tensors.
    """
    latents, velocity = latents.float(), velocity.float()
    batch_size = latents.shape[0]
    delta = _to_device(_per_sample(sigma_next, batch_size) - _per_sample(sigma, batch_size), latents.device)  # [B]
    return latents + _broadcast(delta, latents) * velocity  # [B, ...]


def flow_sde_step(latents: torch.Tensor, velocity: torch.Tensor, sigma: Scalar, sigma_next: Scalar,
                  noise_level: float, prev_latents: torch.Tensor | None = None, noise: torch.Tensor | None = None,
                  generator: torch.Generator | None = None, sigma_max_guard: Scalar | None = None) -> StepOutput:
    """One Flow-GRPO SDE step (ALGORITHMS §2.2, `sde_type='sde'`), float32.

        s   = sde_noise_scale(σ, a, σ_1)                       (σ = 1 uses σ_1 in the denominator)
        μ_i = x_i·(1 + s²Δσ/(2σ)) + v·(1 + s²(1 − σ)/(2σ))·Δσ
            = x_i + Δσ·[v + s²/(2σ)·(x_i + (1 − σ)·v)]
        std = s·sqrt(−Δσ),   x_{i+1} = μ_i + std·ε,   ℓ = gaussian_log_prob(x_{i+1}, μ_i, std)

    `prev_latents=None` draws x_{i+1} (from `noise` if given, else `torch.randn` with
    `generator`); otherwise scores the given x_{i+1}. Either way x_{i+1} is detached, so the
    gradient reaches the velocity only through μ_i, and scoring the drawn sample with the
    same inputs returns a bitwise-identical log-prob (rollout/replay parity, §9.1).

    `sigma`, `sigma_next`: floats, 0-d or [B] tensors (broadcast over non-batch dims).
    `sigma_max_guard`: the schedule's σ_1 (pass `sigmas[1]`); required when σ = 1.
    Latents, velocity, noise and prev_latents of any float dtype are cast to float32.

    noise_level = 0 is the Euler ODE step: mean = ode_step(...), prev_latents = mean (or the
    given one), std = 0 and log_prob = 0 — a zero-std Gaussian has no density, so the rollout
    marks such steps non-stochastic and never trains on them.
    """
    if noise_level < 0:
        raise ValueError(f"noise_level must be >= 0, got {noise_level}")
    latents, velocity = latents.float(), velocity.float()
    batch_size = latents.shape[0]
    device = latents.device
    sigma_b = _per_sample(sigma, batch_size)  # [B]
    delta = _per_sample(sigma_next, batch_size) - sigma_b  # [B], negative
    if noise_level == 0:
        mean = latents + _broadcast(_to_device(delta, device), latents) * velocity  # [B, ...] == ode_step
        zeros = torch.zeros(batch_size, device=device)  # [B]
        prev = mean.detach() if prev_latents is None else prev_latents.detach().float()
        return StepOutput(prev, zeros, mean, zeros)

    guard = None if sigma_max_guard is None else _per_sample(sigma_max_guard, batch_size)
    scale = sde_noise_scale(sigma_b, noise_level, guard)  # [B] s_i, on the host
    std = _to_device(scale * torch.sqrt(-delta), device)  # [B]
    scale, sigma_b, delta = (_to_device(t, device) for t in (scale, sigma_b, delta))
    s2 = _broadcast(scale ** 2, latents)  # [B, 1, ...]
    sig = _broadcast(sigma_b, latents)  # [B, 1, ...]
    dt = _broadcast(delta, latents)  # [B, 1, ...]
    mean = latents * (1 + s2 * dt / (2 * sig)) + velocity * (1 + s2 * (1 - sig) / (2 * sig)) * dt  # [B, ...]
    if prev_latents is None:
        if noise is None:
            noise = torch.randn(latents.shape, generator=generator, device=latents.device, dtype=torch.float32)
        prev_latents = mean + _broadcast(std, latents) * noise.float()  # [B, ...]
    prev_latents = prev_latents.detach().float()  # [B, ...]
    log_prob = gaussian_log_prob(prev_latents, mean, std)  # [B]
    return StepOutput(prev_latents, log_prob, mean, std)
