"""Sigma schedules for flow-matching samplers (pure; ALGORITHMS §1, §9.6).

Where it fits: a model family's `sigmas(num_steps)` calls `flow_match_sigmas` once per
rollout; the result is stored in the `TrajectoryBatch` and replay indexes it by step, so a
stateful diffusers scheduler is never consulted again (its `_step_index` moves).
"""

from __future__ import annotations

import torch


def time_shift(sigmas: torch.Tensor, shift: float) -> torch.Tensor:
    """Static SD3 time shift σ' = sσ / (1 + (s − 1)σ); s = 1 is the identity."""
    return shift * sigmas / (1 + (shift - 1) * sigmas)


def flow_match_sigmas(num_steps: int, shift: float = 3.0, *, diffusers_compat: bool = True,
                      num_train_timesteps: int = 1000) -> torch.Tensor:
    """The sampling schedule σ_0 = 1 > … > σ_N = 0, float32 [num_steps + 1].

    diffusers_compat=True reproduces `FlowMatchEulerDiscreteScheduler(shift=s).set_timesteps(N)`:
    the scheduler stores already-shifted σ_min/σ_max, spaces timesteps linearly between
    them and shifts again, so the last non-zero σ is "double-shifted" (SD3.5, s=3, N=10:
    0.0089 instead of ≈0.003; huggingface/diffusers#13243). Models were tuned with that
    schedule, so it is the default. diffusers_compat=False gives shift(linspace(1, 0, N+1)).
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if diffusers_compat:
        # training sigmas of the scheduler: shift(t) for t = linspace(1, 1/T, T)
        train_sigmas = time_shift(torch.linspace(1.0, 1.0 / num_train_timesteps, num_train_timesteps,
                                                 dtype=torch.float64), shift)
        sigma_max, sigma_min = train_sigmas[0].item(), train_sigmas[-1].item()
        timesteps = torch.linspace(sigma_max * num_train_timesteps, sigma_min * num_train_timesteps, num_steps,
                                   dtype=torch.float64)  # [N]
        sigmas = time_shift(timesteps / num_train_timesteps, shift)  # [N]
    else:
        sigmas = time_shift(torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64)[:-1], shift)  # [N]
    return torch.cat([sigmas, torch.zeros(1, dtype=torch.float64)]).float()  # [N+1]


def model_timesteps(sigmas: torch.Tensor, scale: float = 1000.0) -> torch.Tensor:
    """The denoiser's timestep input for σ (SD3/Wan: 1000σ; FLUX/Qwen pipelines: σ)."""
    return sigmas * scale
