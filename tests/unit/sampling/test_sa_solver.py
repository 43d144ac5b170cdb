"""SA-Solver (docs/algorithms.md §11.4): the step against diffusers' SASolverScheduler, the whole
PEC loop against a transcription of the AWM reference's `SASolver.sample`
(scxue/advantage_weighted_matching flow_grpo/diffusers_patch/sa_solver.py, be51372), and the
solver against the exact probability flow of a Gaussian data distribution."""

import math

import pytest
import torch

from genalign.sampling.sa_solver import (
    SASolverConfig,
    apply_step,
    exponential_moments,
    half_log_snr,
    lagrange_basis,
    sa_solver_sample,
    solver_grid,
    step_coefficients,
)
from genalign.sampling.schedules import flow_match_sigmas

# float64 throughout the comparisons: both sides evaluate the same closed forms in a different
# order; the Lagrange weights divide by node gaps (λ differences ≥ ~0.05 on these grids), so a
# few hundred ulps of 1e-16 relative is the most either can lose.
F64_TOL = dict(rtol=1e-9, atol=1e-9)


def reference_moment(order, start, end, tau):
    """The reference's get_coefficients_exponential_positive (orders 0-3), in our words."""
    c = 1 + tau**2
    e, s = c * end, c * start
    decay = math.exp(-(e - s))
    polys = {
        0: lambda u: 1.0,
        1: lambda u: u - 1,
        2: lambda u: u**2 - 2 * u + 2,
        3: lambda u: u**3 - 3 * u**2 + 6 * u - 6,
    }
    p = polys[order]
    return math.exp(e) * (p(e) - p(s) * decay) / c ** (order + 1)


def reference_lagrange(lams):
    """The reference's lagrange_polynomial_coefficient written out for 1-3 nodes (4 by product)."""
    if len(lams) == 1:
        return [[1.0]]
    if len(lams) == 2:
        a, b = lams
        return [[1 / (a - b), -b / (a - b)], [1 / (b - a), -a / (b - a)]]
    if len(lams) == 3:
        a, b, c = lams
        d = [(a - b) * (a - c), (b - a) * (b - c), (c - a) * (c - b)]
        return [
            [1 / d[0], (-b - c) / d[0], b * c / d[0]],
            [1 / d[1], (-a - c) / d[1], a * c / d[1]],
            [1 / d[2], (-a - b) / d[2], a * b / d[2]],
        ]
    rows = []
    for i, li in enumerate(lams):
        others = [x for j, x in enumerate(lams) if j != i]
        d = math.prod(li - x for x in others)
        e1 = sum(others)
        e2 = others[0] * others[1] + others[0] * others[2] + others[1] * others[2]
        e3 = math.prod(others)
        rows.append([1 / d, -e1 / d, e2 / d, -e3 / d])
    return rows


def reference_update(order, x, tau, preds_newest_first, lam_nodes, t_prev, t, noise, adjust_gap):
    """One reference few-steps update (predictor or corrector: they differ only in the nodes and in
    the gap that divides the order-2 adjustment), in float64."""
    lam_t, lam_s = half_log_snr(t), half_log_snr(t_prev)
    h = lam_t - lam_s
    basis = reference_lagrange(lam_nodes)
    coeffs = [
        sum(basis[i][j] * reference_moment(order - 1 - j, lam_s, lam_t, tau) for j in range(order))
        for i in range(order)
    ]
    if order == 2:
        c = 1 + tau**2
        term = math.exp(c * lam_t) * (h**2 / 2 - (h * c - 1 + math.exp(c * -h)) / c**2) / adjust_gap
        coeffs[0] += term
        coeffs[1] -= term
    grad = sum((1 + tau**2) * t * math.exp(-(tau**2) * lam_t) * coeffs[i] * preds_newest_first[i] for i in range(order))
    noise_part = t * math.sqrt(1 - math.exp(-2 * tau**2 * h)) * noise
    return math.exp(-(tau**2) * h) * (t / t_prev) * x + grad + noise_part


def reference_sample(data_prediction, x, grid, tau_fn, p, c, noises):
    """The reference's SASolver.sample (PEC, disable_first_corrector, skip_final_step,
    lower_order_final) in our words; `noises[step]` replaces its torch.randn_like."""
    steps = len(grid) - 1
    preds, times, out = [data_prediction(x, grid[0])], [grid[0]], [x]
    warm = max(p, c - 1)
    for step in range(1, steps + 1):
        t = grid[step]
        if step < warm:
            pu, cu = min(p, step), min(c, step + 1)
        else:
            pu, cu = min(p, steps - step + 1), min(c, steps - step + 2)
        if step == steps:
            out.append(preds[-1])
            break
        lam = [half_log_snr(times[-(i + 1)]) for i in range(pu)]
        gap = half_log_snr(times[-1]) - half_log_snr(times[-2]) if pu == 2 else None
        xp = reference_update(pu, x, tau_fn(t), preds[::-1], lam, times[-1], t, noises[step], gap)
        preds.append(data_prediction(xp, t))
        if c > 0 and not (step < warm and step == 1):
            nodes = times + [t]
            lam = [half_log_snr(nodes[-(i + 1)]) for i in range(cu)]
            gap = half_log_snr(t) - half_log_snr(times[-1])
            x = reference_update(cu, x, tau_fn(t), preds[::-1], lam, times[-1], t, noises[step], gap)
        else:
            x = xp
        times.append(t)
        out.append(x)
    return out


def gaussian_data_prediction(mean, std):
    """E[x0 | x_t] for x0 ~ N(mean, std²) per dimension and x_t = (1 − t)·x0 + t·ε: the exact D."""

    def predict(x, t):
        var_t = (1 - t) ** 2 * std**2 + t**2
        return mean + (1 - t) * std**2 / var_t * (x - (1 - t) * mean)

    return predict


def test_exponential_moments_match_the_reference_closed_forms():
    for lam_s, lam_t, tau in [(-6.9, -5.0, 0.0), (-1.2, -0.4, 0.4), (0.3, 1.1, 1.0), (2.0, 2.9, 0.4)]:
        ours = exponential_moments(4, lam_s, lam_t, tau)
        for k in range(4):
            assert ours[k] == pytest.approx(reference_moment(k, lam_s, lam_t, tau), rel=1e-12, abs=1e-14)
    # and the integral itself, by the midpoint rule on a fine grid (error ~ h²/24·max|f''|·width)
    lam_s, lam_t, tau = -0.7, 0.2, 0.4
    n = 20000
    width = (lam_t - lam_s) / n
    mids = [lam_s + (i + 0.5) * width for i in range(n)]
    for k, value in enumerate(exponential_moments(4, lam_s, lam_t, tau)):
        quad = sum(math.exp((1 + tau**2) * m) * m**k for m in mids) * width
        assert value == pytest.approx(quad, rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_lagrange_basis_matches_the_reference_and_interpolates(count):
    nodes = [-2.1, -0.9, 0.4, 1.7][:count]
    ours, theirs = lagrange_basis(nodes), reference_lagrange(nodes)
    for row, ref_row in zip(ours, theirs):
        assert row == pytest.approx(ref_row, rel=1e-12, abs=1e-12)
    for i, row in enumerate(ours):  # L_i(λ_j) = δ_ij
        for j, node in enumerate(nodes):
            value = sum(a * node ** (count - 1 - k) for k, a in enumerate(row))
            assert value == pytest.approx(float(i == j), abs=1e-12)


def test_order_one_step_is_the_closed_form():
    """One node: x_t = e^{−τ²h}(σ_t/σ_s)x + α_t(1 − e^{−(1+τ²)h})·D + σ_t sqrt(1 − e^{−2τ²h})·ε."""
    t_prev, t, tau = 0.8, 0.6, 0.4
    h = half_log_snr(t) - half_log_snr(t_prev)
    a, (b,), c = step_coefficients([t_prev], t_prev, t, tau)
    assert a == pytest.approx(math.exp(-(tau**2) * h) * t / t_prev, rel=1e-13)
    assert b == pytest.approx((1 - t) * (1 - math.exp(-(1 + tau**2) * h)), rel=1e-13)
    assert c == pytest.approx(t * math.sqrt(1 - math.exp(-2 * tau**2 * h)), rel=1e-13)
    a0, (b0,), c0 = step_coefficients([t_prev], t_prev, t, 0.0)  # τ = 0: DDIM in x0 form, x_t = (t/t_s)x + (1 − t/t_s)D
    assert (a0, c0) == (pytest.approx(t / t_prev, rel=1e-13), 0.0)
    assert b0 == pytest.approx(1 - t / t_prev, rel=1e-12)


def _scheduler(grid):
    diffusers = pytest.importorskip("diffusers")
    scheduler = diffusers.SASolverScheduler(
        use_flow_sigmas=True, prediction_type="flow_prediction", algorithm_type="data_prediction"
    )
    scheduler.sigmas = torch.tensor(grid, dtype=torch.float64)
    return scheduler


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("tau", [0.0, 0.4, 1.0])
def test_predictor_and_corrector_steps_match_diffusers(order, tau):
    """diffusers' stochastic_adams_bashforth_update (predictor: step k → k+1 from D_k, D_{k−1}, …)
    and stochastic_adams_moulton_update (corrector: nodes D_{k+1}, D_k, …) on the same inputs."""
    grid = solver_grid(flow_match_sigmas(10, shift=3.0))
    gen = torch.Generator().manual_seed(order)
    k = 5  # step from grid[k] to grid[k + 1], with k ≥ order − 1 earlier points available
    preds = [torch.randn(2, 3, 4, generator=gen, dtype=torch.float64) for _ in range(k + 2)]  # D at grid[0..k+1]
    x = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    noise = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)

    scheduler = _scheduler(grid)
    scheduler._step_index = k
    scheduler.model_outputs = preds[: k + 1]
    expected = scheduler.stochastic_adams_bashforth_update(
        model_output=None, sample=x, noise=noise, order=order, tau=torch.tensor(tau, dtype=torch.float64)
    )
    nodes = [grid[k - i] for i in range(order)]
    ours = apply_step(x, preds[: k + 1][::-1][:order], step_coefficients(nodes, grid[k], grid[k + 1], tau), noise)
    torch.testing.assert_close(ours, expected, **F64_TOL)

    scheduler._step_index = k + 1  # the corrector runs at the next step's start, with D_{k+1} known
    expected = scheduler.stochastic_adams_moulton_update(
        this_model_output=preds[k + 1],
        last_sample=x,
        last_noise=noise,
        this_sample=x,
        order=order,
        tau=torch.tensor(tau, dtype=torch.float64),
    )
    nodes = [grid[k + 1 - i] for i in range(order)]
    ours = apply_step(x, preds[: k + 2][::-1][:order], step_coefficients(nodes, grid[k], grid[k + 1], tau), noise)
    torch.testing.assert_close(ours, expected, **F64_TOL)


@pytest.mark.parametrize("orders", [(2, 2), (3, 3), (1, 2), (2, 0), (4, 4)])
def test_sampling_matches_a_transcription_of_the_reference_loop(orders):
    """The whole PEC run (warm-up, skipped first corrector, lower orders at the end, final data
    prediction) on SD3's 14-step shifted schedule with the AWM GenEval τ window."""
    p, c = orders
    cfg = SASolverConfig(tau=0.4, tau_sigma_min=0.3, tau_sigma_max=0.9, predictor_order=p, corrector_order=c)
    grid = solver_grid(flow_match_sigmas(14, shift=3.0))
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, 2, 5, generator=gen, dtype=torch.float64)
    noises = {step: torch.randn(3, 2, 5, generator=gen, dtype=torch.float64) for step in range(1, 15)}
    predict = gaussian_data_prediction(0.3, 0.5)
    ours = sa_solver_sample(predict, x, grid, cfg, lambda step: noises[step])
    theirs = reference_sample(predict, x, grid, cfg.tau_at, p, c, noises)
    assert len(ours) == len(theirs) == 15
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, **F64_TOL)


def test_float32_run_stays_within_its_rounding_bound():
    """The rollout runs the latents in float32: against the float64 run of the same inputs the
    error is ≲ steps × (terms per step) × ε₃₂ × |x| ≈ 14 × 5 × 6e-8 ≈ 4e-6 relative."""
    cfg = SASolverConfig()
    grid = solver_grid(flow_match_sigmas(14, shift=3.0))
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 16, generator=gen, dtype=torch.float64)
    noises = {step: torch.randn(4, 16, generator=gen, dtype=torch.float64) for step in range(1, 15)}
    predict = gaussian_data_prediction(0.3, 0.5)
    exact = sa_solver_sample(predict, x, grid, cfg, lambda step: noises[step])
    single = sa_solver_sample(predict, x.float(), grid, cfg, lambda step: noises[step].float())
    for a, b in zip(single, exact):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("orders, order", [((1, 0), 1), ((2, 0), 2), ((2, 2), 2), ((3, 3), 3)])
def test_deterministic_solver_converges_at_its_order_to_the_exact_flow(orders, order):
    """τ = 0: for Gaussian data the flow ODE dx/dt = (x − D(x, t))/t is solved exactly by the
    quantile map x_t = μ_t + (s_t/s_0)(x_0 − μ_0), μ_t = (1 − t)m, s_t² = (1 − t)²s² + t². On a
    grid uniform in λ (λ ∈ [−5, 3]), halving the step divides a p-th order solver's largest error by
    about 2^p (we ask for 0.85·2^p). On the schedule's own grid the last steps keep λ-steps of
    ~log 2 whatever T, so the order shows only in λ."""
    mean, std = 0.3, 0.5
    predict = gaussian_data_prediction(mean, std)
    p, c = orders

    def sd(t):
        return math.sqrt((1 - t) ** 2 * std**2 + t**2)

    def max_error(num_steps):
        grid = [1 / (1 + math.exp(-5 + 8 * i / num_steps)) for i in range(num_steps + 1)] + [0.0]
        x0 = torch.linspace(-2, 2, 9, dtype=torch.float64)
        cfg = SASolverConfig(tau=0.0, predictor_order=p, corrector_order=c)
        states = sa_solver_sample(predict, x0, grid, cfg, lambda step: None)
        exact = [(1 - t) * mean + sd(t) / sd(grid[0]) * (x0 - (1 - grid[0]) * mean) for t in grid[:-1]]
        return max(float((state - want).abs().max()) for state, want in zip(states[:-1], exact))

    errors = [max_error(n) for n in (10, 20, 40)]
    assert errors[0] / errors[1] > 0.85 * 2**order and errors[1] / errors[2] > 0.85 * 2**order


def test_stochastic_solver_keeps_the_marginals():
    """τ = 1 on the reference's window σ ∈ [0.3, 0.9]: the reverse SDE with the exact D keeps each
    x_t's marginal N((1 − t)m, s_t²). At N = 20000 samples the statistical error is 3·s_t/sqrt(N) on
    the mean and 3·s_t/sqrt(2N) on the std; the discretisation's is bounded by the τ = 0 run's own
    std error on the same grid (≤ 1e-3 at 40 steps for t ≥ 0.25), twice over for the noisy steps."""
    mean, std, n = 0.3, 0.5, 20000
    grid = solver_grid(flow_match_sigmas(40, shift=3.0))
    predict = gaussian_data_prediction(mean, std)

    def run(tau):
        gen = torch.Generator().manual_seed(11)
        x = torch.randn(n, generator=gen, dtype=torch.float64)
        cfg = SASolverConfig(tau=tau, tau_sigma_min=0.3, tau_sigma_max=0.9)
        return sa_solver_sample(predict, x, grid, cfg, lambda step: torch.randn(n, generator=gen, dtype=torch.float64))

    def sd(t):
        return math.sqrt((1 - t) ** 2 * std**2 + t**2)

    kept = [i for i, t in enumerate(grid) if t >= 0.25]
    deterministic = run(0.0)  # the exact flow scales the initial samples' std by s_t/s_0
    start_std = float(deterministic[0].std())
    ode_error = max(abs(float(deterministic[i].std()) - sd(grid[i]) / sd(grid[0]) * start_std) for i in kept)
    assert ode_error < 1e-3
    noisy = run(1.0)
    for i in kept:
        t = grid[i]
        assert abs(float(noisy[i].mean()) - (1 - t) * mean) < 3 * sd(t) / math.sqrt(n)
        assert abs(float(noisy[i].std()) - sd(t)) < 3 * sd(t) / math.sqrt(2 * n) + 2 * ode_error


def test_grid_is_the_reference_s_and_bad_schedules_are_refused():
    sigmas = flow_match_sigmas(14, shift=3.0)
    grid = solver_grid(sigmas)
    assert grid[0] == 1 - 1e-3 and grid[-1] == 0.0
    assert grid[-2] == pytest.approx(float(sigmas[-3]) / 2, rel=1e-15)
    assert grid[1:-2] == [float(s) for s in sigmas.double()[1:-2]]
    with pytest.raises(ValueError, match="ending at 0"):
        solver_grid(torch.tensor([1.0, 0.5, 0.1]))
    with pytest.raises(ValueError, match="ending at 0"):
        solver_grid(torch.tensor([1.0, 0.0]))


def test_config_problems_name_the_key():
    assert SASolverConfig().problems(14) == []
    assert SASolverConfig().tau_at(0.9) == 0.4 and SASolverConfig().tau_at(0.95) == 0.0
    problems = " | ".join(SASolverConfig(tau=-1, predictor_order=5, corrector_order=-1).problems(14))
    assert "rollout.sa_solver.tau" in problems and "predictor_order" in problems and "corrector_order" in problems
    assert "rollout.num_steps >= 3" in " ".join(SASolverConfig(predictor_order=3).problems(2))
    assert "tau_sigma_min" in " ".join(SASolverConfig(tau_sigma_min=0.9, tau_sigma_max=0.3).problems(14))
