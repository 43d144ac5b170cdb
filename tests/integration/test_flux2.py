"""FLUX.2 [dev] on its tiny random pipeline (the published configs shrunk), loaded from disk
through the real path: our velocity + the deterministic (ODE) kernel from the same initial noise
reproduces Flux2Pipeline's latents and images at its embedded guidance; the schedule and the
Mistral3 prompt encoding are the pipeline's; true CFG is refused; the exported LoRA loads into
Flux2Pipeline with the same velocity; the shipped recipe (shrunk) trains LoRA and a full
fine-tune 2 steps with replay parity 0, and the full fine-tune's transformer loads into the
pipeline.

The pipeline call is the one a user writes: Flux2Pipeline(prompt, guidance_scale=g), whose
latents are [B, hw/4, 128] tokens of the patchified latent; `pack_2x2` of our stored latent is
exactly those tokens (the same as FLUX.2 [klein]'s, whose policy this one extends)."""

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
from genalign.models.flux2 import Flux2Policy
from genalign.models.flux2.tiny import rendered
from genalign.preflight.load import load_config
from genalign.sampling.trajectory import initial_noise, sample_trajectory, sde_step_mask

RECIPE = "experiment/diffusion/flux2/online_grpo_clip_pickscore"
MAX_TOKENS = 48
GUIDANCE = 4.0
PROMPTS = ["a red fox in fresh snow", "two cats"]


@pytest.fixture(scope="module")
def dev(tiny_flux2_dir):
    """(policy, pipeline loaded separately from the same directory)."""
    from diffusers import Flux2Pipeline

    policy = Flux2Policy.from_pretrained(tiny_flux2_dir, max_sequence_length=MAX_TOKENS, embedded_guidance=GUIDANCE)
    return policy, Flux2Pipeline.from_pretrained(tiny_flux2_dir)


def noise(policy, height=64, width=64) -> torch.Tensor:
    return initial_noise([11, 12], [11, 12], policy.latent_shape(height, width))[0]  # [2, C, h, w]


def patchified(latents: torch.Tensor) -> torch.Tensor:
    """Our stored latent [B, C, h, w] as the pipeline's `latents=` input: [B, 4C, h/2, w/2]."""
    batch, channels, height, width = latents.shape
    return pack_2x2(latents).transpose(1, 2).reshape(batch, 4 * channels, height // 2, width // 2)


def test_ode_sampling_reproduces_the_pipeline_at_its_embedded_guidance(dev):
    policy, pipe = dev
    start = noise(policy, 64, 96)
    cond = policy.encode_prompts(PROMPTS, with_negative=False)
    sigmas = policy.sigmas(3, tuple(start.shape[1:]))
    with torch.no_grad():
        ours = sample_trajectory(policy, cond, start, None, sigmas, 1.0, 0.0, sde_step_mask(3, 0.0)).latents[:, -1]
    call = dict(
        prompt=PROMPTS,
        height=64,
        width=96,
        num_inference_steps=3,
        latents=patchified(start),
        guidance_scale=GUIDANCE,
        max_sequence_length=MAX_TOKENS,
    )
    tokens = pipe(**call, output_type="latent").images  # [2, hw/4, 4C]: its normalised, packed latent
    theirs = unpack_2x2(tokens, *start.shape[-2:])  # [2, C, h, w], our stored form
    # the pipeline's loop vs ours: the same math in its own order, 3 steps, no CFG
    assert_close_reordered(ours, theirs, length=TINY_REDUCTION, depth=3 * TINY_DEPTH, gain=1.0)
    assert (ours - start).abs().max() > 0.1  # the sample moved: not a trivially equal pair
    images = pipe(**call, output_type="pt").images  # [2, 3, 64, 96] in [0, 1]
    decoded = policy.decode(ours)
    assert decoded.dtype == torch.uint8 and decoded.shape == (2, 3, 64, 96)
    assert (decoded.float() - images * 255).abs().max() <= 1.0  # uint8 rounding of the same pixels


def test_the_embedded_guidance_reaches_the_transformer(dev, tiny_flux2_dir):
    """A different model.embedded_guidance changes the velocity (the embedding is live), and a
    missing one is refused at load: the transformer is guidance-distilled."""
    policy, _ = dev
    other = Flux2Policy.from_pretrained(tiny_flux2_dir, max_sequence_length=MAX_TOKENS, embedded_guidance=1.5)
    cond = policy.encode_prompts(PROMPTS, with_negative=False)
    args = (noise(policy), torch.tensor([0.7, 0.3]), cond, 1.0)
    with torch.no_grad():
        assert not torch.allclose(policy.velocity(*args), other.velocity(*args))
    with pytest.raises(ValueError, match="embedded_guidance"):
        Flux2Policy.from_pretrained(tiny_flux2_dir, max_sequence_length=MAX_TOKENS)


def test_schedule_is_the_pipelines_scheduler_for_the_resolution_and_steps(dev):
    from diffusers.pipelines.flux2.pipeline_flux2 import compute_empirical_mu

    policy, pipe = dev
    for height, width, steps in [(64, 64, 8), (1024, 1024, 28)]:
        shape = policy.latent_shape(height, width)
        mu = compute_empirical_mu(image_seq_len=shape[1] * shape[2] // 4, num_steps=steps)
        pipe.scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
        torch.testing.assert_close(policy.sigmas(steps, shape), pipe.scheduler.sigmas, rtol=0, atol=0)


def test_prompts_are_the_pipelines_mistral3_encoding(dev):
    policy, pipe = dev
    assert pipe.tokenizer.apply_chat_template(
        [
            {"role": "system", "content": [{"type": "text", "text": pipe.system_message}]},
            {"role": "user", "content": [{"type": "text", "text": "two cats"}]},
        ],
        tokenize=False,
    ) == rendered("two cats")
    assert rendered("two cats").startswith("<s>[SYSTEM_PROMPT]You are an AI that reasons about image descriptions.")
    assert len(pipe.text_encoder.model.language_model.layers) == 31  # holds the pipeline's layers 10, 20, 30
    cond = policy.encode_prompts(PROMPTS, with_negative=False)
    expected, _ = pipe.encode_prompt(PROMPTS, device=torch.device("cpu"), max_sequence_length=MAX_TOKENS)
    assert cond.embeds.shape == (2, MAX_TOKENS, pipe.transformer.config.joint_attention_dim)
    assert torch.equal(cond.embeds, expected)
    assert cond.negative_embeds is None


def test_true_cfg_is_refused_before_any_prompt_is_encoded(dev):
    policy, _ = dev
    with pytest.raises(ValueError, match="no true CFG"):
        policy.encode_prompts(PROMPTS, with_negative=True)
    cond = policy.encode_prompts(PROMPTS, with_negative=False)
    with pytest.raises(ValueError, match="rollout.guidance_scale=4.0"):
        policy.velocity(noise(policy), torch.tensor([0.5, 0.5]), cond, 4.0)


def test_encode_images_is_the_pipelines_normalised_latent(dev):
    policy, pipe = dev
    images = (torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 255).round().to(torch.uint8)
    latents = policy.encode_images(images)  # [2, C, 8, 8]
    with torch.no_grad():
        theirs = pipe._encode_vae_image(images.float() / 127.5 - 1.0, generator=None)  # [2, 4C, 4, 4]
    torch.testing.assert_close(patchified(latents), theirs, rtol=1e-5, atol=1e-5)


def test_exported_lora_loads_into_flux2_pipeline_with_the_same_velocity(dev, tiny_flux2_dir, tmp_path):
    from diffusers import Flux2Pipeline

    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    fresh = Flux2Policy.from_pretrained(tiny_flux2_dir, max_sequence_length=MAX_TOKENS, embedded_guidance=GUIDANCE)
    lora = LoraConfig(rank=4, alpha=8.0)
    apply_lora(fresh.transformer, lora, fresh.lora_target_modules)
    perturb_lora_b(fresh.transformer)
    pipe = Flux2Pipeline.from_pretrained(tiny_flux2_dir)
    loaded = Flux2Policy(pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, embedded_guidance=GUIDANCE)
    cond = fresh.encode_prompts(PROMPTS, with_negative=False)
    assert_lora_export_reproduces(
        fresh, lora, tmp_path / "lora", pipe, loaded, (noise(fresh), torch.tensor([0.7, 0.3]), cond, 1.0)
    )
    targeted = {name for name, _ in pipe.transformer.named_modules() if name.endswith(".lora_A")}
    assert any(name.startswith("single_transformer_blocks") for name in targeted)


def overrides(model_dir, output_dir, *extra):
    """The recipe shrunk for the tiny model (support.tiny_overrides: one process, 2 groups of 2,
    3 steps) with its SDE window in those 3 steps and its scorers off (their weights are not
    here: tiny_overrides' jpeg reward instead)."""
    return tiny_overrides(
        model_dir,
        output_dir,
        "model.max_sequence_length=16",
        "rollout.sde_window.lo=0",
        "rollout.sde_window.hi=2",
        "actor.micro_batch_size=2",
        "reward.components.pickscore=0.0",
        "reward.components.clip_score=0.0",
        "trainer.num_steps=2",
        "eval.every=0",
        "eval.at_start=false",
        *extra,
    )


def test_recipe_composes_with_flow_factorys_flux2_dev_settings():
    cfg = load_config(RECIPE, [])
    assert (cfg.model.family, cfg.model.path) == ("flux2", "black-forest-labs/FLUX.2-dev")
    assert cfg.model.embedded_guidance == 4.0 and cfg.model.max_sequence_length == 512
    assert (cfg.rollout.num_steps, cfg.rollout.guidance_scale, cfg.rollout.noise_level) == (8, 1.0, 1.0)
    assert (cfg.rollout.sde_window.size, cfg.rollout.sde_window.lo, cfg.rollout.sde_window.hi) == (1, 1, 4)
    assert (cfg.rollout.height, cfg.rollout.n, cfg.actor.lr) == (512, 16, 3.0e-4)
    assert (cfg.model.lora.rank, cfg.model.lora.alpha, len(cfg.model.lora.target_modules)) == (64, 128.0, 13)
    assert cfg.algorithm.kl_beta == 0.0 and cfg.eval.num_steps == 28
    assert (cfg.distributed.preset, cfg.distributed.resources.trainer.num_gpus) == ("fsdp2_8_ranks", 8)
    local = load_config(RECIPE, ["/base/distributed=local"])
    assert (local.distributed.training.strategy, local.distributed.resources.trainer.num_gpus) == ("none", 0)
    # two optimizer steps a round on each rank: 1 prompt group x 16 samples / 1 a micro-batch / 8
    ranks = cfg.distributed.resources.trainer.num_gpus
    assert cfg.rollout.rollout_batch_size // ranks * 16 // cfg.actor.micro_batch_size // 8 == 2
    assert dict(cfg.reward.components) == {"clip_score": 1.0, "pickscore": 0.5}
    assert cfg.reward.aggregation == "advantage_sum"


def test_lora_trains_two_steps_with_replay_parity_and_its_export_loads_into_the_pipeline(tiny_flux2_dir, tmp_path):
    from diffusers import Flux2Pipeline

    pipe = Flux2Pipeline.from_pretrained(tiny_flux2_dir)
    assert_lora_run_exports_to_the_pipeline(RECIPE, overrides(tiny_flux2_dir, tmp_path), tmp_path, pipe)


def test_full_fine_tune_trains_two_steps_and_its_transformer_loads_into_the_pipeline(tiny_flux2_dir, tmp_path):
    from diffusers import Flux2Pipeline, Flux2Transformer2DModel

    def load_pipe(transformer_dir):
        transformer = Flux2Transformer2DModel.from_pretrained(transformer_dir)
        return Flux2Pipeline.from_pretrained(tiny_flux2_dir, transformer=transformer)

    full = ("model.train_mode=full", "actor.ema.enabled=false", "eval.use_ema=false")
    assert_full_run_exports_to_the_pipeline(RECIPE, overrides(tiny_flux2_dir, tmp_path, *full), tmp_path, load_pipe)


def test_a_pixtral_processor_checkpoint_without_torchvision_is_refused_before_loading(tmp_path, monkeypatch):
    """The published checkpoint's tokenizer is a PixtralProcessor (transformers loads it only with
    torchvision): without torchvision a Hub id or a directory naming it is refused by name before
    any weight loads; the tiny pipeline's plain tokenizer needs no torchvision."""
    import json

    import diffusers.utils

    from genalign.models.flux2.policy import check_processor_backend

    monkeypatch.setattr(diffusers.utils, "is_torchvision_available", lambda: False)
    local = tmp_path / "flux2"
    local.mkdir()
    (local / "model_index.json").write_text(json.dumps({"tokenizer": ["transformers", "PixtralProcessor"]}))
    for path in ("black-forest-labs/FLUX.2-dev", local):
        with pytest.raises(ImportError, match=r"genalign\[flux2\]"):
            Flux2Policy.from_pretrained(path)
    (local / "model_index.json").write_text(json.dumps({"tokenizer": ["transformers", "TokenizersBackend"]}))
    check_processor_backend(local)
