"""SD3Policy on the tiny pipeline, loaded from disk through the real diffusers path:
tokenizers, prompt encoding, velocity (with and without batched CFG), decoding, shapes,
schedules and the loading errors."""

from __future__ import annotations

import json

import pytest
import torch
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered

from genalign.models.base import FlowPolicy
from genalign.models.config import ModelConfig
from genalign.models.sd3 import SD3Policy
from genalign.models.sd3.tiny import build_tiny_sd3_pipeline
from genalign.models.tiny_random import main
from genalign.sampling.schedules import flow_match_sigmas

MAX_TOKENS = 16
PROMPTS = ['a red sign that says "hi"', "two cats"]


@pytest.fixture(scope="module")
def policy(tiny_sd3_dir) -> SD3Policy:
    return SD3Policy.from_pretrained(tiny_sd3_dir, max_sequence_length=MAX_TOKENS)


def noise(batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 4, 8, 8, generator=torch.Generator().manual_seed(seed))  # 64x64 image


def test_round_trip_loads_the_saved_weights_and_working_tokenizers(policy):
    assert isinstance(policy, FlowPolicy)
    # an offline load of a missing repo can produce an empty tokenizer: check every one
    assert [len(t) for t in policy.tokenizers] == [514, 514, 150]
    for tokenizer in policy.tokenizers:
        ids = tokenizer("hello world", add_special_tokens=False).input_ids
        assert len(ids) >= 2 and tokenizer.unk_token_id not in ids
    fresh = build_tiny_sd3_pipeline(seed=0).transformer.state_dict()
    for name, tensor in policy.transformer.state_dict().items():
        torch.testing.assert_close(tensor, fresh[name], rtol=0, atol=0)


def test_module_cli_writes_a_loadable_pipeline(tmp_path, capsys):
    assert main(["sd3", str(tmp_path / "tiny")]) == 0
    index = json.loads((tmp_path / "tiny" / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusion3Pipeline"
    assert str(tmp_path / "tiny") in capsys.readouterr().out


def test_components_are_frozen_placed_and_typed(policy):
    assert policy.family == "sd3" and policy.scheduler_shift == 3.0
    for module in [policy.transformer, policy.vae, *policy.text_encoders]:
        assert not any(p.requires_grad for p in module.parameters())
    assert policy.vae.dtype == torch.float32 and policy.device == torch.device("cpu")


def test_bfloat16_keeps_the_vae_in_float32_and_velocity_float32(tiny_sd3_dir):
    config = ModelConfig(path=str(tiny_sd3_dir), dtype="bfloat16", device="cpu", max_sequence_length=MAX_TOKENS)
    policy = SD3Policy.from_config(config)
    assert policy.transformer.dtype == torch.bfloat16 and policy.text_encoders[2].dtype == torch.bfloat16
    assert policy.vae.dtype == torch.float32
    cond = policy.encode_prompts(PROMPTS, with_negative=False)
    assert policy.velocity(noise(), torch.full((2,), 0.5), cond, 1.0).dtype == torch.float32


def test_encode_prompts_shapes_and_empty_negative(policy):
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    assert cond.embeds.shape == (2, 77 + MAX_TOKENS, 32)  # CLIP tokens + T5 tokens, joint dim
    assert cond.pooled.shape == (2, 64)  # two CLIP projections of 32
    assert cond.negative_embeds.shape == cond.embeds.shape and cond.negative_pooled.shape == cond.pooled.shape
    assert not torch.allclose(cond.embeds[0], cond.embeds[1])
    empty = policy.encode_prompts([""], with_negative=False)
    torch.testing.assert_close(cond.negative_embeds, empty.embeds.expand(2, -1, -1))
    torch.testing.assert_close(cond.negative_pooled, empty.pooled.expand(2, -1))
    plain = policy.encode_prompts(PROMPTS, with_negative=False)
    assert plain.negative_embeds is None and plain.negative_pooled is None
    torch.testing.assert_close(plain.embeds, cond.embeds)


def forward(policy: SD3Policy, latents, sigma, embeds, pooled) -> torch.Tensor:
    """One plain transformer call with the SD3 timestep convention 1000·σ."""
    return policy.transformer(
        hidden_states=latents,
        timestep=1000 * sigma,
        encoder_hidden_states=embeds,
        pooled_projections=pooled,
        return_dict=False,
    )[0]


@torch.no_grad()
def test_velocity_without_cfg_is_the_conditional_forward(policy):
    cond = policy.encode_prompts(PROMPTS, with_negative=False)
    sigma = torch.tensor([0.9, 0.3])
    velocity = policy.velocity(noise(), sigma, cond, guidance_scale=1.0)
    assert velocity.shape == (2, 4, 8, 8) and velocity.dtype == torch.float32
    torch.testing.assert_close(velocity, forward(policy, noise(), sigma, cond.embeds, cond.pooled))
    assert not torch.allclose(velocity, policy.velocity(noise(), torch.tensor([0.5, 0.5]), cond, 1.0))
    # a scalar sigma is broadcast over the batch
    torch.testing.assert_close(
        policy.velocity(noise(), torch.tensor(0.5), cond, 1.0),
        policy.velocity(noise(), torch.tensor([0.5, 0.5]), cond, 1.0),
    )


@torch.no_grad()
def test_cfg_is_one_batched_forward_equal_to_the_manual_combination(policy):
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    sigma, scale = torch.tensor([0.8, 0.4]), 4.5
    calls = []
    hook = policy.transformer.register_forward_hook(lambda module, args, kwargs_out: calls.append(1))
    try:
        guided = policy.velocity(noise(), sigma, cond, guidance_scale=scale)
    finally:
        hook.remove()
    assert len(calls) == 1
    uncond = forward(policy, noise(), sigma, cond.negative_embeds, cond.negative_pooled)
    text = forward(policy, noise(), sigma, cond.embeds, cond.pooled)
    # one batch of 4 vs two of 2: rounding only, through the tiny transformer and CFG's |1 − w| + |w|
    assert_close_reordered(
        guided,
        uncond + scale * (text - uncond),
        length=TINY_REDUCTION,
        depth=TINY_DEPTH,
        gain=abs(1 - scale) + scale,
        scale=float(torch.cat([uncond, text]).abs().max()),
    )
    assert not torch.allclose(guided, text)


def test_cfg_without_negative_is_an_error(policy):
    cond = policy.encode_prompts(PROMPTS, with_negative=False)
    with pytest.raises(ValueError, match="with_negative=True"):
        policy.velocity(noise(), torch.tensor([0.5, 0.5]), cond, guidance_scale=4.5)


def test_velocity_carries_gradients_to_trainable_weights(policy):
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    weight = policy.transformer.proj_out.weight
    weight.requires_grad_(True)
    try:
        policy.velocity(noise(), torch.tensor([0.5, 0.5]), cond, 4.5).square().mean().backward()
        assert weight.grad is not None and weight.grad.abs().sum() > 0
    finally:
        weight.requires_grad_(False)
        weight.grad = None


def test_decode_gives_uint8_images_from_the_scaled_latents(policy):
    latents = noise()
    images = policy.decode(latents)
    assert images.shape == (2, 3, 64, 64) and images.dtype == torch.uint8
    config = policy.vae.config
    with torch.no_grad():
        pixels = policy.vae.decode(latents / config.scaling_factor + config.shift_factor).sample
    torch.testing.assert_close(images, ((pixels / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8))
    assert images.float().std() > 0


def test_latent_shape_and_sigmas(policy):
    assert policy.latent_shape(64, 64) == (4, 8, 8)
    assert policy.latent_shape(128, 64) == (4, 16, 8)
    with pytest.raises(ValueError, match="multiples of 16"):
        policy.latent_shape(72, 64)
    torch.testing.assert_close(policy.sigmas(4, (4, 8, 8)), flow_match_sigmas(4, shift=3.0))
    scheduler = policy.pipeline.scheduler
    scheduler.set_timesteps(4)  # the diffusers scheduler is the reference the schedule must reproduce
    torch.testing.assert_close(policy.sigmas(4, (4, 8, 8)), scheduler.sigmas.float())


@torch.no_grad()
def test_a_four_step_64px_sample_runs_end_to_end(policy):
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    latents, sigmas = noise(), policy.sigmas(4, (4, 8, 8))
    for step in range(4):
        latents = latents + (sigmas[step + 1] - sigmas[step]) * policy.velocity(latents, sigmas[step], cond, 4.5)
    assert torch.isfinite(latents).all()
    assert policy.decode(latents).shape == (2, 3, 64, 64)


@pytest.mark.parametrize("path", ["/no/such/model", "./missing_model", "~/missing/model", "outputs/run/model"])
def test_missing_local_path_fails_before_any_hub_call(path, monkeypatch):
    from diffusers import StableDiffusion3Pipeline

    def no_hub(*args, **kwargs):
        raise AssertionError("from_pretrained must not be reached")

    monkeypatch.setattr(StableDiffusion3Pipeline, "from_pretrained", no_hub)
    with pytest.raises(FileNotFoundError, match=r"model.path=.*no such local directory"):
        SD3Policy.from_pretrained(path)


def test_uncached_hub_id_offline_says_how_to_fix(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError) as err:
        SD3Policy.from_pretrained("genalign-tests/not-a-cached-model")
    message = str(err.value)
    assert "model.path='genalign-tests/not-a-cached-model'" in message
    assert "not cached" in message and "local directory" in message


def _lora_policy(tiny_sd3_dir, cfg_batch: str) -> SD3Policy:
    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    torch.manual_seed(0)
    policy = SD3Policy.from_pretrained(tiny_sd3_dir, max_sequence_length=MAX_TOKENS, cfg_batch=cfg_batch)
    apply_lora(policy.transformer, LoraConfig(rank=4, alpha=8), policy.lora_target_modules)
    with torch.no_grad():  # a non-zero B so the adapter's gradient reaches both LoRA factors
        for name, param in policy.transformer.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    return policy


def _lora_grads(policy: SD3Policy, detach_uncond: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    policy.transformer.zero_grad(set_to_none=True)
    velocity = policy.velocity(noise(), torch.tensor([0.8, 0.4]), cond, 4.5, detach_uncond=detach_uncond)
    velocity.square().mean().backward()
    return velocity.detach(), {n: p.grad.clone() for n, p in policy.transformer.named_parameters() if p.requires_grad}


def test_detach_uncond_keeps_the_value_and_drops_the_unconditional_gradient(tiny_sd3_dir):
    """v = v_u + w(v_c − v_u): detaching v_u leaves v unchanged and the gradient becomes the
    conditional branch's alone; split CFG (model.cfg_batch=split, v_u without autograd)
    gives the joint form's value and gradient up to fp32 rounding."""
    joint = _lora_policy(tiny_sd3_dir, "joint")
    value, through_both = _lora_grads(joint, detach_uncond=False)
    detached_value, cond_only = _lora_grads(joint, detach_uncond=True)
    assert torch.equal(value, detached_value)
    assert any(not torch.allclose(through_both[n], cond_only[n]) for n in through_both)
    split_value, split_grads = _lora_grads(_lora_policy(tiny_sd3_dir, "split"), detach_uncond=True)
    # split vs joint: the same math batched differently; gradients chain forward and backward
    assert_close_reordered(split_value, value, length=TINY_REDUCTION, depth=TINY_DEPTH, gain=abs(1 - 4.5) + 4.5)
    for name in cond_only:
        assert_close_reordered(
            split_grads[name], cond_only[name], length=TINY_REDUCTION, depth=2 * TINY_DEPTH, gain=abs(1 - 4.5) + 4.5
        )
