"""WanPolicy on the tiny Wan pipeline, loaded from disk through `WanPipeline.from_pretrained`:
video latent shapes, UMT5 conditioning, the flow shift, and the central check that our
velocity + Euler ODE kernel + decode reproduce `WanPipeline.__call__` for the same initial
noise and steps (the pipeline run with a FlowMatchEulerDiscreteScheduler of the same shift);
LoRA export that `WanPipeline.load_lora_weights` loads."""

from __future__ import annotations

import json

import pytest
import torch
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered, assert_loaded_as_built

from genalign.models.config import LoraConfig
from genalign.models.tiny_random import main
from genalign.models.wan.policy import WAN_LORA_TARGETS, WanPolicy, scheduler_shift
from genalign.models.wan.tiny import WAN_SHAPES, build_wan_pipeline
from genalign.sampling.trajectory import sample_trajectory, sde_step_mask
from genalign.weights.lora import apply_lora, export_lora_for_diffusers

MAX_TOKENS = 16
NUM_FRAMES = 3  # the tiny VAE's temporal factor is 2: 3 frames = 2 latent frames
PROMPTS = ["a red car driving", "two cats"]


@pytest.fixture(scope="module")
def policy(tiny_wan_dir) -> WanPolicy:
    return WanPolicy.from_pretrained(tiny_wan_dir, max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES)


def noise(policy: WanPolicy, batch: int = 2, seed: int = 0) -> torch.Tensor:
    shape = policy.latent_shape(32, 32)
    return torch.randn(batch, *shape, generator=torch.Generator().manual_seed(seed))  # [B, C, F_lat, h, w]


def test_round_trip_loads_the_saved_weights(policy):
    assert policy.family == "wan"
    assert_loaded_as_built(policy, build_wan_pipeline("tiny", seed=0), "UMT5EncoderModel")


def test_module_cli_writes_a_loadable_wan_pipeline(tmp_path, capsys):
    assert main(["wan", str(tmp_path / "tiny")]) == 0
    index = json.loads((tmp_path / "tiny" / "model_index.json").read_text())
    assert index["_class_name"] == "WanPipeline" and index["scheduler"][1] == "UniPCMultistepScheduler"


def test_latent_shape_is_video_and_frames_must_fit_the_vae(policy, tiny_wan_dir):
    # (3 - 1) / 2 + 1 = 2 latent frames; 32 px / 8 = 4
    assert policy.latent_shape(32, 32) == (16, 2, 4, 4)
    with pytest.raises(ValueError, match="multiples of 16"):
        policy.latent_shape(40, 32)
    bad = WanPolicy(policy.pipeline, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=4)
    with pytest.raises(ValueError, match="model.num_frames=4"):
        bad.latent_shape(32, 32)


def test_flow_shift_comes_from_the_shipped_unipc_scheduler(policy):
    from diffusers import FlowMatchEulerDiscreteScheduler

    assert policy.scheduler_shift == 3.0  # UniPC flow_shift, as Wan 2.1 480p ships it
    assert scheduler_shift(FlowMatchEulerDiscreteScheduler(shift=5.0)) == 5.0
    euler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    euler.set_timesteps(4)
    shape = policy.latent_shape(32, 32)
    torch.testing.assert_close(policy.sigmas(4, shape), euler.sigmas.float(), rtol=0, atol=0)
    # a static shift: Wan's pipeline applies no resolution-dependent shift (unlike FLUX)
    torch.testing.assert_close(policy.sigmas(4, (16, 21, 60, 104)), euler.sigmas.float(), rtol=0, atol=0)


def test_encode_prompts_is_umt5_zero_padded_with_the_negative(policy):
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    assert cond.embeds.shape == (2, MAX_TOKENS, WAN_SHAPES["tiny"]["umt5"]["d_model"]) and cond.pooled is None
    # the pipeline zeroes every position after the prompt's own tokens (incl. </s>)
    length = len(policy.pipeline.tokenizer(PROMPTS[1]).input_ids)
    assert 2 < length < MAX_TOKENS
    assert cond.embeds[1, length:].abs().max() == 0 and (cond.embeds[1, :length].abs().sum(-1) > 0).all()
    empty = policy.encode_prompts([""], with_negative=False).embeds
    torch.testing.assert_close(cond.negative_embeds[0], empty[0])
    assert policy.encode_prompts(PROMPTS, with_negative=False).negative_embeds is None


def test_our_ode_sampler_reproduces_the_wan_pipeline(policy):
    """Same noise, 3 Euler steps, CFG 5 with the empty negative prompt: latents to float
    tolerance, and the decoded uint8 frames equal to the pipeline's video within one level."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline

    pipe = WanPipeline(
        tokenizer=policy.pipeline.tokenizer,
        text_encoder=policy.pipeline.text_encoder,
        vae=policy.vae,
        transformer=policy.transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=policy.scheduler_shift),
    )
    start = noise(policy)
    common = dict(
        prompt=PROMPTS,
        height=32,
        width=32,
        num_frames=NUM_FRAMES,
        num_inference_steps=3,
        guidance_scale=5.0,
        max_sequence_length=MAX_TOKENS,
    )
    with torch.no_grad():
        reference = pipe(latents=start.clone(), output_type="latent", **common).frames  # [B, C, F_lat, h, w]
        reference_video = pipe(latents=start.clone(), output_type="pt", **common).frames  # [B, F, 3, H, W] in [0, 1]

    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    sigmas = policy.sigmas(3, tuple(start.shape[1:]))
    latents, log_probs, _ = sample_trajectory(policy, cond, start, [], sigmas, 5.0, 0.0, sde_step_mask(3, 0.0))
    # the pipeline's loop vs ours: the same math in its own order, 3 steps of the transformer, CFG 5
    assert_close_reordered(latents[:, -1], reference, length=TINY_REDUCTION, depth=3 * TINY_DEPTH, gain=4.0 + 5.0)
    assert (log_probs == 0).all()
    video = policy.decode(latents[:, -1])
    assert video.shape == (2, NUM_FRAMES, 3, 32, 32) and video.dtype == torch.uint8
    assert (video.float() - reference_video * 255).abs().max() <= 1.0


def test_velocity_without_cfg_is_the_conditional_forward_and_carries_gradients(tiny_wan_dir):
    policy = WanPolicy.from_pretrained(tiny_wan_dir, max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES)
    apply_lora(policy.transformer, LoraConfig(rank=4, alpha=8), policy.lora_target_modules)
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    latents = noise(policy)
    with torch.no_grad():
        direct = policy.transformer(
            hidden_states=latents,
            timestep=torch.tensor([800.0, 800.0]),
            encoder_hidden_states=cond.embeds,
            return_dict=False,
        )[0]
    torch.testing.assert_close(policy.velocity(latents, torch.tensor(0.8), cond, 1.0), direct)
    policy.velocity(latents, torch.tensor([0.8, 0.3]), cond, 5.0).square().mean().backward()
    grads = [p.grad for n, p in policy.transformer.named_parameters() if "lora_B" in n]  # B = 0 at init: A gets none
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_lora_targets_both_attentions_and_export_loads_into_wan_pipeline(tiny_wan_dir, tmp_path):
    """DanceGRPO's Wan targets sit on attn1 and attn2 of every block; the exported `lora/`
    loads with `WanPipeline.load_lora_weights` and gives our transformer's output."""
    from diffusers import WanPipeline

    lora = LoraConfig(rank=4, alpha=8.0)  # alpha != r: the scale 2 must survive export
    policy = WanPolicy.from_pretrained(tiny_wan_dir, max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES)
    apply_lora(policy.transformer, lora, WAN_LORA_TARGETS)
    adapted = sorted(n.rsplit(".lora_A", 1)[0] for n, _ in policy.transformer.named_parameters() if ".lora_A." in n)
    assert adapted[:4] == [
        "blocks.0.attn1.to_k",
        "blocks.0.attn1.to_out.0",
        "blocks.0.attn1.to_q",
        "blocks.0.attn1.to_v",
    ]
    assert len(adapted) == 2 * 2 * 4  # 2 blocks x (attn1, attn2) x (q, k, v, out)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(3)
        for name, param in policy.transformer.named_parameters():
            if ".lora_B." in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=generator))
    inputs = dict(
        hidden_states=noise(policy),
        timestep=torch.tensor([700.0, 300.0]),
        encoder_hidden_states=torch.randn(2, MAX_TOKENS, 32, generator=torch.Generator().manual_seed(1)),
        return_dict=False,
    )
    with torch.no_grad():
        ours = policy.transformer(**inputs)[0]
    out_dir = export_lora_for_diffusers(policy.transformer, tmp_path / "lora", lora, policy.diffusers_pipeline)
    pipe = WanPipeline.from_pretrained(tiny_wan_dir)
    with torch.no_grad():
        base = pipe.transformer(**inputs)[0]
        pipe.load_lora_weights(out_dir)
        loaded = pipe.transformer(**inputs)[0]
    assert_close_reordered(loaded, ours, length=TINY_REDUCTION, depth=TINY_DEPTH)  # diffusers' LoRA path vs peft's
    assert (loaded - base).abs().max() > 1e-3


@pytest.mark.slow
def test_the_1_3b_shapes_have_the_published_parameter_count():
    """WAN_SHAPES["wan2.1-t2v-1.3b"] (built on the meta device: no memory) is Wan 2.1 T2V
    1.3B: 1,418,996,800 transformer parameters (30 blocks, width 1536: the "1.3B" of the name)
    and the 127 M-parameter Wan VAE."""
    pipeline = build_wan_pipeline("wan2.1-t2v-1.3b", device="meta", dtype=torch.bfloat16)
    assert sum(p.numel() for p in pipeline.transformer.parameters()) == 1_418_996_800
    assert sum(p.numel() for p in pipeline.vae.parameters()) == 126_892_531


def test_builder_places_weights_in_the_asked_dtype_keeps_the_vae_float32_and_restores_the_default():
    pipeline = build_wan_pipeline("tiny", seed=0, dtype=torch.bfloat16)
    assert pipeline.transformer.dtype == torch.bfloat16 and pipeline.text_encoder.dtype == torch.bfloat16
    assert pipeline.vae.dtype == torch.float32
    assert torch.get_default_dtype() == torch.float32
    with pytest.raises(ValueError, match="unknown Wan shapes 'huge'.*tiny"):
        build_wan_pipeline("huge")


def test_encode_images_is_the_normalised_posterior_mean_that_decode_inverts(policy):
    """WanImageToVideoPipeline normalises an encoded video as (z - mean) * (1 / std); decode
    undoes exactly that. 5 frames: the Wan encoder reads 1 + 4k frames whatever the temporal
    factor (the tiny VAE's is 2, so 5 frames are the 3 latent frames latent_shape says)."""
    policy = WanPolicy(policy.pipeline, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=5)
    video = torch.randint(0, 256, (2, 5, 3, 32, 32), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    latents = policy.encode_images(video)
    assert latents.shape == (2, *policy.latent_shape(32, 32)) and latents.dtype == torch.float32
    config = policy.vae.config
    mean = torch.tensor(config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(config.latents_std).view(1, -1, 1, 1, 1)
    with torch.no_grad():
        raw = policy.vae.encode(video[:1].permute(0, 2, 1, 3, 4).float() / 127.5 - 1.0).latent_dist.mean
    # the same VAE call; only the elementwise normalisation's order differs (no reduction)
    assert_close_reordered(latents[:1], (raw - mean) / std, length=1)
    assert_close_reordered(latents[:1] * std + mean, raw, length=1, depth=2)
    with pytest.raises(ValueError, match="video"):
        policy.encode_images(video[:, 0])
