"""Sigma schedules for flow-matching samplers (pure; docs/algorithms.md §1).

Where it fits: a model family's `sigmas(num_steps)` calls `flow_match_sigmas` once per
rollout; the result is stored in the `TrajectoryBatch` and replay indexes it by step, so a
stateful diffusers scheduler is never consulted again (its `_step_index` moves).
"""

from __future__ import annotations

import math

import torch


def time_shift(sigmas: torch.Tensor, shift: float) -> torch.Tensor:
    """Static SD3 time shift σ' = s·σ / (1 + (s − 1)·σ) (docs/algorithms.md §1); s = 1 is the identity.

    Keeps the dtype of `sigmas`; maps 0 -> 0 and 1 -> 1 for any s > 0.
    """
    return shift * sigmas / (1 + (shift - 1) * sigmas)


def _numpy_linspace(start: float, stop: float, num: int) -> torch.Tensor:
    """float64 [num] evenly spaced, computed as `numpy.linspace` does (start + i·step, last
    element set to `stop`), so the schedule matches diffusers bit for bit."""
    if num == 1:
        return torch.tensor([start], dtype=torch.float64)
    step = (stop - start) / (num - 1)
    values = torch.arange(num, dtype=torch.float64) * step + start  # [num]
    values[-1] = stop
    return values


def flow_match_sigmas(
    num_steps: int, shift: float = 3.0, *, diffusers_compat: bool = True, num_train_timesteps: int = 1000
) -> torch.Tensor:
    """The sampling schedule σ_0 = 1 > … > σ_N = 0, float32 [num_steps + 1] (docs/algorithms.md §1).

    diffusers_compat=True reproduces `FlowMatchEulerDiscreteScheduler(shift=s).set_timesteps(N)`
    bit for bit: the scheduler keeps the *shifted* training endpoints σ_max = 1 and
    σ_min = shift(1/T) (float32), spaces N timesteps linearly between T·σ_max and T·σ_min
    (float64) and shifts them again, so the last non-zero σ is "double-shifted" (SD3.5, s=3,
    N=10: 0.0089 instead of ≈0.003; huggingface/diffusers#13243, §1). Models were tuned with
    that schedule, so it is the default.

    diffusers_compat=False gives the exact shift(linspace(1, 0, N + 1)).
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if shift <= 0:
        raise ValueError(f"shift must be > 0, got {shift}")
    if diffusers_compat:
        # the scheduler's training sigmas at t = T/T and 1/T, shifted in float32
        train_ends = time_shift(
            torch.tensor([num_train_timesteps, 1.0], dtype=torch.float32) / num_train_timesteps, shift
        )  # [2]
        sigma_max, sigma_min = train_ends[0].item(), train_ends[1].item()
        timesteps = _numpy_linspace(
            sigma_max * num_train_timesteps, sigma_min * num_train_timesteps, num_steps
        )  # [N] float64
        sigmas = time_shift(timesteps / num_train_timesteps, shift)  # [N]
    else:
        sigmas = time_shift(torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64)[:-1], shift)  # [N]
    return torch.cat([sigmas.float(), torch.zeros(1)])  # [N+1] float32


def model_timesteps(sigmas: torch.Tensor, scale: float = 1000.0) -> torch.Tensor:
    """The denoiser's timestep input for σ: scale·σ (SD3/Wan: 1000σ; FLUX/Qwen pipelines: σ,
    i.e. scale=1). Same shape and dtype as `sigmas`."""
    return sigmas * scale


def dynamic_shift_mu(
    image_seq_len: int,
    base_seq_len: int = 256,
    max_seq_len: int = 4096,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
) -> float:
    """FLUX's resolution-dependent shift μ: linear in the packed image token count, base_shift
    at base_seq_len tokens and max_shift at max_seq_len (diffusers `calculate_shift`; FLUX.1
    and Qwen-Image read the four numbers from their scheduler config)."""
    slope = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return image_seq_len * slope + (base_shift - slope * base_seq_len)


def empirical_shift_mu(image_seq_len: int, num_steps: int) -> float:
    """FLUX.2's shift μ, fitted by its authors to the token count and the step count (diffusers
    `compute_empirical_mu` in Flux2Pipeline / Flux2KleinPipeline). Two lines in the token count,
    μ_10(n) = 8.73809524e-5·n + 1.89833333 and μ_200(n) = 1.6927e-4·n + 0.45666666, at 10 and 200
    steps; μ is their straight line in the step count, and μ_200 alone past 4300 tokens (where the
    two lines meet the schedule no longer depends on the steps)."""
    at_200 = 0.00016927 * image_seq_len + 0.45666666
    if image_seq_len > 4300:
        return float(at_200)
    at_10 = 8.73809524e-05 * image_seq_len + 1.89833333
    slope = (at_200 - at_10) / 190.0
    return float(slope * num_steps + (at_200 - 200.0 * slope))


def exponential_time_shift(sigmas: torch.Tensor, mu: float) -> torch.Tensor:
    """σ' = e^μ / (e^μ + 1/σ − 1) (FLUX's time shift; the scheduler's `use_dynamic_shifting`
    with time_shift_type="exponential"). It equals the static `time_shift` with s = e^μ.
    Computed in the dtype of `sigmas` with explicit tensor division, as numpy does it, so a
    float32 schedule matches diffusers bit for bit."""
    scale = torch.full_like(sigmas, math.exp(mu))
    return scale / (scale + (1 / sigmas - 1))


def stretch_to_terminal(sigmas: torch.Tensor, terminal: float) -> torch.Tensor:
    """Rescale 1 − σ so that the last σ of the schedule becomes `terminal` (diffusers'
    `shift_terminal`, from LTX-Video; Qwen-Image's scheduler sets 0.02)."""
    one_minus = 1 - sigmas
    return 1 - one_minus / (one_minus[-1] / (1 - terminal))


def pipeline_sigmas(
    num_steps: int, *, mu: float | None = None, shift: float = 1.0, shift_terminal: float | None = None
) -> torch.Tensor:
    """The schedule FluxPipeline / QwenImagePipeline sample with, float32 [num_steps + 1].

    Those pipelines hand the scheduler σ = linspace(1, 1/N, N) (float32) and it shifts them:
    exponentially with `mu` when the scheduler has `use_dynamic_shifting` (FLUX.1-dev,
    Qwen-Image), else statically with `shift` (FLUX.1-schnell: 1), then stretches them to
    `shift_terminal` when set; a final 0 is appended. Matches `set_timesteps(sigmas=..., mu=mu)`
    bit for bit (tests/unit/sampling)."""
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    base = _numpy_linspace(1.0, 1.0 / num_steps, num_steps).float()  # [N], as np.linspace(...).astype(float32)
    sigmas = time_shift(base, shift) if mu is None else exponential_time_shift(base, mu)  # [N]
    if shift_terminal:
        sigmas = stretch_to_terminal(sigmas, shift_terminal)
    return torch.cat([sigmas, torch.zeros(1)])  # [N+1] float32


def linspace_shift_sigmas(num_steps: int, shift: float) -> torch.Tensor:
    """The schedule HunyuanVideo15Pipeline samples with, float32 [num_steps + 1]: it hands its
    FlowMatchEulerDiscreteScheduler σ = linspace(1, 0, N + 1)[:-1] (numpy float64, cast to
    float32 by the scheduler), which shifts them statically in float32; a final 0 is appended.
    Matches `set_timesteps(sigmas=...)` bit for bit (tests/unit/sampling)."""
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    base = _numpy_linspace(1.0, 0.0, num_steps + 1)[:-1].float()  # [N]
    return torch.cat([time_shift(base, shift), torch.zeros(1)])  # [N+1] float32


def karras_flow_sigmas(num_steps: int, sigma_min: float, sigma_max: float, rho: float = 7.0) -> torch.Tensor:
    """The EDM (Karras) schedule mapped to flow-matching σ, float32 [num_steps + 1].

    Karras et al.'s ρ-spaced noise levels s_i = (s_max^(1/ρ) + i/(N−1)·(s_min^(1/ρ) − s_max^(1/ρ)))^ρ
    between `sigma_max` and `sigma_min` (variance-exploding scale), each mapped to the flow σ of
    the same signal-to-noise ratio, σ = s / (1 + s), then a final 0. This is what
    `UniPCMultistepScheduler(use_karras_sigmas=True, use_flow_sigmas=True, sigma_min, sigma_max)`
    sets (Cosmos-Predict2.5 ships it with s ∈ [0.01, 200], so σ runs from 200/201 ≈ 0.995, not 1),
    computed in float64 as numpy does and cast once, so it matches the scheduler bit for bit."""
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if not 0 < sigma_min < sigma_max:
        raise ValueError(f"need 0 < sigma_min < sigma_max, got sigma_min={sigma_min}, sigma_max={sigma_max}")
    ramp = _numpy_linspace(0.0, 1.0, num_steps)  # [N] float64
    min_inv_rho, max_inv_rho = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    edm = (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho  # [N] noise-to-signal ratios s
    return torch.cat([(edm / (edm + 1)).float(), torch.zeros(1)])  # [N+1] float32
