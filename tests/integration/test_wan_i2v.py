"""Wan image-to-video through `WanI2VPolicy` on tiny pipelines built from the published configs
(`genalign/models/wan_i2v/architectures/`, shrunk in width and depth by `models/wan_i2v/tiny.py`):
Wan 2.1 I2V (CLIP image tokens beside the concatenated first frame), Wan 2.1 FLF2V (the first and
the last frame: both at the clip's ends, both frames' CLIP tokens side by side), Wan 2.2 I2V-A14B
(two experts switched at boundary_ratio 0.9, no image encoder) and Wan 2.2 TI2V-5B's
image-to-video (expand_timesteps: the image's latent frame first, at timestep 0; the tiny saved as
the WanPipeline its hub repository names, loaded by WanImageToVideoPipeline as users load it).

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

from genalign.models.base import decode_samples
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
    "flf2v": (3, 5.0),
}
SOURCES = {"wan21": 1, "a14b": 1, "flf2v": 2, "ti2v": 1}
"""Source images a prompt: FLF2V's first and last frame."""
TI2V_SIDE = 64  # 16 pixels a latent, a 2x2 patch: 4x4 latents, 2x2 tokens a frame


@pytest.fixture(scope="module")
def wan_i2v_dirs(tiny_wan_i2v_dirs, tiny_wan22_dirs) -> dict:
    """Every tiny image-to-video form's directory: TI2V-5B's is the text-to-video tiny's."""
    return {**tiny_wan_i2v_dirs, "ti2v": tiny_wan22_dirs["ti2v"]}


def load(directory, **options) -> WanI2VPolicy:
    return WanI2VPolicy.from_pretrained(directory, max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES, **options)


def first_frames(count: int = 2, side: int = SIDE, sources: int = 1) -> torch.Tensor:
    """Random uint8 source frames [B, sources, 3, side, side] (FLF2V: first, last)."""
    pixels = np.random.default_rng(0).integers(0, 256, (count, sources, 3, side, side), dtype=np.uint8)
    return torch.from_numpy(pixels)


def pipeline_outputs(
    pipe, frames: torch.Tensor, start: torch.Tensor, steps: int, scale: float, side: int, **callback
) -> tuple[torch.Tensor, torch.Tensor]:
    """The unmodified pipeline call, one prompt (and its images) a call, from the noise `start`:
    (its latents [B, C, F_lat, h, w], its video [B, F, 3, H, W] in [0, 1]); `callback`: its
    `callback_on_step_end`, called with the latents each step."""
    latents, videos = [], []
    for row in range(len(frames)):  # the pipeline takes one image a call
        common = dict(
            **pipeline_images(frames, row),
            prompt=PROMPTS[row],
            height=side,
            width=side,
            num_frames=NUM_FRAMES,
            num_inference_steps=steps,
            guidance_scale=scale,
            max_sequence_length=MAX_TOKENS,
            **callback,
        )
        with torch.no_grad():
            latents.append(pipe(latents=start[row : row + 1].clone(), output_type="latent", **common).frames)
            videos.append(pipe(latents=start[row : row + 1].clone(), output_type="pt", **common).frames)
    return torch.cat(latents), torch.cat(videos)


def pipeline_images(frames: torch.Tensor, row: int) -> dict:
    """The pipeline call's image arguments for `frames[row]`: `image`, and FLF2V's `last_image`."""
    images = dict(image=pil(frames[row, 0]))
    if frames.shape[1] == 2:
        images["last_image"] = pil(frames[row, 1])
    return images


def pil(image: torch.Tensor) -> Image.Image:
    return Image.fromarray(image.permute(1, 2, 0).numpy())


def conditioned(policy: WanI2VPolicy, frames: torch.Tensor, with_negative: bool):
    cond = policy.encode_prompts(PROMPTS[: len(frames)], with_negative=with_negative)
    return dataclasses.replace(cond, source_latents=policy.encode_sources(frames))


@pytest.mark.parametrize("form", sorted(FORMS))
def test_our_ode_sampler_reproduces_the_image_to_video_pipeline(wan_i2v_dirs, form):
    """Each prompt with its own first frame (FLF2V: and last), the same noise, Euler steps with
    CFG: latents to float tolerance, decoded frames within one level, every step on the pipeline's
    expert."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanImageToVideoPipeline

    steps, scale = FORMS[form]
    policy = load(wan_i2v_dirs[form])
    assert policy.source_count == SOURCES[form]
    pipe = WanImageToVideoPipeline.from_pretrained(wan_i2v_dirs[form])
    pipe.scheduler = FlowMatchEulerDiscreteScheduler(shift=policy.scheduler_shift)
    frames = first_frames(sources=SOURCES[form])
    shape = policy.latent_shape(SIDE, SIDE)
    start = torch.randn(2, *shape, generator=torch.Generator().manual_seed(3))  # [B, C, F_lat, h, w]
    experts = {n: getattr(pipe, n) for n in ("transformer", "transformer_2") if getattr(pipe, n) is not None}
    theirs_calls, handles = record_timesteps(experts)
    theirs, reference_video = pipeline_outputs(pipe, frames, start, steps, scale, SIDE)
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
    # the pipeline's loop vs ours: the same math in its own order, CFG gain |1 − w| + |w|
    assert_close_reordered(ours, theirs, length=TINY_REDUCTION, depth=steps * TINY_DEPTH, gain=abs(1 - scale) + scale)
    assert (ours - start).abs().max() > 0.1  # the sample moved
    decoded = policy.decode(ours)  # [B, F, 3, H, W]
    assert decoded.shape == reference_video.shape and (decoded.float() - reference_video * 255).abs().max() <= 1.0
    # the pipeline calls its expert twice a step (cond, uncond) and once a prompt, ours once (joint CFG)
    theirs_steps = [call for call in theirs_calls[: 2 * steps : 2]]
    assert [name for name, _ in ours_calls] == [name for name, _ in theirs_steps]
    if form == "a14b":
        assert {name for name, _ in ours_calls} == {"transformer", "transformer_2"}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_source_is_the_pipelines_condition_and_changes_the_velocity(tiny_wan_i2v_dirs, form):
    """encode_sources = the pipeline's `prepare_latents` condition (mask + given frames' latents;
    FLF2V's `last_image` too, its mask 1 on the last pixel frame) and, for Wan 2.1, its
    `encode_image` CLIP tokens (FLF2V: of [first, last]); other sources change the velocity; a
    prompt without one, or with another count, is refused in one line."""
    policy = load(tiny_wan_i2v_dirs[form])
    pipe = policy.pipeline
    frames = first_frames(sources=SOURCES[form])
    ours = policy.encode_sources(frames)  # [2, 1, N]
    shape = policy.latent_shape(SIDE, SIDE)
    shapes = [(policy.condition_channels, *shape[1:]), *([policy.image_tokens] if policy.image_tokens else [])]
    condition, *tokens = unpack_rows(ours, shapes, "Wan I2V")
    embeds = tokens[0] if tokens else None
    for row in range(2):
        given = [pipe.video_processor.preprocess(pil(frame), height=SIDE, width=SIDE) for frame in frames[row]]
        _, expected = pipe.prepare_latents(
            given[0], 1, shape[0], SIDE, SIDE, NUM_FRAMES, torch.float32, torch.device("cpu"), None,
            torch.zeros(1, *shape), *given[1:],
        )  # fmt: skip
        # [0, 255] -> [-1, 1] by our division vs the processor's two steps: rounding only, through the VAE
        torch.testing.assert_close(condition[row : row + 1], expected, atol=1e-5, rtol=0)
        assert expected[0, 1, -1, 0, 0] == (1.0 if form == "flf2v" else 0.0)  # the last pixel frame's mask
        if form != "a14b":
            tokens = pipe.encode_image([pil(frame) for frame in frames[row]])  # [sources, 257, 16]
            torch.testing.assert_close(embeds[row], tokens.flatten(0, 1), atol=0, rtol=0)
    assert (embeds is None) == (form == "a14b")
    cond = conditioned(policy, frames, with_negative=False)
    latents = torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))
    sigma = torch.tensor([0.95, 0.5])
    with torch.no_grad():
        same = policy.velocity(latents, sigma, cond, 1.0)
        other = policy.velocity(
            latents, sigma, conditioned(policy, frames.flip(1 if form == "flf2v" else 0), False), 1.0
        )
    assert same.shape == latents.shape and (same - other).abs().max() > 1e-3
    with pytest.raises(ValueError, match="source image"):
        policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=None), 1.0)
    with pytest.raises(ValueError, match=rf"takes {SOURCES[form]} source image\(s\) a prompt \(the first"):
        policy.encode_sources(first_frames(sources=3 - SOURCES[form]))


def test_a_first_frame_of_another_size_is_refused_naming_the_rollout_size(tiny_wan_i2v_dirs):
    policy = load(tiny_wan_i2v_dirs["wan21"])
    cond = conditioned(policy, first_frames(side=2 * SIDE), with_negative=False)
    latents = torch.randn(2, *policy.latent_shape(SIDE, SIDE))
    with pytest.raises(ValueError, match="rollout.height x rollout.width"):
        policy.velocity(latents, torch.tensor([0.5, 0.5]), cond, 1.0)


@pytest.mark.parametrize("form", ["wan21", "flf2v", "ti2v"])
def test_exported_lora_loads_into_the_image_to_video_pipeline_with_the_same_velocity(wan_i2v_dirs, form, tmp_path):
    from diffusers import WanImageToVideoPipeline

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    directory = wan_i2v_dirs[form]
    fresh = load(directory)
    lora = LoraConfig(rank=4, alpha=8.0)
    apply_lora(fresh.transformer, lora, [*fresh.lora_target_modules, "ffn.net.0.proj", "ffn.net.2"])
    with torch.no_grad():
        for name, param in fresh.transformer.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    pipe = WanImageToVideoPipeline.from_pretrained(directory)
    loaded = WanI2VPolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=NUM_FRAMES)
    cond = conditioned(fresh, first_frames(sources=SOURCES[form]), with_negative=False)
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


@pytest.mark.parametrize("given_frames", ["stepped", "excluded"])
def test_our_ode_sampler_reproduces_the_ti2v_image_to_video_pipeline(wan_i2v_dirs, given_frames):
    """The same first frames and noise, Euler steps with CFG: our sampled frames are the
    pipeline's (stepped: all of them, frame 0 as the pipeline steps it before replacing it with
    the image; excluded: frames 1..), its frame 0 our encoded image, our decoded video its video
    within one level; the transformer reads timestep 0 on the image's tokens in both."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanImageToVideoPipeline

    steps, scale = 3, 5.0
    policy = load(wan_i2v_dirs["ti2v"], given_frames=given_frames)
    pipe = WanImageToVideoPipeline.from_pretrained(wan_i2v_dirs["ti2v"])
    assert pipe.config.expand_timesteps and pipe.image_encoder is None
    pipe.scheduler = FlowMatchEulerDiscreteScheduler(shift=policy.scheduler_shift)
    frames = first_frames(side=TI2V_SIDE)
    shape = policy.latent_shape(TI2V_SIDE, TI2V_SIDE)  # [48, 3, 4, 4]; excluded: less the image's frame
    left_out = {"stepped": 0, "excluded": 1}[given_frames]
    assert shape == (48, 3 - left_out, 4, 4)
    # the pipeline draws frame 0 too and steps it; it never reads it (the image's frame replaces it)
    whole = torch.randn(2, 48, 3, 4, 4, generator=torch.Generator().manual_seed(4))
    start = whole[:, :, left_out:]
    stepped = []  # the pipeline's latents after its last step, before it puts the image over frame 0

    def keep_last(pipeline, index, timestep, tensors):
        if index == steps - 1:
            stepped.append(tensors["latents"].clone())
        return tensors

    theirs_calls, handles = record_timesteps({"transformer": pipe.transformer})
    theirs, reference_video = pipeline_outputs(
        pipe, frames, whole, steps, scale, TI2V_SIDE, callback_on_step_end=keep_last
    )
    for handle in handles:
        handle.remove()
    ours_calls, handles = record_timesteps({"transformer": policy.transformer})
    cond = conditioned(policy, frames, with_negative=True)
    sigmas = policy.sigmas(steps, shape)
    with torch.no_grad():
        latents = sample_trajectory(policy, cond, start, None, sigmas, scale, 0.0, sde_step_mask(steps, 0.0)).latents
    for handle in handles:
        handle.remove()
    ours = latents[:, -1]  # [B, 48, 3 - left_out, 4, 4]; theirs [B, 48, 3, 4, 4]
    before_image = torch.cat(stepped[::2])  # each prompt's first call (its second renders the video)
    assert_close_reordered(
        ours,
        before_image[:, :, left_out:],
        length=TINY_REDUCTION,
        depth=steps * TINY_DEPTH,
        gain=abs(1 - scale) + scale,
    )
    assert torch.equal(before_image[:, :, 1:], theirs[:, :, 1:])
    assert (ours - start).abs().max() > 0.1
    (condition,) = unpack_rows(cond.source_latents, [(48, 1, 4, 4)], "Wan I2V")
    # the pipeline's frame 0 is the encoded image: our VAE encode of the same pixels (its processor
    # divides in two steps, we in one: rounding only, through the VAE)
    torch.testing.assert_close(theirs[:, :, :1], condition, atol=1e-5, rtol=0)
    decoded = decode_samples(policy, ours, cond)  # [B, F, 3, H, W]
    assert decoded.shape == reference_video.shape == (2, NUM_FRAMES, 3, TI2V_SIDE, TI2V_SIDE)
    assert (decoded.float() - reference_video * 255).abs().max() <= 1.0
    # one call a step here (joint CFG, both prompts), two a prompt there; each call's timesteps: 0 (the
    # image's tokens) and t
    assert [t for _, t in ours_calls] == [t for _, t in theirs_calls[: 2 * steps : 2]]
    assert all(t[0] == 0.0 and len(t) == 2 for _, t in ours_calls)


def test_the_ti2v_source_is_the_pipelines_condition_and_changes_every_generated_frame(wan_i2v_dirs):
    """encode_sources = the condition the pipeline's `prepare_latents` returns with expand_timesteps
    (the image's latent frame, no mask channels); another image changes the velocity on every
    generated frame; a prompt without one is refused in one line."""
    policy = load(wan_i2v_dirs["ti2v"])
    pipe = policy.pipeline
    frames = first_frames(side=TI2V_SIDE)
    ours = policy.encode_sources(frames)  # [2, 1, 48 * 1 * 4 * 4]
    assert ours.shape == (2, 1, 48 * 4 * 4)
    (condition,) = unpack_rows(ours, [(48, 1, 4, 4)], "Wan I2V")  # no CLIP tokens
    for row in range(2):
        pixels = pipe.video_processor.preprocess(pil(frames[row, 0]), height=TI2V_SIDE, width=TI2V_SIDE)
        _, expected, mask = pipe.prepare_latents(
            pixels,
            1,
            48,
            TI2V_SIDE,
            TI2V_SIDE,
            NUM_FRAMES,
            torch.float32,
            torch.device("cpu"),
            None,
            torch.zeros(1, 48, 3, 4, 4),
        )
        torch.testing.assert_close(condition[row : row + 1], expected, atol=1e-5, rtol=0)
        assert mask[0, 0, 0].eq(0).all() and mask[0, 0, 1:].eq(1).all()  # the image's frame is frame 0
    cond = conditioned(policy, frames, with_negative=False)
    shape = policy.latent_shape(TI2V_SIDE, TI2V_SIDE)
    latents = torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))
    sigma = torch.tensor([0.95, 0.5])
    with torch.no_grad():
        same = policy.velocity(latents, sigma, cond, 1.0)
        other = policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=ours.flip(0)), 1.0)
    assert same.shape == latents.shape
    assert ((same - other).abs().amax(dim=(0, 1, 3, 4)) > 1e-4).all()  # every sampled frame sees the image
    with pytest.raises(ValueError, match="source image"):
        policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=None), 1.0)
    with pytest.raises(ValueError, match="rollout.height x rollout.width"):
        policy.velocity(latents, sigma, conditioned(policy, first_frames(side=2 * TI2V_SIDE), False), 1.0)


def test_a_ti2v_clip_of_one_frame_leaves_nothing_to_generate_and_is_refused(wan_i2v_dirs):
    with pytest.raises(ValueError, match="model.num_frames=1"):
        WanI2VPolicy.from_pretrained(wan_i2v_dirs["ti2v"], max_sequence_length=MAX_TOKENS, num_frames=1).latent_shape(
            TI2V_SIDE, TI2V_SIDE
        )


@pytest.mark.parametrize("given_frames", ["stepped", "excluded"])
def test_ti2v_encode_images_gives_what_the_policy_samples(wan_i2v_dirs, given_frames):
    """Offline videos enter as the sampled latents: the video's latents (excluded: less the first
    frame's)."""
    policy = load(wan_i2v_dirs["ti2v"], given_frames=given_frames)
    video = torch.from_numpy(
        np.random.default_rng(1).integers(0, 256, (1, NUM_FRAMES, 3, TI2V_SIDE, TI2V_SIDE), dtype=np.uint8)
    )
    latents = policy.encode_images(video)
    assert latents.shape == (1, *policy.latent_shape(TI2V_SIDE, TI2V_SIDE))
    assert latents.shape[2] == {"stepped": 3, "excluded": 2}[given_frames]
