"""HunyuanVideo15Policy on the tiny HunyuanVideo 1.5 pipeline (the published 480p T2V configs
shrunk), loaded from disk through `HunyuanVideo15Pipeline.from_pretrained`: the two text
streams, the latent geometry, the schedule, and the central check that our velocity + Euler
ODE kernel + decode reproduce `HunyuanVideo15Pipeline.__call__` for the same initial noise;
LoRA export that `HunyuanVideo15Pipeline.load_lora_weights` loads."""

from __future__ import annotations

import json

import pytest
import torch
from support import (
    HUNYUAN_VIDEO15_DEPTH,
    HUNYUAN_VIDEO15_REDUCTION,
    assert_close_reordered,
    assert_loaded_as_built,
    assert_lora_export_reproduces,
)

from genalign.models.config import LoraConfig
from genalign.models.hunyuan_video15.policy import HunyuanVideo15Policy, split_mask
from genalign.models.hunyuan_video15.tiny import build_tiny_hunyuan_video15_pipeline
from genalign.models.tiny_random import main
from genalign.sampling.trajectory import sample_trajectory, sde_step_mask
from genalign.weights.lora import apply_lora, pipeline_loads_lora

MAX_TOKENS = 48  # the Qwen stream's padded length (the pipeline's default is 1000)
NUM_FRAMES = 5  # the VAE's temporal factor is 4: 5 frames = 2 latent frames
PROMPTS = ['a sign that says "open" on a door', "two cats"]  # the first quotes a glyph text (byT5 stream)
LENGTH, DEPTH = HUNYUAN_VIDEO15_REDUCTION, HUNYUAN_VIDEO15_DEPTH


@pytest.fixture(scope="module")
def policy(tiny_hunyuan_video15_dir) -> HunyuanVideo15Policy:
    return HunyuanVideo15Policy.from_pretrained(
        tiny_hunyuan_video15_dir, max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES
    )


def noise(policy: HunyuanVideo15Policy, batch: int = 2, seed: int = 0) -> torch.Tensor:
    shape = policy.latent_shape(32, 32)
    return torch.randn(batch, *shape, generator=torch.Generator().manual_seed(seed))  # [B, C, F_lat, h, w]


def test_round_trip_loads_the_saved_weights(policy):
    assert policy.family == "hunyuan_video15"
    assert_loaded_as_built(policy, build_tiny_hunyuan_video15_pipeline(seed=0), "Qwen2_5_VLTextModel")
    assert type(policy.pipeline.text_encoder_2).__name__ == "T5EncoderModel"


def test_module_cli_writes_a_loadable_pipeline(tmp_path):
    assert main(["hunyuan_video15", str(tmp_path / "tiny")]) == 0
    index = json.loads((tmp_path / "tiny" / "model_index.json").read_text())
    assert index["_class_name"] == "HunyuanVideo15Pipeline" and index["guider"][1] == "ClassifierFreeGuidance"


def test_the_tiny_tokenizer_crops_exactly_the_template_as_the_pipeline_does(policy):
    """The pipeline drops the first 108 tokens (system turn + the user header): with the tiny
    tokenizer, as with the real one, the prompt's first token is the 109th."""
    pipe = policy.pipeline
    rendered = pipe.tokenizer.apply_chat_template(
        [[{"role": "system", "content": pipe.system_message}, {"role": "user", "content": "cats"}]],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"][0]
    start = pipe.prompt_template_encode_start_idx
    assert start == 108
    assert pipe.tokenizer.decode(rendered[start - 3 : start]) == "<|im_start|>user\n"
    assert pipe.tokenizer.decode(rendered[start:]).startswith("cats<|im_end|>")


def test_latent_shape_is_32_channels_over_16x_and_frames_must_fit(policy):
    assert policy.latent_shape(32, 32) == (4, 2, 2, 2)  # tiny VAE: 4 channels (real: 32)
    with pytest.raises(ValueError, match="multiples of 16"):
        policy.latent_shape(40, 32)
    bad = HunyuanVideo15Policy(policy.pipeline, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=4)
    with pytest.raises(ValueError, match="model.num_frames=4"):
        bad.latent_shape(32, 32)


def test_encode_prompts_carries_both_streams_and_their_masks(policy):
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    assert cond.embeds.shape == (2, MAX_TOKENS, 16) and cond.pooled.shape == (2, 256, 32)
    assert cond.mask.shape == (2, MAX_TOKENS + 256)
    text_mask, glyph_mask = split_mask(cond.mask, MAX_TOKENS)
    # the quoted "open" reaches byT5 as 'Text "open". ' plus </s>; the unquoted prompt has no glyph tokens
    assert glyph_mask[0].sum() == len('Text "open". ') + 1 and glyph_mask[1].sum() == 0
    assert cond.pooled[1].abs().max() == 0
    assert (text_mask.sum(1) > 0).all() and (text_mask.sum(1) < MAX_TOKENS).all()
    reference = policy.pipeline.encode_prompt(prompt=PROMPTS, device=torch.device("cpu"), batch_size=2)
    for ours, theirs in zip((cond.embeds, text_mask, cond.pooled, glyph_mask), reference):
        torch.testing.assert_close(ours, theirs.to(ours.dtype), rtol=0, atol=0)
    empty = policy.encode_prompts([""], with_negative=False)
    torch.testing.assert_close(cond.negative_embeds[1], empty.embeds[0], rtol=0, atol=0)
    torch.testing.assert_close(cond.negative_mask[1], empty.mask[0], rtol=0, atol=0)
    assert policy.encode_prompts(PROMPTS, with_negative=False).negative_embeds is None


@pytest.mark.parametrize("guidance_scale", [1.0, 6.0])
def test_our_ode_sampler_reproduces_the_hunyuan_video15_pipeline(policy, guidance_scale):
    """Same noise, 3 Euler steps, with the guider's CFG 6 (the checkpoint's) and without it
    (guidance 1, the distilled checkpoints'): latents to the reorder bound, and the decoded uint8
    frames equal to the pipeline's video within one level."""
    from diffusers import ClassifierFreeGuidance

    pipe = policy.pipeline
    pipe.guider = ClassifierFreeGuidance(guidance_scale=guidance_scale)
    start = noise(policy)
    common = dict(prompt=PROMPTS, height=32, width=32, num_frames=NUM_FRAMES, num_inference_steps=3)
    # the VAE's mid-block attention mask does not broadcast over a batch (diffusers 0.42): the
    # pipeline decodes one video at a time only with slicing on, as our decode always does
    pipe.vae.enable_slicing()
    with torch.no_grad():
        reference = pipe(latents=start.clone(), output_type="latent", **common).frames  # [B, C, F_lat, h, w]
        reference_video = pipe(latents=start.clone(), output_type="pt", **common).frames  # [B, F, 3, H, W] in [0, 1]
    pipe.vae.disable_slicing()

    cond = policy.encode_prompts(PROMPTS, with_negative=guidance_scale > 1)
    sigmas = policy.sigmas(3, tuple(start.shape[1:]))
    torch.testing.assert_close(sigmas[:-1] * 1000, pipe.scheduler.timesteps, rtol=0, atol=0)
    latents, log_probs, _ = sample_trajectory(
        policy, cond, start, [], sigmas, guidance_scale, 0.0, sde_step_mask(3, 0.0)
    )
    assert_close_reordered(latents[:, -1], reference, length=LENGTH, depth=3 * DEPTH, gain=4.0 + guidance_scale)
    assert (log_probs == 0).all()
    video = policy.decode(latents[:, -1])
    assert video.shape == (2, NUM_FRAMES, 3, 32, 32) and video.dtype == torch.uint8
    assert (video.float() - reference_video * 255).abs().max() <= 1.0


def test_velocity_without_cfg_is_the_conditional_forward_and_carries_gradients(tiny_hunyuan_video15_dir):
    policy = HunyuanVideo15Policy.from_pretrained(
        tiny_hunyuan_video15_dir, max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES
    )
    apply_lora(policy.transformer, LoraConfig(rank=4, alpha=8), policy.lora_target_modules)
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    latents = noise(policy)
    text_mask, glyph_mask = split_mask(cond.mask, MAX_TOKENS)
    with torch.no_grad():
        direct = policy.transformer(
            hidden_states=torch.cat([latents, torch.zeros(2, 5, *latents.shape[2:])], dim=1),
            timestep=torch.tensor([800.0, 800.0]),
            encoder_hidden_states=cond.embeds,
            encoder_attention_mask=text_mask,
            encoder_hidden_states_2=cond.pooled,
            encoder_attention_mask_2=glyph_mask,
            image_embeds=torch.zeros(2, 729, 8),
            return_dict=False,
        )[0]
    torch.testing.assert_close(policy.velocity(latents, torch.tensor(0.8), cond, 1.0), direct, rtol=0, atol=0)
    policy.velocity(latents, torch.tensor([0.8, 0.3]), cond, 6.0).square().mean().backward()
    # B = 0 at init: A gets none. The last block's text-stream outputs feed nothing (only the video
    # tokens reach the output projection), so the adapters of its text queries, text output and
    # text MLP get a zero gradient, here as in training
    last = "transformer_blocks.1."
    unused = tuple(last + name for name in ("attn.add_q_proj", "attn.to_add_out", "ff_context."))
    grads = {n: p.grad for n, p in policy.transformer.named_parameters() if "lora_B" in n}
    assert all((g is not None and g.abs().sum() > 0) != n.startswith(unused) for n, g in grads.items()), [
        n for n, g in grads.items() if g is None or g.abs().sum() == 0
    ]


def test_lora_targets_unirl_layers_and_export_loads_into_the_pipeline(tiny_hunyuan_video15_dir, tmp_path):
    """UniRL's targets: both streams' attention and MLPs in every block (and the refiner's
    attention and MLP, which the suffixes also name); the exported `lora/` loads with
    `HunyuanVideo15Pipeline.load_lora_weights` and gives our velocity."""
    lora = LoraConfig(rank=4, alpha=8.0)  # alpha != r: the scale 2 must survive export
    options = dict(max_sequence_length=MAX_TOKENS, num_frames=NUM_FRAMES)
    policy = HunyuanVideo15Policy.from_pretrained(tiny_hunyuan_video15_dir, **options)
    apply_lora(policy.transformer, lora, policy.lora_target_modules)
    adapted = sorted(n.rsplit(".lora_A", 1)[0] for n, _ in policy.transformer.named_parameters() if ".lora_A." in n)
    assert [n for n in adapted if n.startswith("transformer_blocks.0.")] == sorted(
        f"transformer_blocks.0.{target}" for target in policy.lora_target_modules
    )
    assert len(adapted) == 2 * 12 + 1 * 6  # 2 blocks x 12 layers; the refiner block's q/k/v/out + its MLP's 2
    with torch.no_grad():
        generator = torch.Generator().manual_seed(3)
        for name, param in policy.transformer.named_parameters():
            if ".lora_B." in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=generator))
    from diffusers import HunyuanVideo15Pipeline

    pipe = HunyuanVideo15Pipeline.from_pretrained(tiny_hunyuan_video15_dir)
    assert not pipeline_loads_lora("HunyuanVideo15Pipeline")  # diffusers 0.42: no load_lora_weights
    loaded = HunyuanVideo15Policy(pipe, torch.device("cpu"), torch.float32, **options)
    args = (noise(policy), torch.tensor([0.7, 0.3]), policy.encode_prompts(PROMPTS, with_negative=True), 6.0)
    # what the model card tells users to call: the pipeline's transformer loads the adapter
    assert_lora_export_reproduces(
        policy, lora, tmp_path / "lora", pipe, loaded, args, into_transformer=True, length=LENGTH, depth=DEPTH
    )


def test_encode_images_is_the_scaled_posterior_mode_that_decode_inverts(policy):
    """The image-to-video pipeline's `_get_image_latents`: mode · scaling_factor; decode divides by it."""
    video = torch.randint(0, 256, (1, NUM_FRAMES, 3, 32, 32), generator=torch.Generator().manual_seed(1)).to(
        torch.uint8
    )
    latents = policy.encode_images(video)
    assert latents.shape == (1, *policy.latent_shape(32, 32)) and latents.dtype == torch.float32
    with torch.no_grad():
        raw = policy.vae.encode(video.permute(0, 2, 1, 3, 4).float() / 127.5 - 1.0).latent_dist.mode()
    torch.testing.assert_close(latents, raw * policy.vae.config.scaling_factor, rtol=0, atol=0)
    with pytest.raises(ValueError, match="video"):
        policy.encode_images(video[:, 0])


def test_sigmas_are_the_pipelines_shifted_linspace(policy):
    import numpy as np
    from diffusers import FlowMatchEulerDiscreteScheduler

    assert policy.scheduler_shift == 5.0  # the 480p checkpoints' scheduler
    scheduler = FlowMatchEulerDiscreteScheduler(shift=5.0)
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 0.0, 17)[:-1])
    assert torch.equal(policy.sigmas(16, policy.latent_shape(32, 32)), scheduler.sigmas)
