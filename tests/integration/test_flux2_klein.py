"""FLUX.2 [klein] on its tiny random pipeline (the published configs shrunk), loaded from disk
through the real path: our velocity + the deterministic (ODE) kernel from the same initial noise
reproduces Flux2KleinPipeline's latents and images (the distilled form without CFG, the -base
form with true CFG); the schedule and the prompt encoding are the pipeline's; the latent
normalisation round-trips; the exported LoRA loads into Flux2KleinPipeline with the same
velocity; the shipped recipe (shrunk) trains LoRA and a full fine-tune 2 steps with replay
parity 0, and the full fine-tune's transformer loads into the pipeline.

The pipeline call is the one a user writes: Flux2KleinPipeline(prompt, guidance_scale=w), whose
latents are [B, hw/4, 128] tokens of the patchified latent; `pack_2x2` of our stored latent is
exactly those tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import (
    TINY_DEPTH,
    TINY_REDUCTION,
    assert_close_reordered,
    assert_full_run_exports_to_the_pipeline,
    assert_lora_export_reproduces,
    assert_lora_run_exports_to_the_pipeline,
    perturb_lora_b,
    tiny_overrides,
)

from genalign.models.diffusers_common import pack_2x2, unpack_2x2
from genalign.models.flux2_klein import Flux2KleinPolicy
from genalign.models.flux2_klein.tiny import build_tiny_flux2_klein_pipeline
from genalign.preflight.load import load_config
from genalign.sampling.trajectory import initial_noise, sample_trajectory, sde_step_mask

RECIPE = "experiment/diffusion/flux2_klein/online_grpo_pickscore"
MAX_TOKENS = 24
PROMPTS = ["a red fox in fresh snow", "two cats"]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    """The -base form (is_distilled false: true CFG), saved and read back."""
    path = tmp_path_factory.mktemp("klein_base") / "pipeline"
    build_tiny_flux2_klein_pipeline(seed=0, is_distilled=False).save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=["distilled", "base"])
def klein(request, tiny_flux2_klein_dir, base_dir):
    """(policy, pipeline loaded separately from the same directory, directory, CFG scale)."""
    from diffusers import Flux2KleinPipeline

    directory, scale = (tiny_flux2_klein_dir, 1.0) if request.param == "distilled" else (base_dir, 4.0)
    policy = Flux2KleinPolicy.from_pretrained(directory, max_sequence_length=MAX_TOKENS)
    return policy, Flux2KleinPipeline.from_pretrained(directory), directory, scale


def noise(policy, height=64, width=64) -> torch.Tensor:
    return initial_noise([11, 12], [11, 12], policy.latent_shape(height, width))[0]  # [2, C, h, w]


def ode_sample(policy, cfg_scale: float, num_steps: int, height: int, width: int):
    start = noise(policy, height, width)
    cond = policy.encode_prompts(PROMPTS, with_negative=cfg_scale > 1)
    sigmas = policy.sigmas(num_steps, tuple(start.shape[1:]))
    with torch.no_grad():
        latents = sample_trajectory(
            policy, cond, start, None, sigmas, cfg_scale, 0.0, sde_step_mask(num_steps, 0.0)
        ).latents
    return start, latents[:, -1]  # [2, C, h, w] each


def patchified(latents: torch.Tensor) -> torch.Tensor:
    """Our stored latent [B, C, h, w] as the pipeline's `latents=` input: [B, 4C, h/2, w/2]."""
    batch, channels, height, width = latents.shape
    return pack_2x2(latents).transpose(1, 2).reshape(batch, 4 * channels, height // 2, width // 2)


def test_ode_sampling_reproduces_the_pipeline(klein):
    policy, pipe, _, cfg_scale = klein
    start, ours = ode_sample(policy, cfg_scale, num_steps=3, height=64, width=96)
    call = dict(
        prompt=PROMPTS,
        height=64,
        width=96,
        num_inference_steps=3,
        latents=patchified(start),
        guidance_scale=cfg_scale,
        max_sequence_length=MAX_TOKENS,
    )
    tokens = pipe(**call, output_type="latent").images  # [2, 4C, h/2, w/2], de-normalised and unpatchified
    theirs = torch.stack([ours_form(policy, latent) for latent in tokens])
    # the pipeline's loop vs ours: the same math in its own order, 3 steps, CFG gain |1 − w| + |w|
    assert_close_reordered(
        ours, theirs, length=TINY_REDUCTION, depth=3 * TINY_DEPTH, gain=abs(1 - cfg_scale) + cfg_scale
    )
    assert (ours - start).abs().max() > 0.1  # the sample moved: not a trivially equal pair
    images = pipe(**call, output_type="pt").images  # [2, 3, 64, 96] in [0, 1]
    decoded = policy.decode(ours)
    assert decoded.dtype == torch.uint8 and decoded.shape == (2, 3, 64, 96)
    assert (decoded.float() - images * 255).abs().max() <= 1.0  # uint8 rounding of the same pixels


def ours_form(policy, vae_latent: torch.Tensor) -> torch.Tensor:
    """The pipeline's `output_type="latent"` (the VAE's own latent [C', h, w], after its
    de-normalisation and unpatchify) mapped back into our normalised stored form."""
    from genalign.models.flux2_klein.policy import vae_to_normalised

    return vae_to_normalised(policy.vae, vae_latent[None])[0]


def test_schedule_is_the_pipelines_scheduler_for_the_resolution_and_steps(klein):
    from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu

    policy, pipe, _, _ = klein
    for height, width, steps in [(64, 64, 4), (128, 256, 10), (1024, 1024, 28), (2048, 2048, 4)]:
        shape = policy.latent_shape(height, width)
        mu = compute_empirical_mu(image_seq_len=shape[1] * shape[2] // 4, num_steps=steps)
        pipe.scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
        torch.testing.assert_close(policy.sigmas(steps, shape), pipe.scheduler.sigmas, rtol=0, atol=0)
    assert not torch.equal(policy.sigmas(4, (4, 8, 8)), policy.sigmas(8, (4, 8, 8))[::2])  # μ depends on N


def test_prompts_are_the_pipelines_qwen3_encoding(klein):
    policy, pipe, _, _ = klein
    rendered = pipe.tokenizer.apply_chat_template(
        [{"role": "user", "content": "two cats"}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert rendered == "<|im_start|>user\ntwo cats<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert len(pipe.text_encoder.model.layers) == 28  # holds the pipeline's layers 9, 18, 27
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    expected, _ = pipe.encode_prompt(PROMPTS, device=torch.device("cpu"), max_sequence_length=MAX_TOKENS)
    assert cond.embeds.shape == (2, MAX_TOKENS, pipe.transformer.config.joint_attention_dim)
    assert torch.equal(cond.embeds, expected)
    empty, _ = pipe.encode_prompt([""] * 2, device=torch.device("cpu"), max_sequence_length=MAX_TOKENS)
    assert torch.equal(cond.negative_embeds, empty)


def test_encode_images_is_the_pipelines_normalised_latent_and_decode_inverts_it(klein):
    policy, pipe, _, _ = klein
    images = (torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 255).round().to(torch.uint8)
    latents = policy.encode_images(images)  # [2, C, 8, 8]
    with torch.no_grad():
        theirs = pipe._encode_vae_image(images.float() / 127.5 - 1.0, generator=None)  # [2, 4C, 4, 4]
    torch.testing.assert_close(patchified(latents), theirs, rtol=1e-5, atol=1e-5)
    roundtrip = unpack_2x2(pack_2x2(latents), 8, 8)
    assert torch.equal(roundtrip, latents)
    pixels = policy.decode_pixels(latents.requires_grad_())
    pixels.mean().backward()
    assert latents.grad is not None and latents.grad.abs().sum() > 0  # reward feedback reaches the latents


def test_the_distilled_form_refuses_cfg(tiny_flux2_klein_dir):
    policy = Flux2KleinPolicy.from_pretrained(tiny_flux2_klein_dir, max_sequence_length=MAX_TOKENS)
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    with pytest.raises(ValueError, match="step-distilled"):
        policy.velocity(noise(policy), torch.tensor([0.5, 0.5]), cond, 4.0)


def test_exported_lora_loads_into_flux2_klein_pipeline_with_the_same_velocity(klein, tmp_path):
    from diffusers import Flux2KleinPipeline

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    policy, _, directory, _ = klein
    fresh = Flux2KleinPolicy.from_pretrained(directory, max_sequence_length=MAX_TOKENS)
    lora = LoraConfig(rank=4, alpha=8.0)
    apply_lora(fresh.transformer, lora, fresh.lora_target_modules)
    perturb_lora_b(fresh.transformer)
    pipe = Flux2KleinPipeline.from_pretrained(directory)
    loaded = Flux2KleinPolicy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS)
    cond = fresh.encode_prompts(PROMPTS, with_negative=False)
    assert_lora_export_reproduces(
        fresh, lora, tmp_path / "lora", pipe, loaded, (noise(fresh), torch.tensor([0.7, 0.3]), cond, 1.0)
    )
    targeted = {name for name, _ in pipe.transformer.named_modules() if name.endswith(".lora_A")}
    assert any(name.startswith("single_transformer_blocks") for name in targeted)


def overrides(model_dir, output_dir, *extra):
    return tiny_overrides(
        model_dir,
        output_dir,
        "model.max_sequence_length=16",
        "rollout.num_steps=3",
        "rollout.sde_window.lo=0",
        "rollout.sde_window.hi=2",
        "rollout.n=2",
        "rollout.rollout_batch_size=2",
        "rollout.sample_batch_size=2",
        "actor.micro_batch_size=2",
        "actor.gradient_accumulation_steps=1",
        "reward.components.pickscore=0.0",
        "trainer.num_steps=2",
        "eval.every=0",
        "eval.at_start=false",
        *extra,
    )


def test_recipe_composes_with_flow_factorys_klein_settings():
    cfg = load_config(RECIPE, [])
    assert (cfg.model.family, cfg.model.path) == ("flux2_klein", "black-forest-labs/FLUX.2-klein-9B")
    assert cfg.model.embedded_guidance is None and cfg.model.max_sequence_length == 512
    assert (cfg.rollout.num_steps, cfg.rollout.guidance_scale, cfg.rollout.noise_level) == (4, 1.0, 0.5)
    assert (cfg.rollout.sde_window.size, cfg.rollout.sde_window.lo, cfg.rollout.sde_window.hi) == (1, 1, 3)
    assert (cfg.rollout.height, cfg.rollout.n, cfg.actor.lr) == (384, 16, 3.0e-4)
    assert (cfg.model.lora.rank, cfg.model.lora.alpha, len(cfg.model.lora.target_modules)) == (64, 128.0, 13)
    assert cfg.algorithm.kl_beta == 0.0 and cfg.eval.num_steps == 10
    # two optimizer steps a round: 1 prompt x 16 samples / 1 a micro-batch / 8
    assert 16 // cfg.actor.micro_batch_size // cfg.actor.gradient_accumulation_steps == 2
    assert dict(cfg.reward.components) == {"pickscore": 1.0}


def test_lora_trains_two_steps_with_replay_parity_and_its_export_loads_into_the_pipeline(
    tiny_flux2_klein_dir, tmp_path
):
    from diffusers import Flux2KleinPipeline

    pipe = Flux2KleinPipeline.from_pretrained(tiny_flux2_klein_dir)
    assert_lora_run_exports_to_the_pipeline(RECIPE, overrides(tiny_flux2_klein_dir, tmp_path), tmp_path, pipe)


def test_full_fine_tune_trains_two_steps_and_its_transformer_loads_into_the_pipeline(tiny_flux2_klein_dir, tmp_path):
    from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel

    def load_pipe(transformer_dir):
        transformer = Flux2Transformer2DModel.from_pretrained(transformer_dir)
        return Flux2KleinPipeline.from_pretrained(tiny_flux2_klein_dir, transformer=transformer)

    full = ("model.train_mode=full", "actor.ema.enabled=false", "eval.use_ema=false")
    assert_full_run_exports_to_the_pipeline(
        RECIPE, overrides(tiny_flux2_klein_dir, tmp_path, *full), tmp_path, load_pipe
    )
