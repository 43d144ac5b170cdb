"""Wan 2.2 through `WanPolicy` on tiny pipelines built from its published configs
(`genalign/models/wan/architectures/`, shrunk in width and depth by `models/wan/tiny.py`):
T2V-A14B's two experts (transformer = high noise, transformer_2 = low noise, boundary_ratio
0.875) and TI2V-5B's dense model with its 48-channel VAE and per-token timesteps.

The central checks: our velocity + Euler ODE kernel reproduce `WanPipeline.__call__` (run with a
FlowMatchEulerDiscreteScheduler of the same shift) for the same noise, with each step on the
expert the pipeline picks and the low-noise steps at `guidance_scale_2`; a batch whose samples
sit on different sides of the boundary (replay) runs each expert on its own rows; which experts
train (`model.experts`); each expert's exported LoRA loads with `WanPipeline.load_lora_weights`
(`load_into_transformer_2` for the low-noise one)."""

from __future__ import annotations

import pytest
import torch
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered, record_timesteps

from genalign.models.config import LoraConfig
from genalign.models.experts import DenoiserExperts, denoiser_parts, part_state, trained_components
from genalign.models.wan.policy import WanPolicy
from genalign.models.wan.tiny import build_tiny_wan22_a14b_pipeline
from genalign.sampling.trajectory import sample_trajectory, sde_step_mask
from genalign.weights.lora import apply_lora, export_lora_for_diffusers, trainable_state_dict

MAX_TOKENS = 16
NUM_FRAMES = 3  # the tiny VAEs' temporal factor is 2: 3 frames = 2 latent frames
PROMPTS = ["a red car driving", "two cats"]
FORMS = {  # form: (side in pixels, steps, CFG, low-noise CFG)
    "a14b": (32, 4, 5.0, 3.0),
    "ti2v": (64, 3, 5.0, None),  # 16 pixels a latent: 64 px = 4 latents = 2 patches a side
}


@pytest.fixture(scope="module")
def directories(tiny_wan22_dirs) -> dict:
    return tiny_wan22_dirs


def load(directory, low_noise_guidance_scale=None, **options) -> WanPolicy:
    return WanPolicy.from_pretrained(
        directory,
        max_sequence_length=MAX_TOKENS,
        num_frames=NUM_FRAMES,
        low_noise_guidance_scale=low_noise_guidance_scale,
        **options,
    )


def noise(policy: WanPolicy, side: int, batch: int = 2, seed: int = 0) -> torch.Tensor:
    shape = policy.latent_shape(side, side)
    return torch.randn(batch, *shape, generator=torch.Generator().manual_seed(seed))  # [B, C, F_lat, h, w]


def adapted(directory, lora: LoraConfig, seed: int | None = None, **options) -> WanPolicy:
    """A policy with an adapter on each trained expert, as training/setup.py:build_policy applies
    it; with `seed`, the adapters' B matrices random (else 0: the adapter starts as a no-op)."""
    policy = load(directory, **options)
    for part in denoiser_parts(policy.transformer).values():
        apply_lora(part, lora, policy.lora_target_modules)
    if seed is not None:
        with torch.no_grad():
            generator = torch.Generator().manual_seed(seed)
            for name, param in policy.transformer.named_parameters():
                if ".lora_B." in name:
                    param.copy_(0.1 * torch.randn(param.shape, generator=generator))
    return policy


@pytest.mark.parametrize("form", sorted(FORMS))
def test_our_ode_sampler_reproduces_the_wan_2_2_pipeline_step_by_step(directories, form):
    """Same noise, Euler steps, CFG 5 (A14B: 3 on the low-noise steps, its guidance_scale_2):
    latents to float tolerance, decoded frames within one level, and every step on the same
    expert at the same timestep as the pipeline's own loop."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline

    side, steps, scale, low = FORMS[form]
    policy = load(directories[form], low)
    pipe = WanPipeline.from_pretrained(directories[form])
    pipe.scheduler = FlowMatchEulerDiscreteScheduler(shift=policy.scheduler_shift)
    start = noise(policy, side)
    common = dict(
        prompt=PROMPTS,
        height=side,
        width=side,
        num_frames=NUM_FRAMES,
        num_inference_steps=steps,
        guidance_scale=scale,
        max_sequence_length=MAX_TOKENS,
        **({"guidance_scale_2": low} if low else {}),
    )
    experts = {n: getattr(pipe, n) for n in ("transformer", "transformer_2") if getattr(pipe, n) is not None}
    theirs_calls, handles = record_timesteps(experts)
    with torch.no_grad():
        reference = pipe(latents=start.clone(), output_type="latent", **common).frames  # [B, C, F_lat, h, w]
    for handle in handles:
        handle.remove()
    with torch.no_grad():
        reference_video = pipe(latents=start.clone(), output_type="pt", **common).frames  # [B, F, 3, H, W]

    ours_modules = dict(denoiser_parts(policy.transformer)) if form == "a14b" else {"transformer": policy.transformer}
    ours_calls, handles = record_timesteps(ours_modules)
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    sigmas = policy.sigmas(steps, tuple(start.shape[1:]))
    latents, log_probs, _ = sample_trajectory(policy, cond, start, [], sigmas, scale, 0.0, sde_step_mask(steps, 0.0))
    for handle in handles:
        handle.remove()
    # the pipeline calls the expert twice a step (conditional, then unconditional), ours once (joint CFG)
    assert ours_calls == theirs_calls[::2] and theirs_calls[::2] == theirs_calls[1::2]
    if form == "a14b":  # the schedule crosses the boundary: both experts ran
        assert {name for name, _ in ours_calls} == {"transformer", "transformer_2"}
    # the pipeline's loop vs ours: the same math in its own order, `steps` transformer calls, CFG <= 5
    assert_close_reordered(
        latents[:, -1], reference, length=TINY_REDUCTION, depth=steps * TINY_DEPTH, gain=2 * scale - 1
    )
    assert (log_probs == 0).all() and (latents[:, -1] - start).abs().max() > 0.1
    video = policy.decode(latents[:, -1])
    assert video.shape == (2, NUM_FRAMES, 3, side, side) and video.dtype == torch.uint8
    assert (video.float() - reference_video * 255).abs().max() <= 1.0


def test_the_boundary_is_the_pipelines_comparison_and_mixed_batches_split_by_expert(directories):
    """t = 1000·σ >= boundary_ratio · 1000 runs the high-noise expert (875 exactly included);
    a batch with samples on both sides equals each sample's own velocity, bit for bit."""
    policy = load(directories["a14b"], 3.0)
    assert policy.boundary_timestep == 875.0 and isinstance(policy.transformer, DenoiserExperts)
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    latents = noise(policy, 32)
    calls, handles = record_timesteps(denoiser_parts(policy.transformer))
    with torch.no_grad():
        policy.velocity(latents, torch.tensor([0.875, 0.875]), cond, 5.0)
        policy.velocity(latents, torch.tensor([0.8749, 0.8749]), cond, 5.0)
        mixed = policy.velocity(latents, torch.tensor([0.9, 0.4]), cond, 5.0)
        alone = [
            policy.velocity(latents[i : i + 1], torch.tensor([s]), cond.index([i]), 5.0)
            for i, s in [(0, 0.9), (1, 0.4)]
        ]
    for handle in handles:
        handle.remove()
    assert [name for name, _ in calls[:2]] == ["transformer", "transformer_2"]
    assert calls[2:4] == [("transformer", [900.0]), ("transformer_2", [400.0])]
    assert torch.equal(mixed, torch.cat(alone))
    # the low-noise steps' CFG scale: 3 differs from 5 there and only there
    with torch.no_grad():
        at_five = WanPolicy(
            policy.pipeline, torch.device("cpu"), torch.float32, MAX_TOKENS, num_frames=NUM_FRAMES
        ).velocity(latents, torch.tensor([0.9, 0.4]), cond, 5.0)
    assert torch.equal(at_five[0], mixed[0]) and not torch.allclose(at_five[1], mixed[1])


def test_expand_timesteps_gives_the_transformer_one_timestep_per_latent_token(directories):
    policy = load(directories["ti2v"])
    assert policy.expand_timesteps and policy.boundary_timestep is None
    assert policy.latent_shape(64, 64) == (48, 2, 4, 4)  # z_dim 48, 16 pixels a latent
    with pytest.raises(ValueError, match="multiples of 32"):
        policy.latent_shape(48, 48)
    seen = []
    handle = policy.transformer.register_forward_pre_hook(
        lambda _m, _a, kwargs: seen.append(kwargs["timestep"].shape), with_kwargs=True
    )
    with torch.no_grad():
        policy.velocity(noise(policy, 64), torch.tensor([0.5, 0.25]), policy.encode_prompts(PROMPTS, False), 1.0)
    handle.remove()
    assert seen == [torch.Size([2, 2 * 2 * 2])]  # [B, F_lat · h/2 · w/2]


@pytest.mark.parametrize(
    ("experts", "trained"),
    [("both", {"transformer", "transformer_2"}), ("high_noise", {"transformer"}), ("low_noise", {"transformer_2"})],
)
def test_model_experts_picks_which_experts_take_an_adapter(directories, experts, trained):
    policy = adapted(directories["a14b"], LoraConfig(rank=2, alpha=4), experts=experts)
    assert set(denoiser_parts(policy.transformer)) == trained
    assert trained_components(experts, ("transformer", "transformer_2")) == tuple(sorted(trained))
    names = trainable_state_dict(policy.transformer)
    assert names and {name.split(".")[0] for name in names} == trained  # what the weight sync and checkpoints move
    assert all("lora_" in name for name in names)


def test_each_experts_exported_lora_loads_into_wan_pipeline(directories, tmp_path):
    """Each expert's adapter in its own folder: `load_lora_weights(dir)` for transformer,
    `load_lora_weights(dir, load_into_transformer_2=True)` for transformer_2; the loaded
    pipeline's experts give ours."""
    from diffusers import WanPipeline

    lora = LoraConfig(rank=4, alpha=8.0)  # alpha != r: the scale 2 must survive export
    policy = adapted(directories["a14b"], lora, seed=3)
    state = trainable_state_dict(policy.transformer)
    pipe = WanPipeline.from_pretrained(directories["a14b"])
    inputs = dict(
        hidden_states=noise(policy, 32),
        timestep=torch.tensor([700.0, 300.0]),
        encoder_hidden_states=torch.randn(2, MAX_TOKENS, 32, generator=torch.Generator().manual_seed(1)),
        return_dict=False,
    )
    for name, part in denoiser_parts(policy.transformer).items():
        out_dir = export_lora_for_diffusers(
            part,
            tmp_path / name,
            lora,
            policy.diffusers_pipeline,
            trainable_state=part_state(state, policy.transformer, name),
        )
        with torch.no_grad():
            base = getattr(pipe, name)(**inputs)[0]
            pipe.load_lora_weights(out_dir, load_into_transformer_2=name == "transformer_2")
            loaded = getattr(pipe, name)(**inputs)[0]
            ours = part(**inputs)[0]
        assert_close_reordered(loaded, ours, length=TINY_REDUCTION, depth=TINY_DEPTH)  # diffusers' LoRA path vs peft's
        assert (loaded - base).abs().max() > 1e-3


def test_expert_options_on_a_checkpoint_without_experts_and_a_second_expert_without_boundary_are_refused(directories):
    with pytest.raises(ValueError, match="no transformer_2"):
        load(directories["ti2v"], experts="low_noise")
    with pytest.raises(ValueError, match="no transformer_2"):
        load(directories["ti2v"], low_noise_guidance_scale=3.0)
    pipeline = build_tiny_wan22_a14b_pipeline(seed=0)
    pipeline.register_to_config(boundary_ratio=None)
    with pytest.raises(ValueError, match="boundary_ratio"):
        WanPolicy(pipeline, torch.device("cpu"), torch.float32)


def test_a_step_on_a_frozen_expert_still_backpropagates_a_zero_gradient_to_the_trained_one(directories):
    """model.experts=high_noise and a low-noise step: the loss reaches the trained expert's
    adapter with a zero gradient (every backward touches every trained weight, so ranks whose
    samples used different experts reduce the same gradients); no tie without autograd."""
    policy = adapted(directories["a14b"], LoraConfig(rank=2, alpha=4), experts="high_noise")
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    latents = noise(policy, 32)
    with torch.no_grad():
        plain = policy.velocity(latents, torch.tensor([0.4, 0.3]), cond, 5.0)
    value = policy.velocity(latents, torch.tensor([0.4, 0.3]), cond, 5.0)
    assert torch.equal(value.detach(), plain)
    value.square().mean().backward()
    grads = [p.grad for p in policy.transformer.parameters() if p.requires_grad]
    assert grads and all(g is not None and not g.any() for g in grads)


def test_the_weight_sync_moves_both_experts(directories):
    """What the Ray engine sends its workers (`trainable_state_dict` of the trained module) holds
    both experts' adapters; loaded into a fresh policy as a worker loads it
    (`load_trainable_state_dict`), the fingerprints agree and both experts predict as the trainer's."""
    from genalign.weights.lora import load_trainable_state_dict, state_fingerprint

    lora = LoraConfig(rank=2, alpha=4)
    trainer, worker = adapted(directories["a14b"], lora, seed=5), adapted(directories["a14b"], lora)
    state = trainable_state_dict(trainer.transformer)
    assert {name.split(".")[0] for name in state if ".lora_B." in name} == {"transformer", "transformer_2"}
    load_trainable_state_dict(worker.transformer, state)
    assert state_fingerprint(trainable_state_dict(worker.transformer)) == state_fingerprint(state)
    cond = trainer.encode_prompts(PROMPTS, with_negative=True)
    latents = noise(trainer, 32)
    with torch.no_grad():
        for sigma in ([0.95, 0.95], [0.3, 0.3]):  # one step on each expert
            sigmas = torch.tensor(sigma)
            assert torch.equal(
                trainer.velocity(latents, sigmas, cond, 5.0), worker.velocity(latents, sigmas, cond, 5.0)
            )


@pytest.mark.slow
def test_the_real_shapes_have_the_names_parameter_counts():
    """Built on the meta device (no memory) from the architecture files: each A14B expert is 14.3 B
    parameters (the "A14B": 14 B active a step, 28.6 B in all) and TI2V-5B's transformer 5.0 B."""
    from genalign.models.wan.tiny import build_wan_pipeline

    a14b = build_wan_pipeline("wan2.2-t2v-a14b", device="meta", dtype=torch.bfloat16)
    for expert in (a14b.transformer, a14b.transformer_2):
        assert sum(p.numel() for p in expert.parameters()) == 14_288_491_584
    assert a14b.config.boundary_ratio == 0.875 and a14b.scheduler.config.flow_shift == 3.0
    ti2v = build_wan_pipeline("wan2.2-ti2v-5b", device="meta", dtype=torch.bfloat16)
    assert sum(p.numel() for p in ti2v.transformer.parameters()) == 4_999_787_712
    assert ti2v.config.expand_timesteps and ti2v.vae.config.z_dim == 48 and ti2v.scheduler.config.flow_shift == 5.0
