"""model.given_frames of Wan 2.2 TI2V-5B's image-to-video against Flow-Factory's Wan I2V SDE step.

The reference (X-GenGroup/Flow-Factory a0b2bc5): `Wan2_I2V_Adapter.forward`
(src/flow_factory/models/wan/wan2_i2v.py) builds the transformer's input as
`(1 − mask)·condition + mask·latents` with the mask 0 on latent frame 0, gives the tokens
`mask[:, ::2, ::2]·t` as timesteps, and hands the *stored* latents — frame 0 included, never read by
the transformer — with the whole prediction to `UniPCMultistepSDEScheduler.step`
(src/flow_factory/scheduler/unipc_multistep.py, dynamics "Flow-SDE"), whose log-prob is the
per-element Gaussian log-density reduced by `.mean(dim=tuple(range(1, ndim)))`: over channels,
every latent frame and both spatial axes. `reference_log_density` below is that computation in our
words, elementwise, so a test can reduce it over every frame (given_frames=stepped, the default)
or over the generated frames only (given_frames=excluded)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered

from genalign.config.errors import ConfigError
from genalign.models.diffusers_common import unpack_rows
from genalign.models.wan_i2v import WanI2VPolicy
from genalign.preflight.load import load_config
from genalign.sampling.kernels import flow_sde_step
from genalign.sampling.trajectory import sample_trajectory
from genalign.sampling.windows import sde_step_mask

SIDE = 64  # TI2V-5B's VAE: 16 pixels a latent -> 4x4 latents, a 2x2 patch -> 2x2 tokens a frame
NUM_FRAMES = 5  # the tiny VAE's temporal factor 2: 3 latent frames, the first the image's
STEPS, SCALE, NOISE = 3, 5.0, 0.7
FLOAT32_EPS = torch.finfo(torch.float32).eps


@pytest.fixture(scope="module")
def policies() -> dict[str, WanI2VPolicy]:
    from genalign.models.wan_i2v.tiny import build_tiny_wan22_ti2v_i2v_pipeline

    pipe = build_tiny_wan22_ti2v_i2v_pipeline(seed=0)
    return {
        value: WanI2VPolicy(pipe, torch.device("cpu"), torch.float32, 16, num_frames=NUM_FRAMES, given_frames=value)
        for value in ("stepped", "excluded")
    }


def conditioned(policy: WanI2VPolicy):
    cond = policy.encode_prompts(["the red circle slides", "the blue cross spins"], with_negative=True)
    images = torch.randint(0, 256, (2, 1, 3, SIDE, SIDE), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    return dataclasses.replace(cond, source_latents=policy.encode_sources(images))


def reference_velocity(policy: WanI2VPolicy, latents: torch.Tensor, sigma: float, cond) -> torch.Tensor:
    """Flow-Factory's transformer input and CFG for stored latents [B, C, F, h, w] at t = 1000·σ:
    frame 0 reads the image whatever the latents hold there, its tokens at timestep 0."""
    (condition,) = unpack_rows(cond.source_latents, [(48, 1, *latents.shape[3:])], "Wan I2V")  # [B, C, 1, h, w]
    mask = torch.ones(1, 1, *latents.shape[2:])
    mask[:, :, 0] = 0.0
    model_input = (1 - mask) * condition + mask * latents
    timestep = (mask[0, 0][:, ::2, ::2] * (1000.0 * sigma)).flatten().expand(len(latents), -1)

    def predict(embeds: torch.Tensor) -> torch.Tensor:
        return policy.pipeline.transformer(
            hidden_states=model_input, timestep=timestep, encoder_hidden_states=embeds, return_dict=False
        )[0]

    uncond = predict(cond.negative_embeds)
    return uncond + SCALE * (predict(cond.embeds) - uncond)


def reference_log_density(
    latents: torch.Tensor,
    velocity: torch.Tensor,
    following: torch.Tensor,
    sigma: float,
    sigma_next: float,
    guard: float,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Flow-Factory's Flow-SDE step over the whole latents: (the per-element log-density of
    `following` [B, C, F, h, w], the step's mean, its std). Their log-prob is its mean over dims 1..4."""
    dt = sigma_next - sigma
    noise_scale = math.sqrt(sigma / (1 - (guard if sigma == 1.0 else sigma))) * NOISE
    mean = (
        latents * (1 + noise_scale**2 / (2 * sigma) * dt)
        + velocity * (1 + noise_scale**2 * (1 - sigma) / (2 * sigma)) * dt
    )
    spread = noise_scale * math.sqrt(-dt)
    density = -((following - mean) ** 2) / (2 * spread**2) - math.log(spread) - math.log(math.sqrt(2 * math.pi))
    return density, mean, spread


def log_prob_tolerance(
    latents: torch.Tensor,
    velocity: torch.Tensor,
    mean: torch.Tensor,
    residual: torch.Tensor,
    sigma: float,
    sigma_next: float,
    spread: float,
) -> torch.Tensor:
    """The error bound of |ours − theirs| element by element [B, C, F, h, w], for one step's log-prob
    from the same latents and velocity (its mean over the elements a log-prob averages bounds the
    log-prob's): the mean μ is the same formula rearranged (~8 roundings on terms of the size of
    x·(1 + s²|Δσ|/(2σ)), v·|Δσ|·(1 + s²(1 − σ)/(2σ)) and μ), and a mean error δ moves the element's
    log-density by at most |x' − μ|/std² · δ; the density's own roundings (~8 operations on terms of
    size z² and |log std|, z = |x' − μ|/std) and the mean over the N elements (log2 N roundings of
    terms of that size) add."""
    noise_scale = spread / math.sqrt(sigma - sigma_next)  # s (σ_1 in place of σ = 1 included)
    step = sigma - sigma_next
    terms = (
        latents.abs() * (1 + noise_scale**2 * step / (2 * sigma))
        + velocity.abs() * step * (1 + noise_scale**2 * (1 - sigma) / (2 * sigma))
        + mean.abs()
    )
    mean_error = 8 * FLOAT32_EPS * terms  # [B, ...]
    z = residual.abs() / spread
    size = z**2 + 1 + abs(math.log(spread))
    per_element = z / spread * mean_error + 8 * FLOAT32_EPS * size
    return per_element + math.log2(z[0].numel()) * FLOAT32_EPS * size


def test_given_frames_sets_what_is_sampled_and_the_velocity_over_it(policies):
    """stepped: every latent frame is sampled and frame 0's velocity is the transformer's prediction
    on the image's tokens (their input, their CFG); excluded: the generated frames only, the same
    prediction there (the transformer reads the same tokens either way)."""
    stepped, excluded = policies["stepped"], policies["excluded"]
    assert stepped.latent_shape(SIDE, SIDE) == (48, 3, 4, 4)
    assert excluded.latent_shape(SIDE, SIDE) == (48, 2, 4, 4)
    cond = conditioned(stepped)
    latents = torch.randn(2, 48, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    sigma = 0.8
    with torch.no_grad():
        ours = stepped.velocity(latents, torch.full((2,), sigma), cond, SCALE)
        theirs = reference_velocity(stepped, latents, sigma, cond)
        generated = excluded.velocity(latents[:, :, 1:], torch.full((2,), sigma), cond, SCALE)
        # frame 0 of the samples is never read: other values there change no prediction
        moved = stepped.velocity(latents + torch.eye(3)[0].view(1, 1, 3, 1, 1), torch.full((2,), sigma), cond, SCALE)
    assert_close_reordered(ours, theirs, length=TINY_REDUCTION, depth=TINY_DEPTH, gain=abs(1 - SCALE) + SCALE)
    assert float(ours[:, :, 0].abs().max()) > 0.1  # frame 0 is stepped by a real prediction
    assert torch.equal(generated, ours[:, :, 1:])  # the same transformer call on the same tokens
    assert torch.equal(moved, ours)


@pytest.mark.parametrize("given_frames", ["stepped", "excluded"])
def test_rollout_log_prob_is_the_references_reduced_as_given_frames_says(policies, given_frames):
    """A rollout of the stepped policy (frame 0 drawn as noise and stepped, as the reference does);
    each step scored as replay scores it by the option's policy, on the same stored latents, is the
    reference's per-element log-density (from the same latents and the same velocity over every
    frame) reduced over every latent frame (stepped: also the rollout's own record, bitwise) or over
    the generated frames only (excluded), within the error bound; the two reductions differ."""
    stepped, policy = policies["stepped"], policies[given_frames]
    cond = conditioned(stepped)
    start = torch.randn(2, 48, 3, 4, 4, generator=torch.Generator().manual_seed(2))
    sigmas = stepped.sigmas(STEPS, (48, 3, 4, 4))
    generators = [torch.Generator().manual_seed(seed) for seed in (5, 6)]
    trajectory = sample_trajectory(stepped, cond, start, generators, sigmas, SCALE, NOISE, sde_step_mask(STEPS, NOISE))
    left_out = 3 - policy.latent_shape(SIDE, SIDE)[1]  # latent frames the option leaves out of its samples
    for i in range(STEPS):
        sigma, sigma_next, guard = float(sigmas[i]), float(sigmas[i + 1]), float(sigmas[1])
        current, following = trajectory.latents[:, i], trajectory.latents[:, i + 1]  # [B, 48, 3, 4, 4]
        assert (following[:, :, 0] - current[:, :, 0]).abs().max() > 0.01  # frame 0 is stepped
        with torch.no_grad():
            velocity = stepped.velocity(current, torch.full((2,), sigma), cond, SCALE)  # every frame's
            sampled = policy.velocity(current[:, :, left_out:], torch.full((2,), sigma), cond, SCALE)
        assert torch.equal(sampled, velocity[:, :, left_out:])
        ours = flow_sde_step(
            current[:, :, left_out:],
            sampled,
            sigma,
            sigma_next,
            NOISE,
            prev_latents=following[:, :, left_out:],
            sigma_max_guard=guard,
        ).log_prob  # [B]: what replay computes
        density, mean, spread = reference_log_density(current, velocity, following, sigma, sigma_next, guard)
        theirs = density[:, :, left_out:].mean(dim=(1, 2, 3, 4))
        bound = log_prob_tolerance(current, velocity, mean, following - mean, sigma, sigma_next, spread)
        tolerance = float(bound[:, :, left_out:].mean(dim=(1, 2, 3, 4)).max())
        torch.testing.assert_close(ours, theirs, atol=tolerance, rtol=0)
        if given_frames == "stepped":
            assert torch.equal(ours, trajectory.log_probs[:, i])  # replay = rollout, bitwise
        other = density[:, :, 1 - left_out :].mean(dim=(1, 2, 3, 4))  # the other option's reduction
        assert ((theirs - other).abs() > 2 * tolerance).all()


def test_excluded_needs_a_given_frame_and_an_unknown_value_is_refused():
    """Wan 2.2 I2V-A14B reads the image on its channels (no expand_timesteps): nothing to leave out."""
    from genalign.models.wan_i2v.tiny import build_tiny_wan22_i2v_a14b_pipeline

    tiny_wan_i2v_pipeline = build_tiny_wan22_i2v_a14b_pipeline(seed=0)
    with pytest.raises(ValueError, match="model.given_frames=excluded"):
        WanI2VPolicy(tiny_wan_i2v_pipeline, torch.device("cpu"), torch.float32, 16, given_frames="excluded")
    with pytest.raises(ValueError, match="model.given_frames='dropped'"):
        WanI2VPolicy(tiny_wan_i2v_pipeline, torch.device("cpu"), torch.float32, 16, given_frames="dropped")


def test_given_frames_on_a_family_whose_condition_gives_no_frames_is_refused_before_loading():
    with pytest.raises(ConfigError, match="model.given_frames=excluded: model.family=wan's condition gives no latent"):
        load_config("experiment/diffusion/wan_2_2/ti2v_5b_online_grpo_pickscore", ["model.given_frames=excluded"])
    recipe = "experiment/diffusion/wan_2_2/ti2v_5b_i2v_online_grpo_pickscore"
    assert load_config(recipe, []).model.given_frames == "stepped"  # the reference's, by default
    assert load_config(recipe, ["model.given_frames=excluded"]).model.given_frames == "excluded"
