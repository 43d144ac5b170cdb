"""Wan image-to-video through `WanI2VPolicy` on tiny pipelines built from the published configs
(`genalign/models/wan_i2v/architectures/`, shrunk in width and depth by `models/wan_i2v/tiny.py`):
Wan 2.1 I2V (CLIP image tokens beside the concatenated first frame) and Wan 2.2 I2V-A14B (two
experts switched at boundary_ratio 0.9, no image encoder).

The central checks: our velocity + Euler ODE kernel reproduce `WanImageToVideoPipeline.__call__`
(with a FlowMatchEulerDiscreteScheduler of the same shift) for the same first frame and noise,
each step on the pipeline's expert; the encoded source is the pipeline's own condition and CLIP
tokens and it changes the velocity; an exported LoRA loads with the pipeline's
`load_lora_weights` and predicts our velocity."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image
from support import (
    TINY_DEPTH,
    TINY_REDUCTION,
    assert_close_reordered,
    assert_lora_export_reproduces,
    record_timesteps,
)

from genalign.models.diffusers_common import unpack_rows
from genalign.models.experts import denoiser_parts
from genalign.models.wan_i2v import WanI2VPolicy
from genalign.sampling.trajectory import sample_trajectory, sde_step_mask

MAX_TOKENS = 16
NUM_FRAMES = 5  # the tiny VAE's temporal factor is 2: 5 frames = 3 latent frames
SIDE = 32
PROMPTS = ["the red circle slides to the left", "the blue cross spins"]
FORMS = {  # form: (steps, CFG): A14B's 5 steps cross its boundary 0.9 (sigmas 1, 0.92 high; 0.82.. low)
    "wan21": (3, 5.0),
    "a14b": (5, 3.5),
}


def load(directory, **options) -> WanI2VPolicy:
    return WanI2VPolicy.from_pretrained(directory, max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES, **options)


def first_frames(count: int = 2, side: int = SIDE) -> torch.Tensor:
    """Random uint8 first frames [B, 1, 3, side, side]."""
    pixels = np.random.default_rng(0).integers(0, 256, (count, 1, 3, side, side), dtype=np.uint8)
    return torch.from_numpy(pixels)


def pil(image: torch.Tensor) -> Image.Image:
    return Image.fromarray(image.permute(1, 2, 0).numpy())


def conditioned(policy: WanI2VPolicy, frames: torch.Tensor, with_negative: bool):
    cond = policy.encode_prompts(PROMPTS[: len(frames)], with_negative=with_negative)
    return dataclasses.replace(cond, source_latents=policy.encode_sources(frames))


@pytest.mark.parametrize("form", sorted(FORMS))
def test_our_ode_sampler_reproduces_the_image_to_video_pipeline(tiny_wan_i2v_dirs, form):
    """Each prompt with its own first frame, the same noise, Euler steps with CFG: latents to
    float tolerance, decoded frames within one level, every step on the pipeline's expert."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanImageToVideoPipeline

    steps, scale = FORMS[form]
    policy = load(tiny_wan_i2v_dirs[form])
    pipe = WanImageToVideoPipeline.from_pretrained(tiny_wan_i2v_dirs[form])
    pipe.scheduler = FlowMatchEulerDiscreteScheduler(shift=policy.scheduler_shift)
    frames = first_frames()
    shape = policy.latent_shape(SIDE, SIDE)
    start = torch.randn(2, *shape, generator=torch.Generator().manual_seed(3))  # [B, C, F_lat, h, w]
    experts = {n: getattr(pipe, n) for n in ("transformer", "transformer_2") if getattr(pipe, n) is not None}
    theirs_calls, handles = record_timesteps(experts)
    references, videos = [], []
    for row in range(2):  # the pipeline takes one image a call
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
            references.append(pipe(latents=start[row : row + 1].clone(), output_type="latent", **common).frames)
            videos.append(pipe(latents=start[row : row + 1].clone(), output_type="pt", **common).frames)
    for handle in handles:
        handle.remove()
    ours_modules = denoiser_parts(policy.transformer) if form == "a14b" else {"transformer": policy.transformer}
    ours_calls, handles = record_timesteps(dict(ours_modules))
    cond = conditioned(policy, frames, with_negative=True)
    sigmas = policy.sigmas(steps, tuple(start.shape[1:]))
    with torch.no_grad():
        latents = sample_trajectory(policy, cond, start, None, sigmas, scale, 0.0, sde_step_mask(steps, 0.0)).latents
    for handle in handles:
        handle.remove()
    ours = latents[:, -1]
    theirs = torch.cat(references)
    # the pipeline's loop vs ours: the same math in its own order, CFG gain |1 − w| + |w|
    assert_close_reordered(ours, theirs, length=TINY_REDUCTION, depth=steps * TINY_DEPTH, gain=abs(1 - scale) + scale)
    assert (ours - start).abs().max() > 0.1  # the sample moved
    decoded = policy.decode(ours)  # [B, F, 3, H, W]
    reference_video = torch.cat(videos)  # [B, F, 3, H, W] in [0, 1]
    assert decoded.shape == reference_video.shape and (decoded.float() - reference_video * 255).abs().max() <= 1.0
    # the pipeline calls its expert twice a step (cond, uncond) and once a prompt, ours once (joint CFG)
    theirs_steps = [call for call in theirs_calls[: 2 * steps : 2]]
    assert [name for name, _ in ours_calls] == [name for name, _ in theirs_steps]
    if form == "a14b":
        assert {name for name, _ in ours_calls} == {"transformer", "transformer_2"}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_source_is_the_pipelines_condition_and_changes_the_velocity(tiny_wan_i2v_dirs, form):
    """encode_sources = the pipeline's `prepare_latents` condition (mask + first-frame latents) and,
    for Wan 2.1, its `encode_image` CLIP tokens; another first frame changes the velocity; a prompt
    without one is refused in one line."""
    policy = load(tiny_wan_i2v_dirs[form])
    pipe = policy.pipeline
    frames = first_frames()
    ours = policy.encode_sources(frames)  # [2, 1, N]
    shape = policy.latent_shape(SIDE, SIDE)
    shapes = [(policy.condition_channels, *shape[1:]), *([policy.image_tokens] if policy.image_tokens else [])]
    condition, *tokens = unpack_rows(ours, shapes, "Wan I2V")
    embeds = tokens[0] if tokens else None
    for row in range(2):
        pixels = pipe.video_processor.preprocess(pil(frames[row, 0]), height=SIDE, width=SIDE)  # [1, 3, H, W]
        _, expected = pipe.prepare_latents(
            pixels,
            1,
            shape[0],
            SIDE,
            SIDE,
            NUM_FRAMES,
            torch.float32,
            torch.device("cpu"),
            None,
            torch.zeros(1, *shape),
        )
        # [0, 255] -> [-1, 1] by our division vs the processor's two steps: rounding only, through the VAE
        torch.testing.assert_close(condition[row : row + 1], expected, atol=1e-5, rtol=0)
        if form == "wan21":
            torch.testing.assert_close(embeds[row : row + 1], pipe.encode_image(pil(frames[row, 0])), atol=0, rtol=0)
    assert (embeds is None) == (form == "a14b")
    cond = conditioned(policy, frames, with_negative=False)
    latents = torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))
    sigma = torch.tensor([0.95, 0.5])
    with torch.no_grad():
        same = policy.velocity(latents, sigma, cond, 1.0)
        other = policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=ours.flip(0)), 1.0)
    assert same.shape == latents.shape and (same - other).abs().max() > 1e-3
    with pytest.raises(ValueError, match="source image"):
        policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=None), 1.0)


def test_a_first_frame_of_another_size_is_refused_naming_the_rollout_size(tiny_wan_i2v_dirs):
    policy = load(tiny_wan_i2v_dirs["wan21"])
    cond = conditioned(policy, first_frames(side=2 * SIDE), with_negative=False)
    latents = torch.randn(2, *policy.latent_shape(SIDE, SIDE))
    with pytest.raises(ValueError, match="rollout.height x rollout.width"):
        policy.velocity(latents, torch.tensor([0.5, 0.5]), cond, 1.0)


def test_exported_lora_loads_into_the_image_to_video_pipeline_with_the_same_velocity(tiny_wan_i2v_dirs, tmp_path):
    from diffusers import WanImageToVideoPipeline

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    directory = tiny_wan_i2v_dirs["wan21"]
    fresh = load(directory)
    lora = LoraConfig(rank=4, alpha=8.0)
    apply_lora(fresh.transformer, lora, [*fresh.lora_target_modules, "ffn.net.0.proj", "ffn.net.2"])
    with torch.no_grad():
        for name, param in fresh.transformer.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    pipe = WanImageToVideoPipeline.from_pretrained(directory)
    loaded = WanI2VPolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=NUM_FRAMES)
    cond = conditioned(fresh, first_frames(), with_negative=False)
    latents = torch.randn(2, *fresh.latent_shape(SIDE, SIDE), generator=torch.Generator().manual_seed(2))
    assert_lora_export_reproduces(
        fresh, lora, tmp_path / "lora", pipe, loaded, (latents, torch.tensor([0.7, 0.3]), cond, 1.0)
    )


def test_a_pipeline_whose_image_encoder_and_transformer_disagree_is_refused(tiny_wan_i2v_dirs):
    from diffusers import WanImageToVideoPipeline

    pipe = WanImageToVideoPipeline.from_pretrained(tiny_wan_i2v_dirs["wan21"])
    pipe.image_encoder = None
    with pytest.raises(ValueError, match="image_dim"):
        WanI2VPolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=NUM_FRAMES)
