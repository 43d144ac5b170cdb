"""Flow-matching SFT (docs/algorithms.md §12): each formula against a transcription of
diffusers' computation (training_utils.compute_density_for_timestep_sampling,
compute_loss_weighting_for_sd3, FlowMatchEulerDiscreteScheduler.__init__'s training table and
train_dreambooth_lora_sd3.py's loss, huggingface/diffusers at 58eb52c0), written here in our
words on the same inputs; the best-of-N selection; the algorithm's loss end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from support import LinearPolicy

from genalign.algorithms.config import AlgorithmConfig, SFTConfig
from genalign.algorithms.forward_draws import density_draws
from genalign.algorithms.forward_losses import (
    density_sigmas,
    flow_matching_loss,
    noised,
    sd3_loss_weighting,
    timestep_density,
    training_sigma_table,
)
from genalign.algorithms.sft import FlowSFT, top_of_groups
from genalign.config.errors import ConfigError
from genalign.models.base import Condition
from genalign.preflight.load import load_config
from genalign.rollout.samples import CleanSamples

SCHEMES = ("logit_normal", "mode", "sigma_sqrt", "cosmap", "none")


# ------------------------------------------------------------ transcriptions of diffusers
def diffusers_density(scheme, batch_size, logit_mean, logit_std, mode_scale, generator):
    if scheme == "logit_normal":
        u = torch.normal(mean=logit_mean, std=logit_std, size=(batch_size,), device="cpu", generator=generator)
        return torch.nn.functional.sigmoid(u)
    u = torch.rand(size=(batch_size,), device="cpu", generator=generator)
    if scheme == "mode":
        u = 1 - u - mode_scale * (torch.cos(math.pi * u / 2) ** 2 - 1 + u)
    return u


def diffusers_weighting(scheme, sigmas):
    if scheme == "sigma_sqrt":
        return (sigmas**-2.0).float()
    if scheme == "cosmap":
        bot = 1 - 2 * sigmas + 2 * sigmas**2
        return 2 / (math.pi * bot)
    return torch.ones_like(sigmas)


def diffusers_scheduler_tables(num_train_timesteps, shift):
    """FlowMatchEulerDiscreteScheduler(shift=...) training timesteps and sigmas (static shift)."""
    timesteps = np.linspace(1, num_train_timesteps, num_train_timesteps, dtype=np.float32)[::-1].copy()
    sigmas = torch.from_numpy(timesteps).to(dtype=torch.float32) / num_train_timesteps
    sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
    return sigmas * num_train_timesteps, sigmas


def diffusers_sigmas(u, num_train_timesteps, shift):
    """The script: indices = (u * T).long(); timesteps = timesteps[indices]; get_sigmas(timesteps)."""
    schedule_timesteps, sigmas = diffusers_scheduler_tables(num_train_timesteps, shift)
    timesteps = schedule_timesteps[(u * num_train_timesteps).long()]
    return sigmas[[(schedule_timesteps == t).nonzero().item() for t in timesteps]].flatten()


def diffusers_loss(model_pred, noisy, model_input, noise, sigmas, weighting, precondition_outputs):
    sigmas, weighting = sigmas.view(-1, 1, 1, 1), weighting.view(-1, 1, 1, 1)
    if precondition_outputs:
        model_pred = model_pred * (-sigmas) + noisy
        target = model_input
    else:
        target = noise - model_input
    loss = torch.mean((weighting.float() * (model_pred.float() - target.float()) ** 2).reshape(target.shape[0], -1), 1)
    return loss  # per sample; the script then takes loss.mean()


# ------------------------------------------------------------ formulas
@pytest.mark.parametrize("scheme", SCHEMES)
def test_timestep_density_draws_the_numbers_diffusers_draws(scheme):
    """Same generator state -> the same random numbers through the same float32 operations:
    equal to the last bit (torch.cos vs math.pi enter identically)."""
    ours = timestep_density(scheme, 4096, 0.3, 1.2, 1.29, torch.Generator().manual_seed(7))
    theirs = diffusers_density(scheme, 4096, 0.3, 1.2, 1.29, torch.Generator().manual_seed(7))
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_logit_normal_density_has_its_moments():
    """u = sigmoid(n): the median of u is sigmoid(mean), and logit(u) has the chosen std
    (4·10⁴ draws: the std estimate's standard error is std/√(2N) ≈ 0.004)."""
    u = timestep_density("logit_normal", 40_000, 0.5, 1.0, 1.29, torch.Generator().manual_seed(0))
    assert abs(u.median().item() - 1 / (1 + math.exp(-0.5))) < 0.01
    assert abs(torch.logit(u.double()).std().item() - 1.0) < 0.02


@pytest.mark.parametrize("shift", [1.0, 3.0])
def test_training_table_and_sigma_lookup_match_the_scheduler(shift):
    """Our table equals the scheduler's (the same float32 ops: exact), and σ = table[⌊u·T⌋]
    equals the script's timestep lookup for u across [0, 1), both ends included."""
    _, sigmas = diffusers_scheduler_tables(1000, shift)
    torch.testing.assert_close(training_sigma_table(1000, shift), sigmas, rtol=0, atol=0)
    u = torch.cat(
        [torch.tensor([0.0, 0.0005, 0.9995, 1 - 2**-24]), torch.rand(256, generator=torch.Generator().manual_seed(1))]
    )
    torch.testing.assert_close(density_sigmas(u, training_sigma_table(1000, shift)), diffusers_sigmas(u, 1000, shift))
    assert density_sigmas(torch.tensor([1.0]), sigmas).item() == sigmas[-1].item()  # a float32 sigmoid's 1.0


@pytest.mark.parametrize("scheme", SCHEMES)
def test_loss_weighting_matches_diffusers(scheme):
    sigma = torch.linspace(0.01, 1.0, 50)
    torch.testing.assert_close(sd3_loss_weighting(scheme, sigma), diffusers_weighting(scheme, sigma))


@pytest.mark.parametrize("precondition", [True, False])
@pytest.mark.parametrize("scheme", ["none", "sigma_sqrt", "cosmap"])
def test_flow_matching_loss_matches_the_script(precondition, scheme):
    """Per-sample loss against the script's on the same tensors. The two compute the same
    products in a different association (σ·v subtracted from x_σ either way), so they agree to
    a few float32 roundings of values of order (1 + σ⁻²)·|x|²: rtol 1e-5."""
    g = torch.Generator().manual_seed(3)
    clean, noise, velocity = (torch.randn(6, 4, 5, 5, generator=g) for _ in range(3))
    sigma = torch.rand(6, generator=g) * 0.95 + 0.05
    noisy, target = noised(clean, noise, sigma)
    torch.testing.assert_close(target, noise - clean)
    weight = sd3_loss_weighting(scheme, sigma)
    ours = flow_matching_loss(velocity, noisy, clean, noise, sigma, weight, precondition)
    theirs = diffusers_loss(velocity, noisy, clean, noise, sigma, diffusers_weighting(scheme, sigma), precondition)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_preconditioned_loss_is_the_sigma_squared_velocity_loss():
    """x̂0 − x0 = x_σ − σ·v̂ − x0 = σ·((ε − x0) − v̂): the preconditioned loss is σ² times the velocity loss."""
    g = torch.Generator().manual_seed(4)
    clean, noise, velocity = (torch.randn(5, 3, 4, 4, generator=g) for _ in range(3))
    sigma = torch.rand(5, generator=g) * 0.9 + 0.1
    noisy, _ = noised(clean, noise, sigma)
    ones = torch.ones(5)
    x0 = flow_matching_loss(velocity, noisy, clean, noise, sigma, ones, True)
    v = flow_matching_loss(velocity, noisy, clean, noise, sigma, ones, False)
    torch.testing.assert_close(x0, sigma**2 * v, rtol=1e-5, atol=1e-7)


def test_density_draws_are_per_sample_and_per_position():
    """A sample's u and ε depend on its seed and the position only, not on its batch."""
    draw = lambda generator: timestep_density("logit_normal", 1, 0.0, 1.0, 1.29, generator)  # noqa: E731
    u, eps = density_draws(torch.tensor([5, 9, 11]), 0, (2, 3), draw)
    u_one, eps_one = density_draws(torch.tensor([9]), 0, (2, 3), draw)
    assert torch.equal(u[1:2], u_one) and torch.equal(eps[1:2], eps_one)
    u_next, _ = density_draws(torch.tensor([9]), 1, (2, 3), draw)
    assert not torch.equal(u_one, u_next)
    assert u.shape == (3,) and eps.shape == (3, 2, 3)


# ------------------------------------------------------------ best of N
def test_top_of_groups_keeps_the_best_of_each_group():
    advantages = torch.tensor([0.1, 0.9, -1.0, 0.5, 0.5, 0.5, 2.0, -2.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    assert top_of_groups(advantages, groups, 1).tolist() == [1, 3, 6]  # a tied group: its first
    assert top_of_groups(advantages, groups, 2).tolist() == [1, 0, 3, 4, 6, 7]
    assert top_of_groups(advantages, groups, 1, "drop").tolist() == [1, 6]
    assert top_of_groups(-advantages, groups, 1).tolist() == [2, 3, 7]  # a negated reward picks the worst
    with pytest.raises(ValueError, match="tied_groups"):
        top_of_groups(advantages, groups, 1, "pair")


# ------------------------------------------------------------ the algorithm
def samples(n=4, shape=(2, 3, 3)):
    g = torch.Generator().manual_seed(11)
    return CleanSamples(
        prompts=[f"p{i}" for i in range(n)],
        seeds=torch.arange(100, 100 + n),
        condition=Condition(embeds=torch.randn(n, 3, 6, generator=g)),
        latents=torch.randn(n, *shape, generator=g),
    )


@pytest.mark.parametrize("precondition", [True, False])
def test_compute_loss_is_the_mean_flow_matching_loss_at_the_drawn_sigmas(precondition):
    cfg = AlgorithmConfig(name="sft", sft=SFTConfig(timestep_shift=3.0, precondition_outputs=precondition))
    algorithm = FlowSFT(cfg)
    policy = LinearPolicy(channels=2, size=3)
    batch = samples()
    loss, stats = algorithm.compute_loss(policy, batch, torch.ones(4), 0)
    draw = lambda generator: diffusers_density("logit_normal", 1, 0.0, 1.0, 1.29, generator)  # noqa: E731
    u, noise = density_draws(batch.seeds, 0, (2, 3, 3), draw)
    sigma = diffusers_sigmas(u, 1000, 3.0)
    noisy = (1 - sigma.view(-1, 1, 1, 1)) * batch.latents + sigma.view(-1, 1, 1, 1) * noise
    with torch.no_grad():
        velocity = policy.velocity(noisy, sigma, batch.condition, 1.0)
    expected = diffusers_loss(velocity, noisy, batch.latents, noise, sigma, torch.ones(4), precondition)
    torch.testing.assert_close(stats["policy_loss"], expected, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(loss.detach(), expected.mean(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(stats["sft_sigma"], sigma)
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.transformer.parameters())
    # a micro-batch of one draws what the same sample drew in the batch of four
    _, alone = algorithm.compute_loss(policy, batch.index([2]), torch.ones(1), 0)
    torch.testing.assert_close(alone["sft_sigma"], stats["sft_sigma"][2:3], rtol=0, atol=0)


def test_config_problems_name_the_key():
    def problems(*overrides):
        with pytest.raises(ConfigError) as error:
            load_config("experiment/toy/shapes_sft", list(overrides))
        return str(error.value)

    assert load_config("experiment/toy/shapes_sft").algorithm.sft.source == "dataset"
    assert (
        load_config(
            "experiment/toy/shapes_sft", ["algorithm.sft.source=best_of_n", "data.image_manifest=null", "rollout.n=8"]
        ).data.image_manifest
        is None
    )
    assert "algorithm.kl_beta" in problems("algorithm.kl_beta=0.1")
    assert "needs data.image_manifest" in problems("data.image_manifest=null")
    assert "rollout.n must be > algorithm.sft.keep_per_group" in problems(
        "algorithm.sft.source=best_of_n", "data.image_manifest=null", "rollout.n=1"
    )
    assert "data.image_manifest is set but only algorithm.name=sft" in problems("algorithm.sft.source=best_of_n")
    assert "algorithm.sft.logit_std" in problems("algorithm.sft.logit_std=0")
    assert FlowSFT.data_source(AlgorithmConfig(name="sft")) == "images"
    assert FlowSFT.data_source(AlgorithmConfig(name="sft", sft=SFTConfig(source="best_of_n"))) == "online"
    assert FlowSFT.reference_kind(AlgorithmConfig(name="sft", kl_beta=1.0)) == "none"
