"""Sigma schedules: diffusers parity (bitwise), the §1 worked example, exact shift mode."""

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from genalign.sampling.schedules import flow_match_sigmas, model_timesteps, time_shift

# docs/algorithms.md §1 worked example: SD3.5-M, shift 3, 10 steps (diffusers formulas, double-shifted end)
SD35_SIGMAS = [1.0000, 0.9601, 0.9133, 0.8577, 0.7904, 0.7073, 0.6022, 0.4649, 0.2780, 0.0089, 0.0]


def test_time_shift_hand_values():
    # s=3: 3*0.5 / (1 + 2*0.5) = 0.75 ; 3*0.25 / (1 + 0.5) = 0.5 ; endpoints fixed
    sigmas = torch.tensor([0.0, 0.25, 0.5, 1.0], dtype=torch.float64)
    assert time_shift(sigmas, 3.0).tolist() == [0.0, 0.5, 0.75, 1.0]
    assert torch.equal(time_shift(sigmas, 1.0), sigmas)


def test_sd35_worked_example():
    sigmas = flow_match_sigmas(10, 3.0)
    assert sigmas.dtype == torch.float32 and sigmas.shape == (11,)
    # the table holds 4 decimals: up to 5e-5 of rounding, plus float32's (< 1e-7 below 1)
    torch.testing.assert_close(sigmas, torch.tensor(SD35_SIGMAS), atol=5e-5 + 1e-7, rtol=0)
    # double shift: last timestep = 1000*shift(1/1000) = 2.994, shifted again -> 0.0089 (not 0.003)
    assert sigmas[-2].item() == pytest.approx(0.0089, abs=5e-5 + 1e-7)


@pytest.mark.parametrize("shift", [1.0, 3.0, 2.5, 0.7])
@pytest.mark.parametrize("num_steps", [1, 2, 10, 28, 40])
def test_matches_diffusers_scheduler_bitwise(shift, num_steps):
    scheduler = FlowMatchEulerDiscreteScheduler(shift=shift)
    scheduler.set_timesteps(num_steps)
    assert torch.equal(flow_match_sigmas(num_steps, shift), scheduler.sigmas)


def test_exact_mode_is_shifted_linspace():
    sigmas = flow_match_sigmas(4, 3.0, diffusers_compat=False)
    # shift 3 of 1, 0.75, 0.5, 0.25, 0: 1, 2.25/2.5=0.9, 1.5/2=0.75, 0.75/1.5=0.5, 0
    torch.testing.assert_close(sigmas, torch.tensor([1.0, 0.9, 0.75, 0.5, 0.0]), atol=1e-7, rtol=0)
    assert sigmas.dtype == torch.float32
    # SD3.5, 10 steps: the exact last non-zero sigma is shift(0.1) = 0.3 / 1.2 = 0.25, and the
    # exact schedule differs from the diffusers one (whose linspace runs from 1 to 0.003, §1)
    exact = flow_match_sigmas(10, 3.0, diffusers_compat=False)
    assert exact[-2].item() == pytest.approx(0.25, abs=1e-7)
    assert not torch.equal(exact, flow_match_sigmas(10, 3.0))


@pytest.mark.parametrize("compat", [True, False])
def test_schedule_is_strictly_decreasing_from_one_to_zero(compat):
    sigmas = flow_match_sigmas(25, 3.0, diffusers_compat=compat)
    assert sigmas[0].item() == 1.0 and sigmas[-1].item() == 0.0
    assert bool((sigmas[1:] < sigmas[:-1]).all())


def test_invalid_arguments():
    with pytest.raises(ValueError, match="num_steps"):
        flow_match_sigmas(0)
    with pytest.raises(ValueError, match="shift"):
        flow_match_sigmas(10, 0.0)


def test_model_timesteps():
    sigmas = torch.tensor([1.0, 0.5, 0.0])
    assert model_timesteps(sigmas).tolist() == [1000.0, 500.0, 0.0]
    assert torch.equal(model_timesteps(sigmas, scale=1.0), sigmas)


def test_dynamic_shift_mu_by_hand():
    from genalign.sampling.schedules import dynamic_shift_mu

    # slope (1.15 - 0.5) / (4096 - 256) = 0.65 / 3840; 1024 tokens (512px FLUX): 0.5 + 768 * 0.65 / 3840 = 0.63
    assert abs(dynamic_shift_mu(1024) - 0.63) < 1e-12
    assert abs(dynamic_shift_mu(256) - 0.5) < 1e-12 and abs(dynamic_shift_mu(4096) - 1.15) < 1e-12


def test_exponential_time_shift_and_terminal_stretch_by_hand():
    import math

    from genalign.sampling.schedules import exponential_time_shift, stretch_to_terminal, time_shift

    sigmas = torch.tensor([1.0, 0.5, 0.25])
    # e^mu / (e^mu + 1/σ - 1) with e^mu = 3: σ=0.5 -> 3/4, σ=0.25 -> 3/6 = 0.5; the static shift s = e^mu
    torch.testing.assert_close(exponential_time_shift(sigmas, math.log(3.0)), torch.tensor([1.0, 0.75, 0.5]))
    torch.testing.assert_close(exponential_time_shift(sigmas, 0.7), time_shift(sigmas, math.exp(0.7)))
    # 1 - σ = [0, 0.5, 0.75]; scale 0.75 / 0.98 -> 1 - [0, 0.65333, 0.98] = [1, 0.34667, 0.02]
    torch.testing.assert_close(stretch_to_terminal(sigmas, 0.02), torch.tensor([1.0, 1 - 0.5 * 0.98 / 0.75, 0.02]))


@pytest.mark.parametrize(
    "config",
    [
        dict(use_dynamic_shifting=True, shift=3.0),  # FLUX.1-dev
        # Qwen-Image
        dict(use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9, max_image_seq_len=8192, shift_terminal=0.02),
        dict(use_dynamic_shifting=False, shift=1.0),  # FLUX.1-schnell
    ],
)
def test_pipeline_sigmas_match_the_diffusers_scheduler_bit_for_bit(config):
    import numpy as np
    from diffusers import FlowMatchEulerDiscreteScheduler

    from genalign.models.diffusers_common import scheduler_sigmas
    from genalign.sampling.schedules import dynamic_shift_mu

    scheduler = FlowMatchEulerDiscreteScheduler(**config)
    c = scheduler.config
    for steps in [2, 6, 10, 28]:
        for tokens in [16, 1024, 4096]:
            mu = dynamic_shift_mu(tokens, c.base_image_seq_len, c.max_image_seq_len, c.base_shift, c.max_shift)
            scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
            assert torch.equal(scheduler_sigmas(c, steps, tokens), scheduler.sigmas)


def test_karras_flow_sigmas_by_hand():
    """Cosmos-Predict2.5's schedule (s in [0.01, 200], rho 7): the ends are 200/201 and
    0.01/1.01; the midpoint of three is ((200^(1/7) + 0.01^(1/7)) / 2)^7 mapped by s / (1 + s)."""
    from genalign.sampling.schedules import karras_flow_sigmas

    two = karras_flow_sigmas(2, 0.01, 200.0)
    assert two.dtype == torch.float32 and two.shape == (3,)
    assert two.tolist() == torch.tensor([200 / 201, 0.01 / 1.01, 0.0]).tolist()
    middle = ((200 ** (1 / 7) + 0.01 ** (1 / 7)) / 2) ** 7  # ((2.1317 + 0.5179) / 2)^7
    assert middle == pytest.approx(7.1625, abs=1e-4)
    assert karras_flow_sigmas(3, 0.01, 200.0)[1].item() == pytest.approx(middle / (1 + middle), abs=1e-7)
    assert karras_flow_sigmas(1, 0.01, 200.0).tolist() == torch.tensor([200 / 201, 0.0]).tolist()
    with pytest.raises(ValueError, match="sigma_min < sigma_max"):
        karras_flow_sigmas(4, 200.0, 0.01)


@pytest.mark.parametrize("num_steps", [1, 2, 4, 20, 35])
def test_karras_flow_sigmas_match_the_cosmos_unipc_scheduler_bitwise(num_steps):
    """The scheduler Cosmos-Predict2.5 ships (diffusers' convert_cosmos_to_diffusers.py)."""
    from diffusers import UniPCMultistepScheduler

    from genalign.sampling.schedules import karras_flow_sigmas

    scheduler = UniPCMultistepScheduler(
        use_karras_sigmas=True, use_flow_sigmas=True, prediction_type="flow_prediction", sigma_max=200.0, sigma_min=0.01
    )
    scheduler.set_timesteps(num_steps)
    assert torch.equal(karras_flow_sigmas(num_steps, 0.01, 200.0), scheduler.sigmas)


@pytest.mark.parametrize("tokens,steps", [(16, 3), (256, 4), (1024, 10), (4096, 28), (4300, 50), (4301, 4), (16384, 8)])
def test_empirical_shift_mu_is_diffusers(tokens, steps):
    from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu

    from genalign.sampling.schedules import empirical_shift_mu

    assert empirical_shift_mu(tokens, steps) == compute_empirical_mu(tokens, steps)


def test_empirical_shift_mu_by_hand():
    from genalign.sampling.schedules import empirical_shift_mu

    # at 200 steps the 200-step line itself: 1.6927e-4 · 1024 + 0.45666666
    assert abs(empirical_shift_mu(1024, 200) - (0.00016927 * 1024 + 0.45666666)) < 1e-12
    # at 10 steps the 10-step line: 8.73809524e-5 · 1024 + 1.89833333
    assert abs(empirical_shift_mu(1024, 10) - (8.73809524e-05 * 1024 + 1.89833333)) < 1e-12
    # past 4300 tokens the step count no longer matters
    assert empirical_shift_mu(8192, 4) == empirical_shift_mu(8192, 50)


@pytest.mark.parametrize("shift", [5.0, 7.0, 9.0])  # HunyuanVideo 1.5 480p, 720p I2V, 720p T2V
def test_linspace_shift_sigmas_match_the_hunyuan_video15_pipeline_bit_for_bit(shift):
    """HunyuanVideo15Pipeline hands the scheduler np.linspace(1, 0, N + 1)[:-1] and lets its
    static shift act; by hand at N = 2, s = 5: [1, 5·0.5 / (1 + 4·0.5)] = [1, 5/6], then 0."""
    import numpy as np

    from genalign.sampling.schedules import linspace_shift_sigmas

    scheduler = FlowMatchEulerDiscreteScheduler(shift=shift)
    for steps in [1, 2, 8, 16, 50]:
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 0.0, steps + 1)[:-1])
        assert torch.equal(linspace_shift_sigmas(steps, shift), scheduler.sigmas)
    torch.testing.assert_close(linspace_shift_sigmas(2, 5.0), torch.tensor([1.0, 5 / 6, 0.0]))
    with pytest.raises(ValueError, match="num_steps"):
        linspace_shift_sigmas(0, shift)
