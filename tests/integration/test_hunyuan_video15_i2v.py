"""HunyuanVideo 1.5 image-to-video through `HunyuanVideo15I2VPolicy` on the tiny pipeline built
from the published 480p I2V configs (`genalign/models/hunyuan_video15_i2v/architectures/`, shrunk
in width and depth by `models/hunyuan_video15_i2v/tiny.py`), loaded from disk through
`HunyuanVideo15ImageToVideoPipeline.from_pretrained`.

The central check: our velocity + Euler ODE kernel + decode reproduce
`HunyuanVideo15ImageToVideoPipeline.__call__` for the same first frame and noise; the encoded
source is the pipeline's own condition latents, mask and SigLIP tokens and it changes the velocity;
a size the pipeline would not generate is refused; an exported LoRA loads into the pipeline's
transformer and predicts our velocity."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image
from support import (
    HUNYUAN_VIDEO15_DEPTH,
    HUNYUAN_VIDEO15_REDUCTION,
    assert_close_reordered,
    assert_lora_export_reproduces,
)

from genalign.models.hunyuan_video15_i2v import HunyuanVideo15I2VPolicy
from genalign.sampling.trajectory import sample_trajectory, sde_step_mask

MAX_TOKENS = 48  # the Qwen stream's padded length (the pipeline's default is 1000)
NUM_FRAMES = 5  # the VAE's temporal factor is 4: 5 frames = 2 latent frames
SIDE = 32  # a size bucket of the tiny transformer's target_size 32
PROMPTS = ['the sign that says "open" swings', "the cat turns its head"]
LENGTH, DEPTH = HUNYUAN_VIDEO15_REDUCTION, HUNYUAN_VIDEO15_DEPTH


@pytest.fixture(scope="module")
def policy(tiny_hunyuan_video15_i2v_dir) -> HunyuanVideo15I2VPolicy:
    return HunyuanVideo15I2VPolicy.from_pretrained(
        tiny_hunyuan_video15_i2v_dir, max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES
    )


def first_frames(count: int = 2, side: int = SIDE) -> torch.Tensor:
    """Random uint8 first frames [B, 1, 3, side, side]."""
    pixels = np.random.default_rng(0).integers(0, 256, (count, 1, 3, side, side), dtype=np.uint8)
    return torch.from_numpy(pixels)


def pil(image: torch.Tensor) -> Image.Image:
    return Image.fromarray(image.permute(1, 2, 0).numpy())


@pytest.mark.parametrize("guidance_scale", [1.0, 6.0])
def test_our_ode_sampler_reproduces_the_image_to_video_pipeline(policy, guidance_scale):
    """Each prompt with its own first frame, the same noise, 3 Euler steps with the guider's CFG
    6 (the checkpoint's) and without it: latents to the reorder bound, the decoded uint8 frames
    equal to the pipeline's video within one level."""
    from diffusers import ClassifierFreeGuidance

    pipe = policy.pipeline
    pipe.guider = ClassifierFreeGuidance(guidance_scale=guidance_scale)
    frames = first_frames()
    start = torch.randn(2, *policy.latent_shape(SIDE, SIDE), generator=torch.Generator().manual_seed(3))
    pipe.vae.enable_slicing()  # the VAE's mid-block attention mask does not broadcast over a batch (0.42)
    references, videos = [], []
    for row in range(2):  # the pipeline takes one image a call
        common = dict(image=pil(frames[row, 0]), prompt=PROMPTS[row], num_frames=NUM_FRAMES, num_inference_steps=3)
        with torch.no_grad():
            references.append(pipe(latents=start[row : row + 1].clone(), output_type="latent", **common).frames)
            videos.append(pipe(latents=start[row : row + 1].clone(), output_type="pt", **common).frames)
    pipe.vae.disable_slicing()

    cond = policy.encode_conditions(PROMPTS, frames, with_negative=guidance_scale > 1)
    sigmas = policy.sigmas(3, tuple(start.shape[1:]))
    with torch.no_grad():
        latents = sample_trajectory(
            policy, cond, start, None, sigmas, guidance_scale, 0.0, sde_step_mask(3, 0.0)
        ).latents
    ours, theirs = latents[:, -1], torch.cat(references)
    assert_close_reordered(ours, theirs, length=LENGTH, depth=3 * DEPTH, gain=4.0 + guidance_scale)
    assert (ours - start).abs().max() > 0.1  # the sample moved
    video = policy.decode(ours)  # [B, F, 3, H, W]
    reference_video = torch.cat(videos)  # [B, F, 3, H, W] in [0, 1]
    assert video.shape == reference_video.shape == (2, NUM_FRAMES, 3, SIDE, SIDE)
    assert (video.float() - reference_video * 255).abs().max() <= 1.0


def test_the_source_is_the_pipelines_condition_and_tokens_and_changes_the_velocity(policy):
    """encode_sources = the pipeline's `prepare_cond_latents_and_mask` (first-frame latents on
    latent frame 0, the mask) and its `encode_image` SigLIP tokens; another first frame changes
    the velocity; a prompt without one is refused in one line."""
    pipe = policy.pipeline
    frames = first_frames()
    packed = policy.encode_sources(frames)  # [2, 1, N]
    shape = policy.latent_shape(SIDE, SIDE)
    latents = torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))
    cond = policy.encode_conditions(PROMPTS, frames, with_negative=False)
    torch.testing.assert_close(cond.source_latents, packed, rtol=0, atol=0)
    condition, tokens = policy.condition_inputs(latents, cond)
    assert condition.shape == (2, shape[0] + 1, *shape[1:]) and tokens.shape == (2, 729, policy.image_width)
    for row in range(2):
        with torch.no_grad():
            expected_latents, expected_mask = pipe.prepare_cond_latents_and_mask(
                latents[row : row + 1], pil(frames[row, 0]), 1, SIDE, SIDE, torch.float32, torch.device("cpu")
            )
            expected_tokens = pipe.encode_image(pil(frames[row, 0]), 1, torch.device("cpu"), torch.float32)
        # [0, 255] -> [-1, 1] by our division vs the processor's two steps: rounding only, through the VAE
        torch.testing.assert_close(condition[row : row + 1, :-1], expected_latents, atol=1e-5, rtol=0)
        torch.testing.assert_close(condition[row : row + 1, -1:], expected_mask, atol=0, rtol=0)
        torch.testing.assert_close(tokens[row : row + 1], expected_tokens, atol=0, rtol=0)
    assert condition[:, :-1, 0].abs().max() > 0 and condition[:, :, 1:].abs().max() == 0
    sigma = torch.tensor([0.95, 0.5])
    with torch.no_grad():
        same = policy.velocity(latents, sigma, cond, 1.0)
        other = policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=packed.flip(0)), 1.0)
    assert same.shape == latents.shape and (same - other).abs().max() > 1e-3
    with pytest.raises(ValueError, match="source image"):
        policy.velocity(latents, sigma, dataclasses.replace(cond, source_latents=None), 1.0)


def test_only_the_pipelines_size_buckets_are_generated(policy):
    """32x32 is a bucket of target_size 32; 48x48 is not (the pipeline would make 32x32 of a
    square image), and a first frame of another size than the rollout's is refused."""
    assert policy.latent_shape(SIDE, SIDE) == (4, 2, 2, 2)
    with pytest.raises(ValueError, match="rollout.height x rollout.width = 48x48.*32x32"):
        policy.latent_shape(48, 48)
    cond = policy.encode_conditions(PROMPTS, first_frames(side=2 * SIDE), with_negative=False)
    latents = torch.randn(2, *policy.latent_shape(SIDE, SIDE))
    with pytest.raises(ValueError, match="rollout.height x rollout.width"):
        policy.velocity(latents, torch.tensor([0.5, 0.5]), cond, 1.0)


def test_a_pipeline_without_siglip_or_a_step_distilled_transformer_is_refused(tiny_hunyuan_video15_i2v_dir):
    from diffusers import HunyuanVideo15ImageToVideoPipeline

    pipe = HunyuanVideo15ImageToVideoPipeline.from_pretrained(tiny_hunyuan_video15_i2v_dir)
    pipe.image_encoder = None
    with pytest.raises(ValueError, match="image_encoder"):
        HunyuanVideo15I2VPolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=NUM_FRAMES)
    pipe = HunyuanVideo15ImageToVideoPipeline.from_pretrained(tiny_hunyuan_video15_i2v_dir)
    pipe.transformer.register_to_config(use_meanflow=True)
    with pytest.raises(ValueError, match="use_meanflow"):
        HunyuanVideo15I2VPolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=NUM_FRAMES)


def test_exported_lora_loads_into_the_pipelines_transformer_with_the_same_velocity(
    tiny_hunyuan_video15_i2v_dir, tmp_path
):
    """UniRL's targets; the exported `lora/` loads with the pipeline's
    `transformer.load_lora_adapter` (HunyuanVideo15ImageToVideoPipeline has no
    `load_lora_weights`, as its model card says) and gives our velocity with the first frame."""
    from diffusers import HunyuanVideo15ImageToVideoPipeline

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora, pipeline_loads_lora

    options = dict(max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES)
    fresh = HunyuanVideo15I2VPolicy.from_pretrained(tiny_hunyuan_video15_i2v_dir, **options)
    lora = LoraConfig(rank=4, alpha=8.0)  # alpha != r: the scale 2 must survive export
    apply_lora(fresh.transformer, lora, fresh.lora_target_modules)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(3)
        for name, param in fresh.transformer.named_parameters():
            if ".lora_B." in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=generator))
    pipe = HunyuanVideo15ImageToVideoPipeline.from_pretrained(tiny_hunyuan_video15_i2v_dir)
    assert not pipeline_loads_lora("HunyuanVideo15ImageToVideoPipeline")
    loaded = HunyuanVideo15I2VPolicy(pipe, torch.device("cpu"), torch.float32, **options)
    cond = fresh.encode_conditions(PROMPTS, first_frames(), with_negative=True)
    latents = torch.randn(2, *fresh.latent_shape(SIDE, SIDE), generator=torch.Generator().manual_seed(2))
    args = (latents, torch.tensor([0.7, 0.3]), cond, 6.0)
    assert_lora_export_reproduces(
        fresh, lora, tmp_path / "lora", pipe, loaded, args, into_transformer=True, length=LENGTH, depth=DEPTH
    )


def test_a_size_the_pipeline_would_not_make_is_refused_with_the_config(tiny_hunyuan_video15_i2v_dir):
    """The bucket rule (`SPEC.size_rule`) runs with the config checks, before anything loads:
    from a local checkpoint's transformer config (target_size 32 here) and from the shipped
    architecture file of the hub id (640: 480x480 is made 640x640, 480x848 is a bucket)."""
    from genalign.config.schema import ExperimentConfig
    from genalign.models.family_checks import family_problems

    cfg = ExperimentConfig()
    cfg.model.family, cfg.model.path, cfg.model.num_frames = "hunyuan_video15_i2v", str(tiny_hunyuan_video15_i2v_dir), 5
    cfg.rollout.height = cfg.rollout.width = 48
    assert family_problems(cfg) == [
        "rollout.height x rollout.width = 48x48: HunyuanVideo15ImageToVideoPipeline makes a first frame of that "
        "aspect ratio 32x32 (the size bucket of its transformer's target_size 32 nearest that ratio); run at that "
        "size, with first frames of it"
    ]
    cfg.rollout.height = cfg.rollout.width = SIDE
    assert family_problems(cfg) == []
    cfg.model.path = "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v"
    cfg.rollout.height = cfg.rollout.width = 480
    (problem,) = family_problems(cfg)
    assert "480x480" in problem and "640x640" in problem and "target_size 640" in problem
    cfg.rollout.height, cfg.rollout.width = 480, 848
    assert family_problems(cfg) == []
