"""Wan 2.2 TI2V-5B's image-to-video through `WanI2VPolicy` on the tiny TI2V-5B of the published
configs (`genalign/models/wan/architectures/`, shrunk in width and depth; saved as the
WanPipeline the hub repository names, loaded by WanImageToVideoPipeline as users load it).

What `WanImageToVideoPipeline.__call__` does with expand_timesteps, checked here: the first latent
frame is the encoded image (no mask channels, no CLIP), its tokens read timestep 0, the others t;
the scheduler steps every frame but the image's frame replaces frame 0 before decoding. genalign
samples only the generated frames (`latent_shape` has one frame less), so our ODE sampler must
reproduce the pipeline's frames 1.. and our decode its video."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered, assert_lora_export_reproduces, record_timesteps

from genalign.models.base import decode_samples
from genalign.models.wan_i2v import WanI2VPolicy
from genalign.models.wan_i2v.policy import unpack_condition
from genalign.sampling.trajectory import sample_trajectory, sde_step_mask

MAX_TOKENS = 16
NUM_FRAMES = 5  # the tiny VAE's temporal factor is 2: 5 frames = 3 latent frames, the first given
SIDE = 64  # 16 pixels a latent, a 2x2 patch: 4x4 latents, 2x2 tokens a frame
PROMPTS = ["the red circle slides to the left", "the blue cross spins"]


def load(directory, **options) -> WanI2VPolicy:
    return WanI2VPolicy.from_pretrained(directory, max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES, **options)


def first_frames(count: int = 2, side: int = SIDE) -> torch.Tensor:
    pixels = np.random.default_rng(0).integers(0, 256, (count, 1, 3, side, side), dtype=np.uint8)
    return torch.from_numpy(pixels)  # [B, 1, 3, side, side]


def pil(image: torch.Tensor) -> Image.Image:
    return Image.fromarray(image.permute(1, 2, 0).numpy())


def conditioned(policy: WanI2VPolicy, frames: torch.Tensor, with_negative: bool):
    cond = policy.encode_prompts(PROMPTS[: len(frames)], with_negative=with_negative)
    return dataclasses.replace(cond, source_latents=policy.encode_sources(frames))


@pytest.fixture(scope="module")
def ti2v(tiny_wan22_dirs):
    return tiny_wan22_dirs["ti2v"]


def test_our_ode_sampler_reproduces_the_ti2v_image_to_video_pipeline(ti2v):
    """The same first frames and noise, Euler steps with CFG: our sampled frames are the
    pipeline's frames 1.., its frame 0 our encoded image, our decoded video its video within one
    level; the transformer reads timestep 0 on the image's tokens in both."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanImageToVideoPipeline

    steps, scale = 3, 5.0
    policy = load(ti2v)
    pipe = WanImageToVideoPipeline.from_pretrained(ti2v)
    assert pipe.config.expand_timesteps and pipe.image_encoder is None
    pipe.scheduler = FlowMatchEulerDiscreteScheduler(shift=policy.scheduler_shift)
    frames = first_frames()
    shape = policy.latent_shape(SIDE, SIDE)  # [48, 2, 4, 4]: the 3 latent frames less the image's
    assert shape == (48, 2, 4, 4)
    start = torch.randn(2, *shape, generator=torch.Generator().manual_seed(3))
    # the pipeline draws frame 0 too and steps it; it never reads it (the image's frame replaces it)
    whole = torch.cat([torch.randn(2, 48, 1, 4, 4, generator=torch.Generator().manual_seed(4)), start], dim=2)
    theirs_calls, handles = record_timesteps({"transformer": pipe.transformer})
    references, videos = [], []
    for row in range(2):
        common = dict(
            image=pil(frames[row, 0]),
            prompt=PROMPTS[row],
            height=SIDE,
            width=SIDE,
            num_frames=NUM_FRAMES,
            num_inference_steps=steps,
            guidance_scale=scale,
            max_sequence_length=MAX_TOKENS,
        )
        with torch.no_grad():
            references.append(pipe(latents=whole[row : row + 1].clone(), output_type="latent", **common).frames)
            videos.append(pipe(latents=whole[row : row + 1].clone(), output_type="pt", **common).frames)
    for handle in handles:
        handle.remove()
    ours_calls, handles = record_timesteps({"transformer": policy.transformer})
    cond = conditioned(policy, frames, with_negative=True)
    sigmas = policy.sigmas(steps, shape)
    with torch.no_grad():
        latents = sample_trajectory(policy, cond, start, None, sigmas, scale, 0.0, sde_step_mask(steps, 0.0)).latents
    for handle in handles:
        handle.remove()
    ours, theirs = latents[:, -1], torch.cat(references)  # [B, 48, 2, 4, 4], [B, 48, 3, 4, 4]
    assert_close_reordered(
        ours, theirs[:, :, 1:], length=TINY_REDUCTION, depth=steps * TINY_DEPTH, gain=abs(1 - scale) + scale
    )
    assert (ours - start).abs().max() > 0.1
    condition, _ = unpack_condition(cond.source_latents, (48, 1, 4, 4), None)
    # the pipeline's frame 0 is the encoded image: our VAE encode of the same pixels (its processor
    # divides in two steps, we in one: rounding only, through the VAE)
    torch.testing.assert_close(theirs[:, :, :1], condition, atol=1e-5, rtol=0)
    decoded = decode_samples(policy, ours, cond)  # [B, F, 3, H, W]
    reference_video = torch.cat(videos)
    assert decoded.shape == reference_video.shape == (2, NUM_FRAMES, 3, SIDE, SIDE)
    assert (decoded.float() - reference_video * 255).abs().max() <= 1.0
    # one call a step here (joint CFG, both prompts), two a prompt there; each call's timesteps: 0 (the
    # image's tokens) and t
    assert [t for _, t in ours_calls] == [t for _, t in theirs_calls[: 2 * steps : 2]]
    assert all(t[0] == 0.0 and len(t) == 2 for _, t in ours_calls)


def test_the_source_is_the_pipelines_condition_and_changes_the_velocity(ti2v):
    """encode_sources = the condition the pipeline's `prepare_latents` returns with expand_timesteps
    (the image's latent frame, no mask channels); another image changes the velocity on every
    generated frame; a prompt without one is refused in one line."""
    policy = load(ti2v)
    pipe = policy.pipeline
    frames = first_frames()
    ours = policy.encode_sources(frames)  # [2, 1, 48 * 1 * 4 * 4]
    assert ours.shape == (2, 1, 48 * 4 * 4)
    condition, embeds = unpack_condition(ours, (48, 1, 4, 4), None)
    for row in range(2):
        pixels = pipe.video_processor.preprocess(pil(frames[row, 0]), height=SIDE, width=SIDE)
        _, expected, mask = pipe.prepare_latents(
            pixels, 1, 48, SIDE, SIDE, NUM_FRAMES, torch.float32, torch.device("cpu"), None, torch.zeros(1, 48, 3, 4, 4)
        )
        torch.testing.assert_close(condition[row : row + 1], expected, atol=1e-5, rtol=0)
        assert mask[0, 0, 0].eq(0).all() and mask[0, 0, 1:].eq(1).all()  # the image's frame is frame 0
    cond = conditioned(policy, frames, with_negative=False)
    shape = policy.latent_shape(SIDE, SIDE)
    latents = torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))
    sigma = torch.tensor([0.95, 0.5])
    with torch.no_grad():
        same = policy.velocity(latents, sigma, cond, 1.0)
        other = policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=ours.flip(0)), 1.0)
    assert same.shape == latents.shape
    assert ((same - other).abs().amax(dim=(0, 1, 3, 4)) > 1e-4).all()  # both generated frames see the image
    with pytest.raises(ValueError, match="source image"):
        policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=None), 1.0)
    with pytest.raises(ValueError, match="rollout.height x rollout.width"):
        policy.velocity(latents, sigma, conditioned(policy, first_frames(side=2 * SIDE), False), 1.0)


def test_one_frame_leaves_nothing_to_generate_and_is_refused(ti2v):
    with pytest.raises(ValueError, match="model.num_frames=1"):
        WanI2VPolicy.from_pretrained(ti2v, max_sequence_length=MAX_TOKENS, num_frames=1).latent_shape(SIDE, SIDE)


def test_encode_images_gives_what_the_policy_samples(ti2v):
    """Offline videos enter as the sampled latents: the video's latents less the first frame's."""
    policy = load(ti2v)
    video = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (1, NUM_FRAMES, 3, SIDE, SIDE), dtype=np.uint8))
    latents = policy.encode_images(video)
    assert latents.shape == (1, *policy.latent_shape(SIDE, SIDE))


def test_exported_lora_loads_into_the_image_to_video_pipeline_with_the_same_velocity(ti2v, tmp_path):
    from diffusers import WanImageToVideoPipeline

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    fresh = load(ti2v)
    lora = LoraConfig(rank=4, alpha=8.0)
    apply_lora(fresh.transformer, lora, fresh.lora_target_modules)
    with torch.no_grad():
        for name, param in fresh.transformer.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    pipe = WanImageToVideoPipeline.from_pretrained(ti2v)
    loaded = WanI2VPolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=NUM_FRAMES)
    cond = conditioned(fresh, first_frames(), with_negative=False)
    latents = torch.randn(2, *fresh.latent_shape(SIDE, SIDE), generator=torch.Generator().manual_seed(2))
    assert_lora_export_reproduces(
        fresh, lora, tmp_path / "lora", pipe, loaded, (latents, torch.tensor([0.7, 0.3]), cond, 1.0)
    )
