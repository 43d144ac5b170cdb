"""CosmosPolicy on the tiny Cosmos-Predict2.5 pipeline, loaded from disk through
`Cosmos2_5_PredictBasePipeline.from_pretrained`: the central check that our velocity + Euler
ODE kernel + decode reproduce the pipeline's Text2World `__call__` (text-to-video and, at one
frame, text-to-image; with and without CFG) for the same initial noise and steps, the pipeline
run with a FlowMatchEulerDiscreteScheduler on the σ of the shipped Karras-flow UniPC scheduler
(cosmos.py says why not UniPC); the schedule itself, Qwen2.5-VL conditioning, Cosmos' CFG form,
LoRA targets and the exported `lora/` that `load_lora_weights` loads."""

from __future__ import annotations

import json

import pytest
import torch
from support import (
    TINY_DEPTH,
    TINY_REDUCTION,
    assert_close_reordered,
    assert_loaded_as_built,
    assert_lora_export_reproduces,
    pass_through_guardrail,
)

from genalign.models.base import guided_velocity
from genalign.models.config import LoraConfig
from genalign.models.cosmos.policy import (
    COSMOS_LORA_TARGETS,
    COSMOS_NEGATIVE_PROMPT,
    CosmosPolicy,
    cosmos_guidance,
    karras_range,
)
from genalign.models.cosmos.tiny import build_cosmos_pipeline
from genalign.models.tiny_random import QWEN_TEXT_HIDDEN, main
from genalign.sampling.trajectory import sample_trajectory, sde_step_mask
from genalign.weights.lora import apply_lora

MAX_TOKENS = 32  # the tiny tokenizer spends 11 of them on the pipeline's system turn
PROMPTS = ["a red car driving", "two cats"]
NEGATIVE = "blurry, static"


@pytest.fixture(scope="module")
def policy(tiny_cosmos_dir) -> CosmosPolicy:
    return CosmosPolicy.from_pretrained(
        tiny_cosmos_dir, max_sequence_length=MAX_TOKENS, num_frames=3, negative_prompt=NEGATIVE
    )


def with_frames(policy: CosmosPolicy, num_frames: int) -> CosmosPolicy:
    return CosmosPolicy(
        policy.pipeline, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=num_frames, negative_prompt=NEGATIVE
    )


def noise(policy: CosmosPolicy, batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, *policy.latent_shape(32, 32), generator=torch.Generator().manual_seed(seed))


def test_round_trip_loads_the_saved_weights_frozen(policy):
    assert policy.family == "cosmos"
    assert_loaded_as_built(policy, build_cosmos_pipeline("tiny", seed=0), "Qwen2_5_VLForConditionalGeneration")


def test_module_cli_writes_a_pipeline_without_a_stored_guardrail(tmp_path):
    assert main(["cosmos", str(tmp_path / "tiny")]) == 0
    index = json.loads((tmp_path / "tiny" / "model_index.json").read_text())
    assert index["_class_name"] == "Cosmos2_5_PredictBasePipeline"
    assert index["scheduler"][1] == "UniPCMultistepScheduler" and index["safety_checker"] == [None, None]


def test_the_pipeline_loaded_for_training_refuses_to_generate_without_its_guardrail(policy):
    with pytest.raises(RuntimeError, match="without its guardrail"):
        policy.pipeline(prompt="a cat", height=32, width=32, num_frames=3, num_inference_steps=1)


def test_latent_shape_video_and_image_modes(policy):
    assert policy.latent_shape(32, 48) == (16, 2, 4, 6)  # 3 frames: (3 - 1) / 2 + 1 latent frames
    assert with_frames(policy, 1).latent_shape(32, 32) == (16, 1, 4, 4)  # Text2Image: one latent frame
    with pytest.raises(ValueError, match="multiples of 16"):
        policy.latent_shape(40, 32)
    with pytest.raises(ValueError, match="model.num_frames=4: Cosmos"):
        with_frames(policy, 4).latent_shape(32, 32)
    # encode_images (offline preference data) gives latents of that shape; the Wan encoder reads
    # 1 + 4k frames whatever its temporal factor, so 5 frames (3 latent frames of the tiny VAE)
    five = with_frames(policy, 5)
    video = torch.randint(0, 256, (1, 5, 3, 32, 32), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)
    assert five.encode_images(video).shape == (1, *five.latent_shape(32, 32))


def test_schedule_is_the_shipped_karras_flow_schedule(policy):
    policy.pipeline.scheduler.set_timesteps(6)
    assert torch.equal(policy.sigmas(6, policy.latent_shape(32, 32)), policy.pipeline.scheduler.sigmas)
    assert (policy.sigma_min, policy.sigma_max) == (0.01, 200.0)
    assert policy.sigmas(6, (16, 21, 60, 104))[0].item() == pytest.approx(200 / 201)  # not 1, at any size
    from diffusers import FlowMatchEulerDiscreteScheduler

    with pytest.raises(ValueError, match="Karras flow schedule"):
        karras_range(FlowMatchEulerDiscreteScheduler(shift=3.0).config)


def test_encode_prompts_is_the_pipelines_normalised_layer_stack(policy):
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    # every Qwen2.5-VL layer's hidden state (2 x 16), each normalised over its channels
    assert cond.embeds.shape == (2, MAX_TOKENS, 2 * QWEN_TEXT_HIDDEN) and cond.pooled is None and cond.mask is None
    for layer in cond.embeds.split(QWEN_TEXT_HIDDEN, dim=-1):
        torch.testing.assert_close(layer.mean(-1), torch.zeros(2, MAX_TOKENS), atol=1e-5, rtol=0)
        torch.testing.assert_close(layer.std(-1), torch.ones(2, MAX_TOKENS), atol=1e-4, rtol=0)
    direct, _ = policy.pipeline.encode_prompt(
        PROMPTS, do_classifier_free_guidance=False, max_sequence_length=MAX_TOKENS
    )
    torch.testing.assert_close(cond.embeds, direct, rtol=0, atol=0)
    negative = policy.encode_prompts([NEGATIVE], with_negative=False).embeds
    torch.testing.assert_close(cond.negative_embeds, negative.expand(2, -1, -1), rtol=0, atol=0)
    assert policy.encode_prompts(PROMPTS, with_negative=False).negative_embeds is None
    assert CosmosPolicy(policy.pipeline, torch.device("cpu"), torch.float32).negative_prompt == COSMOS_NEGATIVE_PROMPT


def test_cosmos_guidance_by_hand():
    """v_c + w (v_c - v_u): v_u = 1, v_c = 3, w = 2 -> 7, the usual form with w + 1 = 3."""
    uncond, cond = torch.tensor([1.0]), torch.tensor([3.0])
    assert cosmos_guidance(uncond, cond, 2.0).item() == 7.0
    assert guided_velocity(uncond, cond, 3.0).item() == 7.0
    uncond.requires_grad_(True)
    assert not cosmos_guidance(uncond, cond, 2.0, detach_uncond=True).requires_grad


@pytest.mark.parametrize("num_frames, cfg_scale", [(3, 1.0), (3, 4.0), (1, 4.0)])
def test_our_ode_sampler_reproduces_the_cosmos_pipeline(policy, num_frames, cfg_scale):
    """Text2World from the same noise, 3 Euler steps on Cosmos' σ: latents to float tolerance,
    decoded uint8 frames within one level of the pipeline's video (1 frame: its Text2Image)."""
    from diffusers import Cosmos2_5_PredictBasePipeline, FlowMatchEulerDiscreteScheduler

    policy = with_frames(policy, num_frames)
    start = noise(policy)
    sigmas = policy.sigmas(3, tuple(start.shape[1:]))

    class CosmosSigmasEuler(FlowMatchEulerDiscreteScheduler):
        """Euler on the given σ (shift 1 leaves them as they are) whatever the pipeline asks."""

        def set_timesteps(self, num_inference_steps=None, device=None, **kwargs):
            super().set_timesteps(sigmas=sigmas[:-1].tolist(), device=device)

    pipe = Cosmos2_5_PredictBasePipeline(
        text_encoder=policy.pipeline.text_encoder,
        tokenizer=policy.pipeline.tokenizer,
        transformer=policy.transformer,
        vae=policy.vae,
        scheduler=CosmosSigmasEuler(shift=1.0),
        safety_checker=pass_through_guardrail(),
    )
    common = dict(
        prompt=PROMPTS,
        negative_prompt=NEGATIVE,
        height=32,
        width=32,
        num_frames=num_frames,
        num_inference_steps=3,
        guidance_scale=cfg_scale,
        max_sequence_length=MAX_TOKENS,
    )
    with torch.no_grad():
        reference = pipe(latents=start.clone(), output_type="latent", **common).frames  # [B, C, F_lat, h, w]
        reference_video = pipe(latents=start.clone(), output_type="pt", **common).frames  # [B, F, 3, H, W] in [0, 1]

    cond = policy.encode_prompts(PROMPTS, with_negative=cfg_scale > 1)
    latents, log_probs, _ = sample_trajectory(policy, cond, start, [], sigmas, cfg_scale, 0.0, sde_step_mask(3, 0.0))
    # the pipeline's loop vs ours: the same math in its own order, 3 steps, Cosmos CFG gain |1 + w| + |w|
    assert_close_reordered(
        latents[:, -1], reference, length=TINY_REDUCTION, depth=3 * TINY_DEPTH, gain=abs(1 + cfg_scale) + cfg_scale
    )
    assert (latents[:, -1] - start).abs().max() > 0.1 and (log_probs == 0).all()
    video = policy.decode(latents[:, -1])
    assert video.shape == (2, num_frames, 3, 32, 32) and video.dtype == torch.uint8
    assert (video.float() - reference_video * 255).abs().max() <= 1.0


def test_velocity_is_the_text2world_forward_carries_gradients_and_split_equals_joint(tiny_cosmos_dir):
    policy = CosmosPolicy.from_pretrained(
        tiny_cosmos_dir, max_sequence_length=MAX_TOKENS, num_frames=3, negative_prompt=NEGATIVE
    )
    apply_lora(policy.transformer, LoraConfig(rank=4, alpha=8), policy.lora_target_modules)
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    latents = noise(policy)
    with torch.no_grad():
        direct = policy.transformer(
            hidden_states=latents,
            timestep=torch.tensor([0.8, 0.8]),
            encoder_hidden_states=cond.embeds,
            condition_mask=torch.zeros(2, 1, 2, 4, 4),
            padding_mask=torch.zeros(1, 1, 32, 32),
            return_dict=False,
        )[0]
    assert_close_reordered(
        policy.velocity(latents, torch.tensor(0.8), cond, 1.0), direct, length=TINY_REDUCTION, depth=TINY_DEPTH
    )  # our call path vs the transformer called directly
    sigma = torch.tensor([0.8, 0.3])
    joint = policy.velocity(latents, sigma, cond, 4.0)
    joint.square().mean().backward()
    grads = [p.grad for n, p in policy.transformer.named_parameters() if "lora_B" in n]  # B = 0 at init: A gets none
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)
    policy.cfg_batch = "split"
    # split vs joint: rounding only; Cosmos' v_c + w (v_c − v_u) has gain |1 + w| + |w| at w = 4
    assert_close_reordered(
        policy.velocity(latents, sigma, cond, 4.0, detach_uncond=True),
        joint.detach(),
        length=TINY_REDUCTION,
        depth=TINY_DEPTH,
        gain=5.0 + 4.0,
    )


def test_lora_targets_attention_and_mlp_and_export_loads_into_the_cosmos_pipeline(tiny_cosmos_dir, tmp_path):
    """Cosmos' own LoRA targets (q/k/v/out of attn1 and attn2, both MLP layers); the exported
    `lora/` loads with `Cosmos2_5_PredictBasePipeline.load_lora_weights` (CosmosLoraLoaderMixin)
    and gives our transformer's output (alpha/r = 2 survives through the metadata)."""
    from diffusers import Cosmos2_5_PredictBasePipeline

    lora = LoraConfig(rank=4, alpha=8.0)
    policy = CosmosPolicy.from_pretrained(tiny_cosmos_dir, max_sequence_length=MAX_TOKENS, num_frames=3)
    apply_lora(policy.transformer, lora, COSMOS_LORA_TARGETS)
    adapted = sorted(n.rsplit(".lora_A", 1)[0] for n, _ in policy.transformer.named_parameters() if ".lora_A." in n)
    assert adapted[:6] == [
        "transformer_blocks.0.attn1.to_k",
        "transformer_blocks.0.attn1.to_out.0",
        "transformer_blocks.0.attn1.to_q",
        "transformer_blocks.0.attn1.to_v",
        "transformer_blocks.0.attn2.to_k",
        "transformer_blocks.0.attn2.to_out.0",
    ]
    assert len(adapted) == 2 * (2 * 4 + 2)  # 2 blocks x ((attn1, attn2) x (q, k, v, out) + 2 MLP layers)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(3)
        for name, param in policy.transformer.named_parameters():
            if ".lora_B." in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=generator))
    pipe = Cosmos2_5_PredictBasePipeline.from_pretrained(tiny_cosmos_dir, safety_checker=pass_through_guardrail())
    loaded = CosmosPolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=3)
    cond = policy.encode_prompts(PROMPTS, with_negative=False)
    assert_lora_export_reproduces(
        policy, lora, tmp_path / "lora", pipe, loaded, (noise(policy), torch.tensor([0.7, 0.3]), cond, 1.0)
    )


def test_a_padding_mask_transformer_needs_torchvision(policy, monkeypatch):
    """Cosmos-Predict2.5's transformer concatenates a padding mask that diffusers resizes with
    torchvision; without it the load says what to install instead of failing mid-rollout."""
    import diffusers.utils

    pipeline = build_cosmos_pipeline("tiny", seed=0)
    pipeline.transformer.register_to_config(concat_padding_mask=True)
    monkeypatch.setattr(diffusers.utils, "is_torchvision_available", lambda: False)
    with pytest.raises(ImportError, match="torchvision"):
        CosmosPolicy(pipeline, torch.device("cpu"), torch.float32)
