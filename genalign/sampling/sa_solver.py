"""SA-Solver: the stochastic Adams predictor–corrector sampler (`rollout.sampler=sa_solver`).

Where it fits: the rollout collector calls `sa_solver_trajectory` instead of
`trajectory.sample_trajectory` when `rollout.sampler=sa_solver` (AWM's default, as its
reference samples). It records what an algorithm that reads only the final sample needs —
the latents at every grid point, the last one the clean x0 — and no log-probs: a multistep
step's density depends on earlier model outputs, so nothing here is replayed.

The math is docs/algorithms.md §11.4 (Xue et al. 2023, arXiv 2309.05019, data-prediction form
for flow matching: α_t = 1 − t, σ_t = t, λ_t = log(α_t/σ_t)), as the AWM reference code runs it
(scxue/advantage_weighted_matching `flow_grpo/diffusers_patch/sa_solver.py`, be51372): PEC
mode, the first corrector skipped, lower orders at the end, the "few steps" order-2 adjustment,
and a final step that returns the last data prediction. Coefficients are computed on the host
in float64 from the grid (they are a handful of scalars per step); the latent update is float32.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import torch

from genalign.rollout.config import SA_SOLVER_MAX_ORDER as MAX_ORDER
from genalign.rollout.config import SASolverConfig
from genalign.sampling.trajectory import SampledTrajectory, _to_device, step_noise

if TYPE_CHECKING:  # annotations only: sampling sits below the model families
    from genalign.models.base import Condition, FlowPolicy

FIRST_SIGMA_MAX = 1 - 1e-3
"""The grid's first t is at most this: λ = log((1 − t)/t) is −∞ at t = 1 (the reference sets t_0 = 1 − 10⁻³)."""


def half_log_snr(t: float) -> float:
    """λ_t = log(α_t/σ_t) = log((1 − t)/t) for flow matching (α_t = 1 − t, σ_t = t)."""
    return math.log((1 - t) / t)


def solver_grid(sigmas: torch.Tensor) -> list[float]:
    """The t's the solver steps through, float64: the schedule `sigmas` [T+1] (ending at 0) with
    t_0 capped at 1 − 10⁻³ (λ is finite) and t_{T−1} = t_{T−2}/2, as the reference sets them
    before sampling (the final step to t_T = 0 returns the data prediction, so λ_T = +∞ is never used)."""
    grid = [float(s) for s in sigmas.double()]
    if len(grid) < 3 or grid[-1] != 0 or not all(0 <= t <= 1 for t in grid):
        raise ValueError(f"SA-Solver needs a flow-matching schedule of >= 2 steps in [0, 1] ending at 0, got {grid}")
    grid[-2] = grid[-3] / 2
    grid[0] = min(grid[0], FIRST_SIGMA_MAX)
    return grid


def exponential_moments(count: int, lambda_s: float, lambda_t: float, tau: float) -> list[float]:
    """I_k = ∫_{λ_s}^{λ_t} e^{(1+τ²)λ} λ^k dλ for k = 0 .. count − 1 (closed form, float64).

    With c = 1 + τ² and u = cλ, ∫ e^u u^k du = e^u·P_k(u), P_k(u) = Σ_j (−1)^j k!/(k−j)!·u^{k−j};
    e^{u_t} is factored out (as the reference does) so only e^{−(u_t − u_s)} ≤ 1 is exponentiated
    beside it."""
    c = 1 + tau**2
    u_s, u_t = c * lambda_s, c * lambda_t
    decay = math.exp(-(u_t - u_s))

    def poly(k: int, u: float) -> float:
        return sum((-1) ** j * math.perm(k, j) * u ** (k - j) for j in range(k + 1))

    return [math.exp(u_t) * (poly(k, u_t) - poly(k, u_s) * decay) / c ** (k + 1) for k in range(count)]


def lagrange_basis(nodes: list[float]) -> list[list[float]]:
    """Coefficients of each Lagrange basis polynomial L_i(λ) = Π_{j≠i} (λ − λ_j)/(λ_i − λ_j) over
    `nodes`, highest power first: row i, column j multiplies λ^{n−1−j}."""
    rows = []
    for i, node in enumerate(nodes):
        coeffs, denominator = [1.0], 1.0
        for j, other in enumerate(nodes):
            if j != i:
                coeffs = [a - other * b for a, b in zip(coeffs + [0.0], [0.0] + coeffs)]  # ·(λ − λ_j)
                denominator *= node - other
        rows.append([a / denominator for a in coeffs])
    return rows


def step_coefficients(node_times: list[float], t_prev: float, t: float, tau: float) -> tuple[float, list[float], float]:
    """One SA-Solver update from t_prev to t with the data predictions at `node_times` (newest
    first): x_t = a·x + Σ_i b_i·D_i + c·ε. Returns (a, [b_i], c), float64 (docs/algorithms.md §11.4).

        h = λ_t − λ_prev,  a = e^{−τ²h}·σ_t/σ_prev,  c = σ_t·sqrt(1 − e^{−2τ²h}),
        b_i = (1 + τ²)·σ_t·e^{−τ²λ_t}·Σ_j L_i[j]·I_{n−1−j}

    plus, with two nodes, the reference's "few steps" adjustment (O(h³), the UniPC-like B(h)):
    b_0 += d, b_1 −= d with d = (1 + τ²)σ_t e^{−τ²λ_t}·e^{(1+τ²)λ_t}·(h²/2 − ((1+τ²)h − 1 +
    e^{−(1+τ²)h})/(1+τ²)²)/(λ_node0 − λ_node1). The predictor's nodes are earlier points, the
    corrector's start with t itself (there λ_node0 − λ_node1 = h)."""
    lambdas = [half_log_snr(node) for node in node_times]
    lambda_prev, lambda_t = half_log_snr(t_prev), half_log_snr(t)
    h = lambda_t - lambda_prev
    count, c = len(lambdas), 1 + tau**2
    moments = exponential_moments(count, lambda_prev, lambda_t, tau)
    weights = [sum(row[j] * moments[count - 1 - j] for j in range(count)) for row in lagrange_basis(lambdas)]
    if count == 2:
        adjust = math.exp(c * lambda_t) * (h**2 / 2 - (c * h - 1 + math.exp(-c * h)) / c**2) / (lambdas[0] - lambdas[1])
        weights = [weights[0] + adjust, weights[1] - adjust]
    scale = c * t * math.exp(-(tau**2) * lambda_t)
    x_coef = math.exp(-(tau**2) * h) * t / t_prev
    noise_coef = t * math.sqrt(-math.expm1(-2 * tau**2 * h))
    return x_coef, [scale * w for w in weights], noise_coef


def apply_step(
    x: torch.Tensor,
    predictions: list[torch.Tensor],
    coefficients: tuple[float, list[float], float],
    noise: torch.Tensor | None,
) -> torch.Tensor:
    """x_t = a·x + Σ_i b_i·D_i + c·ε in float32 ([B, ...]; `predictions` newest first; no noise term when c = 0)."""
    x_coef, pred_coefs, noise_coef = coefficients
    out = x_coef * x
    for coef, prediction in zip(pred_coefs, predictions):
        out = out + coef * prediction
    if noise_coef != 0:
        assert noise is not None, "a stochastic step needs its noise"
        out = out + noise_coef * noise
    return out


def step_orders(step: int, num_steps: int, cfg: SASolverConfig) -> tuple[int, int]:
    """(predictor nodes, corrector nodes) of step `step` (1 .. T − 1): lower orders while the
    history is short and, at the end, as the reference's `lower_order_final`; 0 corrector nodes
    at step 1 when the warm-up phase runs (the reference's `disable_first_corrector`)."""
    p, c = cfg.predictor_order, cfg.corrector_order
    if step < max(p, c - 1):  # warm-up: the reference's first loop
        return min(p, step), (0 if step == 1 else min(c, step + 1))
    return min(p, num_steps - step + 1), min(c, num_steps - step + 2)


def sa_solver_sample(
    data_prediction: Callable[[torch.Tensor, float], torch.Tensor],
    x: torch.Tensor,
    grid: list[float],
    cfg: SASolverConfig,
    noise_at: Callable[[int], torch.Tensor | None],
) -> list[torch.Tensor]:
    """Run the PEC SA-Solver from x at grid[0] through `grid` [T+1]; returns the T + 1 states
    (x at grid[0] .. grid[T−1], then the final data prediction). `data_prediction(x, t)` is
    D(x, t) = x − t·v(x, t); `noise_at(step)` is that step's ε (called for stochastic steps only).
    Each step: predict x_p, evaluate D(x_p, t), correct x with the same ε (PEC: the corrected x is
    not re-evaluated; the next step uses D at x_p)."""
    num_steps = len(grid) - 1
    predictions, times, states = [data_prediction(x, grid[0])], [grid[0]], [x]
    for step in range(1, num_steps):
        t, t_prev = grid[step], times[-1]
        tau = cfg.tau_at(t)
        noise = noise_at(step) if tau > 0 else None
        p, c = step_orders(step, num_steps, cfg)
        predicted = apply_step(x, predictions[::-1][:p], step_coefficients(times[::-1][:p], t_prev, t, tau), noise)
        predictions.append(data_prediction(predicted, t))
        if c > 0:
            nodes = ([t] + times[::-1])[:c]
            x = apply_step(x, predictions[::-1][:c], step_coefficients(nodes, t_prev, t, tau), noise)
        else:
            x = predicted
        times.append(t)
        del predictions[:-MAX_ORDER]  # no step uses more history
        states.append(x)
    states.append(predictions[-1])  # the reference's denoise_to_zero: the last data prediction
    return states


@torch.no_grad()
def sa_solver_trajectory(
    policy: FlowPolicy,
    cond: Condition,
    latents: torch.Tensor,
    generators: list[torch.Generator],
    sigmas: torch.Tensor,
    guidance_scale: float,
    cfg: SASolverConfig,
) -> SampledTrajectory:
    """Denoise `latents` [B, ...] along the SA-Solver grid of `sigmas` [T+1]. The noise of step
    k comes from each sample's generator (drawn up front in step order, stochastic steps only),
    so a sample's trajectory depends on its seed alone. Log-probs are 0 (none is defined)."""
    device = policy.device
    batch_size, latent_shape = latents.shape[0], tuple(latents.shape[1:])
    grid = solver_grid(sigmas)
    stochastic = [step for step in range(1, len(grid) - 1) if cfg.tau_at(grid[step]) > 0]
    drawn = _to_device(
        torch.stack([step_noise(generators, latent_shape) for _ in stochastic]) if stochastic else None, device
    )  # [S, B, ...]

    def data_prediction(x: torch.Tensor, t: float) -> torch.Tensor:
        sigma = torch.full((batch_size,), t, device=device)  # [B]
        return x - t * policy.velocity(x, sigma, cond, guidance_scale).float()  # [B, ...]

    def noise_at(step: int) -> torch.Tensor:
        assert drawn is not None
        return drawn[stochastic.index(step)]

    states = sa_solver_sample(
        data_prediction, latents.to(device=device, dtype=torch.float32), grid, cfg, noise_at
    )  # T+1 x [B, ...]
    num_steps = len(grid) - 1
    return SampledTrajectory(
        torch.stack(states, dim=1).cpu(), torch.zeros(batch_size, num_steps), None
    )  # [B, T+1, ...], [B, T]
