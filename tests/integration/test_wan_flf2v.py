"""Wan 2.1 FLF2V (first and last frame to video) through `WanI2VPolicy` on the tiny FLF2V of the
published configs (`genalign/models/wan_i2v/architectures/Wan-AI--Wan2.1-FLF2V-14B-720P-Diffusers.json`,
shrunk in width and depth by `models/wan_i2v/tiny.py`).

What `WanImageToVideoPipeline.__call__(image=first, last_image=last)` does, checked here: the two
frames at both ends of num_frames frames (zeros between) VAE-encoded, with a mask that is 1 on
both given frames; both frames' CLIP tokens, which the transformer embeds side by side with its
learned position embedding (pos_embed_seq_len 2 x 257). A prompt carries both images, in order
(a manifest row's "source_images": [first, last])."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered, assert_lora_export_reproduces

from genalign.models.wan_i2v import WanI2VPolicy
from genalign.models.wan_i2v.policy import unpack_condition
from genalign.sampling.trajectory import sample_trajectory, sde_step_mask

MAX_TOKENS = 16
NUM_FRAMES = 5  # the tiny VAE's temporal factor is 2: 5 frames = 3 latent frames
SIDE = 32
PROMPTS = ["the red circle slides to the left", "the blue cross spins"]


def load(directory, **options) -> WanI2VPolicy:
    return WanI2VPolicy.from_pretrained(directory, max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES, **options)


def end_frames(count: int = 2, side: int = SIDE) -> torch.Tensor:
    """Random uint8 (first, last) frames [B, 2, 3, side, side]."""
    pixels = np.random.default_rng(0).integers(0, 256, (count, 2, 3, side, side), dtype=np.uint8)
    return torch.from_numpy(pixels)


def pil(image: torch.Tensor) -> Image.Image:
    return Image.fromarray(image.permute(1, 2, 0).numpy())


def conditioned(policy: WanI2VPolicy, frames: torch.Tensor, with_negative: bool):
    cond = policy.encode_prompts(PROMPTS[: len(frames)], with_negative=with_negative)
    return dataclasses.replace(cond, source_latents=policy.encode_sources(frames))


@pytest.fixture(scope="module")
def flf2v(tiny_wan_i2v_dirs):
    return tiny_wan_i2v_dirs["flf2v"]


def test_our_ode_sampler_reproduces_the_first_last_frame_pipeline(flf2v):
    """Each prompt with its own two frames, the same noise, Euler steps with CFG: latents to
    float tolerance, decoded frames within one level."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanImageToVideoPipeline

    steps, scale = 3, 5.0
    policy = load(flf2v)
    assert policy.source_count == 2 and policy.image_tokens == (2 * 257, 16)
    pipe = WanImageToVideoPipeline.from_pretrained(flf2v)
    pipe.scheduler = FlowMatchEulerDiscreteScheduler(shift=policy.scheduler_shift)
    frames = end_frames()
    shape = policy.latent_shape(SIDE, SIDE)
    start = torch.randn(2, *shape, generator=torch.Generator().manual_seed(3))
    references, videos = [], []
    for row in range(2):
        common = dict(
            image=pil(frames[row, 0]),
            last_image=pil(frames[row, 1]),
            prompt=PROMPTS[row],
            height=SIDE,
            width=SIDE,
            num_frames=NUM_FRAMES,
            num_inference_steps=steps,
            guidance_scale=scale,
            max_sequence_length=MAX_TOKENS,
        )
        with torch.no_grad():
            references.append(pipe(latents=start[row : row + 1].clone(), output_type="latent", **common).frames)
            videos.append(pipe(latents=start[row : row + 1].clone(), output_type="pt", **common).frames)
    cond = conditioned(policy, frames, with_negative=True)
    sigmas = policy.sigmas(steps, tuple(start.shape[1:]))
    with torch.no_grad():
        latents = sample_trajectory(policy, cond, start, None, sigmas, scale, 0.0, sde_step_mask(steps, 0.0)).latents
    ours, theirs = latents[:, -1], torch.cat(references)
    assert_close_reordered(ours, theirs, length=TINY_REDUCTION, depth=steps * TINY_DEPTH, gain=abs(1 - scale) + scale)
    assert (ours - start).abs().max() > 0.1
    decoded = policy.decode(ours)
    reference_video = torch.cat(videos)
    assert decoded.shape == reference_video.shape and (decoded.float() - reference_video * 255).abs().max() <= 1.0


def test_the_two_frames_are_the_pipelines_condition_and_the_last_one_matters(flf2v):
    """encode_sources = `prepare_latents(..., last_image=...)`'s condition (the mask 1 on both given
    frames) and `encode_image([first, last])`'s tokens; another last frame changes the velocity;
    one image a prompt is refused in one line naming both frames."""
    policy = load(flf2v)
    pipe = policy.pipeline
    frames = end_frames()
    ours = policy.encode_sources(frames)
    shape = policy.latent_shape(SIDE, SIDE)
    condition, embeds = unpack_condition(ours, (policy.condition_channels, *shape[1:]), policy.image_tokens)
    for row in range(2):
        first, last = (pipe.video_processor.preprocess(pil(frames[row, i]), height=SIDE, width=SIDE) for i in (0, 1))
        _, expected = pipe.prepare_latents(
            first, 1, shape[0], SIDE, SIDE, NUM_FRAMES, torch.float32, torch.device("cpu"), None,
            torch.zeros(1, *shape), last,
        )  # fmt: skip
        torch.testing.assert_close(condition[row : row + 1], expected, atol=1e-5, rtol=0)
        assert expected[0, :2, -1, 0, 0].tolist() == [0.0, 1.0]  # the last pixel frame: the last channel
        tokens = pipe.encode_image([pil(frames[row, 0]), pil(frames[row, 1])])  # [2, 257, 16]
        torch.testing.assert_close(embeds[row], tokens.flatten(0, 1), atol=0, rtol=0)
    cond = conditioned(policy, frames, with_negative=False)
    other_last = frames.clone()
    other_last[:, 1] = frames[:, 1].flip(0)
    latents = torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))
    sigma = torch.tensor([0.95, 0.5])
    with torch.no_grad():
        same = policy.velocity(latents, sigma, cond, 1.0)
        other = policy.velocity(latents, sigma, conditioned(policy, other_last, False), 1.0)
    assert (same - other).abs().max() > 1e-3
    with pytest.raises(ValueError, match=r"takes 2 source image\(s\) a prompt \(the first and the last frame"):
        policy.encode_sources(frames[:, :1])


def test_exported_lora_loads_into_the_pipeline_with_the_same_velocity(flf2v, tmp_path):
    from diffusers import WanImageToVideoPipeline

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    fresh = load(flf2v)
    lora = LoraConfig(rank=4, alpha=8.0)
    apply_lora(fresh.transformer, lora, fresh.lora_target_modules)
    with torch.no_grad():
        for name, param in fresh.transformer.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    pipe = WanImageToVideoPipeline.from_pretrained(flf2v)
    loaded = WanI2VPolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=NUM_FRAMES)
    cond = conditioned(fresh, end_frames(), with_negative=False)
    latents = torch.randn(2, *fresh.latent_shape(SIDE, SIDE), generator=torch.Generator().manual_seed(2))
    assert_lora_export_reproduces(
        fresh, lora, tmp_path / "lora", pipe, loaded, (latents, torch.tensor([0.7, 0.3]), cond, 1.0)
    )
