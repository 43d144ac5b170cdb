"""Transition kernels: one denoising step, used by rollout (draw) and replay (score).

Where it fits: `sampling/trajectory.py` calls `transition_step(kernel, ...)` with
`prev_latents=None` to draw x_{i+1} and record its log-prob; the algorithm (through
`algorithms/replay.py`) calls it again with the stored x_{i+1} and the kernel name stored in
the trajectory to score it under the current policy. One function for both is what makes the on-policy
ratio exactly 1 (docs/algorithms.md §2.10): the same inputs give a bitwise-equal log-prob.

All math runs in float32 whatever the model dtype: the 1/(2 s² h²) factor amplifies
rounding, and bf16 can overflow in the mean (comment in the Flow-GRPO code, §2.2, §2.10).
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import torch

Scalar = float | torch.Tensor
"""A python float, a 0-d tensor, or a per-sample [B] tensor."""


class StepOutput(NamedTuple):
    prev_latents: torch.Tensor  # [B, ...] float32 x_{i+1} (drawn, or the given one detached)
    log_prob: torch.Tensor  # [B] mean over non-batch dims of log N(x_{i+1}; mean, std²)
    mean: torch.Tensor  # [B, ...] μ_i, carries the gradient of the velocity
    std: torch.Tensor  # [B] transition std (flow/dance SDE: s_i·sqrt(−Δσ_i); CPS: c_i)
    noise_scale: torch.Tensor  # [B] the reference code's `std_dev_t` (flow: s_i, dance: η, CPS: c_i): the
    # latent-mean KL divides by its square (docs/algorithms.md §2.5)


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
    """The Flow-GRPO noise scale s_i = a·sqrt(σ / (1 − σ̃)) (docs/algorithms.md §2.2 step 1; `std_dev_t`).

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

    A per-dimension log density, not a sum: the Flow-GRPO/DDPO reduction (docs/algorithms.md §2.2
    step 4), so exp(ℓ − ℓ_old) is a geometric-mean per-dimension ratio. `std` is [B] (one
    std per sample) or broadcastable to `sample`. Computed in the dtype of the inputs.
    """
    std_b = _broadcast(std, sample) if std.dim() == 1 else std  # [B, 1, ...]
    log_density = -((sample - mean) ** 2) / (2 * std_b**2) - torch.log(std_b) - 0.5 * math.log(2 * math.pi)  # [B, ...]
    return log_density.flatten(1).mean(dim=1)  # [B]


def ode_step(latents: torch.Tensor, velocity: torch.Tensor, sigma: Scalar, sigma_next: Scalar) -> torch.Tensor:
    """Deterministic Euler step x_{i+1} = x_i + Δσ_i·v, Δσ_i = σ_{i+1} − σ_i < 0 (docs/algorithms.md §1).

    float32 [B, ...] whatever the input dtype; σ's are floats, 0-d or [B] tensors.
    """
    latents, velocity = latents.float(), velocity.float()
    batch_size = latents.shape[0]
    delta = _to_device(_per_sample(sigma_next, batch_size) - _per_sample(sigma, batch_size), latents.device)  # [B]
    return latents + _broadcast(delta, latents) * velocity  # [B, ...]


def flow_sde_step(
    latents: torch.Tensor,
    velocity: torch.Tensor,
    sigma: Scalar,
    sigma_next: Scalar,
    noise_level: float,
    prev_latents: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    sigma_max_guard: Scalar | None = None,
) -> StepOutput:
    """One Flow-GRPO SDE step (docs/algorithms.md §2.2, `sde_type='sde'`), float32.

        s   = sde_noise_scale(σ, a, σ_1)                       (σ = 1 uses σ_1 in the denominator)
        μ_i = x_i·(1 + s²Δσ/(2σ)) + v·(1 + s²(1 − σ)/(2σ))·Δσ
            = x_i + Δσ·[v + s²/(2σ)·(x_i + (1 − σ)·v)]
        std = s·sqrt(−Δσ),   x_{i+1} = μ_i + std·ε,   ℓ = gaussian_log_prob(x_{i+1}, μ_i, std)

    `prev_latents=None` draws x_{i+1} (from `noise` if given, else `torch.randn` with
    `generator`); otherwise scores the given x_{i+1}. Either way x_{i+1} is detached, so the
    gradient reaches the velocity only through μ_i, and scoring the drawn sample with the
    same inputs returns a bitwise-identical log-prob (rollout/replay parity, §2.10).

    `sigma`, `sigma_next`: floats, 0-d or [B] tensors (broadcast over non-batch dims).
    `sigma_max_guard`: the schedule's σ_1 (pass `sigmas[1]`); required when σ = 1.
    Latents, velocity, noise and prev_latents of any float dtype are cast to float32.

    noise_level = 0 is the Euler ODE step: mean = ode_step(...), prev_latents = mean (or the
    given one), std = 0 and log_prob = 0 — a zero-std Gaussian has no density, so the rollout
    marks such steps non-stochastic and never trains on them.
    """
    if noise_level < 0:
        raise ValueError(f"noise_level must be >= 0, got {noise_level}")
    batch_size = latents.shape[0]
    sigma_b = _per_sample(sigma, batch_size)  # [B]
    if noise_level == 0:
        scale = torch.zeros(batch_size)  # [B]
    else:
        guard = None if sigma_max_guard is None else _per_sample(sigma_max_guard, batch_size)
        scale = sde_noise_scale(sigma_b, noise_level, guard)  # [B] s_i, on the host
    return _score_sde_step(
        latents, velocity, sigma_b, _per_sample(sigma_next, batch_size), scale, prev_latents, noise, generator
    )


def dance_sde_step(
    latents: torch.Tensor,
    velocity: torch.Tensor,
    sigma: Scalar,
    sigma_next: Scalar,
    noise_level: float,
    prev_latents: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    sigma_max_guard: Scalar | None = None,
) -> StepOutput:
    """One DanceGRPO SDE step (docs/algorithms.md §3.1, DanceGRPO code `flux_step`; verl-omni `dance_sde`), float32.

    The Flow-GRPO mean and Gaussian log-prob with a constant noise scale s ≡ η = noise_level:

        μ_i = x_i + Δσ·[v + η²/(2σ)·(x_i + (1 − σ)·v)],   std = η·sqrt(−Δσ)

    Nothing divides by 1 − σ, so σ = 1 needs no guard (`sigma_max_guard` is accepted for a
    common signature and ignored). Arguments and outputs as `flow_sde_step`.
    """
    if noise_level < 0:
        raise ValueError(f"noise_level must be >= 0, got {noise_level}")
    batch_size = latents.shape[0]
    scale = torch.full((batch_size,), float(noise_level))  # [B] η
    return _score_sde_step(
        latents,
        velocity,
        _per_sample(sigma, batch_size),
        _per_sample(sigma_next, batch_size),
        scale,
        prev_latents,
        noise,
        generator,
    )


def em_sde_step(
    latents: torch.Tensor,
    velocity: torch.Tensor,
    sigma: Scalar,
    sigma_next: Scalar,
    noise_level: float,
    prev_latents: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    sigma_max_guard: Scalar | None = None,
) -> StepOutput:
    """One Euler–Maruyama step of the reverse SDE with diffusion 2σ (docs/algorithms.md §2.2,
    last paragraph), float32: the Flow-GRPO mean and Gaussian log-prob with the noise scale
    s_i = a·sqrt(2σ_i), a = noise_level:

        μ_i = x_i + Δσ·[v + a²·(x_i + (1 − σ)·v)],   std = a·sqrt(2σ·(−Δσ))

    At a = 1 this is the sampler of NextStep-1's flow head (stepfun-ai/NextStep-1 6e49bae,
    `FlowMatchingHead.sample`: drift v + (1 − t)·score, diffusion sqrt(2(1 − t)), t = 1 − σ),
    written in genalign's σ. Nothing divides by 1 − σ, so σ = 1 needs no guard
    (`sigma_max_guard` is accepted for the common signature and ignored). Arguments and outputs
    as `flow_sde_step`."""
    if noise_level < 0:
        raise ValueError(f"noise_level must be >= 0, got {noise_level}")
    batch_size = latents.shape[0]
    sigma_b = _per_sample(sigma, batch_size)  # [B]
    scale = noise_level * torch.sqrt(2 * sigma_b)  # [B] s_i
    return _score_sde_step(
        latents, velocity, sigma_b, _per_sample(sigma_next, batch_size), scale, prev_latents, noise, generator
    )


def _score_sde_step(
    latents: torch.Tensor,
    velocity: torch.Tensor,
    sigma_b: torch.Tensor,
    sigma_next_b: torch.Tensor,
    scale: torch.Tensor,
    prev_latents: torch.Tensor | None,
    noise: torch.Tensor | None,
    generator: torch.Generator | None,
) -> StepOutput:
    """The flow-matching SDE step shared by the Flow-GRPO and DanceGRPO kernels, which differ
    only in the noise scale s [B] (host tensors σ [B], σ_next [B], s [B]). s = 0 everywhere is
    the Euler step with log-prob 0 (no density)."""
    latents, velocity = latents.float(), velocity.float()
    batch_size = latents.shape[0]
    device = latents.device
    delta = sigma_next_b - sigma_b  # [B], negative
    if not bool((scale > 0).any()):
        mean = latents + _broadcast(_to_device(delta, device), latents) * velocity  # [B, ...] == ode_step
        zeros = torch.zeros(batch_size, device=device)  # [B]
        prev = mean.detach() if prev_latents is None else prev_latents.detach().float()
        return StepOutput(prev, zeros, mean, zeros, zeros)
    std = _to_device(scale * torch.sqrt(-delta), device)  # [B]
    scale, sigma_b, delta = (_to_device(t, device) for t in (scale, sigma_b, delta))
    s2 = _broadcast(scale**2, latents)  # [B, 1, ...]
    sig = _broadcast(sigma_b, latents)  # [B, 1, ...]
    dt = _broadcast(delta, latents)  # [B, 1, ...]
    mean = latents * (1 + s2 * dt / (2 * sig)) + velocity * (1 + s2 * (1 - sig) / (2 * sig)) * dt  # [B, ...]
    prev_latents = _draw_or_take(mean, std, prev_latents, noise, generator)  # [B, ...]
    log_prob = gaussian_log_prob(prev_latents, mean, std)  # [B]
    return StepOutput(prev_latents, log_prob, mean, std, scale)


def _draw_or_take(
    mean: torch.Tensor,
    std: torch.Tensor,
    prev_latents: torch.Tensor | None,
    noise: torch.Tensor | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """x_{i+1} = μ + std·ε when not given (ε from `noise`, else drawn with `generator`), detached float32."""
    if prev_latents is None:
        if noise is None:
            noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=torch.float32)
        prev_latents = mean + _broadcast(std, mean) * noise.float()  # [B, ...]
    return prev_latents.detach().float()


CPS_LOG_PROBS = ("unnormalized", "gaussian")


def cps_step(
    latents: torch.Tensor,
    velocity: torch.Tensor,
    sigma: Scalar,
    sigma_next: Scalar,
    noise_level: float,
    prev_latents: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    sigma_max_guard: Scalar | None = None,
    log_prob_form: str = "unnormalized",
) -> StepOutput:
    """One Coefficients-Preserving Sampling step (docs/algorithms.md §2.3, flow_grpo `sde_type='cps'`), float32.

        x̂0 = x_i − σ·v,   x̂1 = x_i + (1 − σ)·v,   c = σ_next·sin(a·π/2)
        μ_i = (1 − σ_next)·x̂0 + sqrt(σ_next² − c²)·x̂1,   x_{i+1} = μ_i + c·ε

    The noise coefficients of x_{i+1} are sqrt(σ_next² − c²) (predicted noise) and c (fresh
    noise): their squares sum to σ_next², the schedule's noise variance at σ_next, and the
    signal coefficient is the schedule's 1 − σ_next. sqrt(σ_next² − c²) is computed as
    σ_next·cos(a·π/2) (the same number, never the square root of a rounded negative).
    At σ_next = 0, c = 0: the step is deterministic (log-prob 0).

    `log_prob_form`:
    * "unnormalized" (flow_grpo, verl-omni, UniRL): ℓ = −mean_dims (x_{i+1} − μ_i)², every constant
      (1/(2c²), log c, ½ log 2π) removed, so exp(ℓ − ℓ_old) is a tempered ratio; the
      reference pairs it with clip_range 1e-5.
    * "gaussian": the per-dim Gaussian log-density with std c (a true likelihood ratio).
    `sigma_max_guard` is ignored (nothing divides by 1 − σ). Other arguments as `flow_sde_step`.
    """
    if noise_level < 0:
        raise ValueError(f"noise_level must be >= 0, got {noise_level}")
    if log_prob_form not in CPS_LOG_PROBS:
        raise ValueError(f"CPS log_prob_form={log_prob_form!r}: choose one of {CPS_LOG_PROBS}")
    latents, velocity = latents.float(), velocity.float()
    batch_size, device = latents.shape[0], latents.device
    sigma_b = _per_sample(sigma, batch_size)  # [B]
    sigma_next_b = _per_sample(sigma_next, batch_size)  # [B]
    angle = noise_level * math.pi / 2
    fresh = sigma_next_b * math.sin(angle)  # [B] c
    predicted = sigma_next_b * math.cos(angle)  # [B] sqrt(σ_next² − c²)
    fresh, predicted, sigma_b, sigma_next_b = (_to_device(t, device) for t in (fresh, predicted, sigma_b, sigma_next_b))
    sig = _broadcast(sigma_b, latents)  # [B, 1, ...]
    x0_hat = latents - sig * velocity  # [B, ...]
    x1_hat = latents + (1 - sig) * velocity  # [B, ...]
    mean = _broadcast(1 - sigma_next_b, latents) * x0_hat + _broadcast(predicted, latents) * x1_hat  # [B, ...]
    prev_latents = _draw_or_take(mean, fresh, prev_latents, noise, generator)  # [B, ...]
    if log_prob_form == "unnormalized":
        log_prob = -((prev_latents - mean) ** 2).flatten(1).mean(dim=1)  # [B]
    else:
        stochastic = fresh > 0  # [B]
        safe_std = torch.where(stochastic, fresh, torch.ones_like(fresh))  # [B]
        log_prob = torch.where(
            stochastic, gaussian_log_prob(prev_latents, mean, safe_std), torch.zeros_like(fresh)
        )  # [B]
    return StepOutput(prev_latents, log_prob, mean, fresh, fresh)


KERNELS = {
    "flow_sde": flow_sde_step,
    "dance_sde": dance_sde_step,
    "em_sde": em_sde_step,
    "cps": cps_step,
    "cps_gaussian": partial(cps_step, log_prob_form="gaussian"),
}
"""rollout.kernel -> step function. All share `flow_sde_step`'s signature; the trajectory
stores the name, so rollout and replay always score with the same kernel."""

GAUSSIAN_KERNELS = ("flow_sde", "dance_sde", "em_sde", "cps_gaussian")
"""Kernels whose log-prob is a true Gaussian density (GRPO-Guard's RatioNorm needs one)."""


def transition_step(
    kernel: str,
    latents: torch.Tensor,
    velocity: torch.Tensor,
    sigma: Scalar,
    sigma_next: Scalar,
    noise_level: float,
    prev_latents: torch.Tensor | None = None,
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    sigma_max_guard: Scalar | None = None,
) -> StepOutput:
    """The step of kernel `kernel` (a KERNELS name): the one entry point for rollout and replay."""
    try:
        step = KERNELS[kernel]
    except KeyError:
        raise ValueError(f"rollout.kernel={kernel!r}: choose one of {', '.join(KERNELS)}") from None
    return step(
        latents,
        velocity,
        sigma,
        sigma_next,
        noise_level,
        prev_latents=prev_latents,
        noise=noise,
        generator=generator,
        sigma_max_guard=sigma_max_guard,
    )
