"""FLUX and Qwen-Image policies against their own diffusers pipelines on the tiny models, loaded
from disk through the real path: our velocity + the deterministic (ODE) kernel from the same
initial noise reproduces the pipeline's latents and images for the same steps, with and without
true CFG; schedules, shapes, tokenizers, gradients and CFG batching forms.

Each family's pipeline call is the one a user would write: FluxPipeline(guidance_scale=3.5)
(the embedded guidance), with `true_cfg_scale` + negative_prompt="" for true CFG;
QwenImagePipeline(true_cfg_scale=w, negative_prompt=" ")."""

from __future__ import annotations

import json

import pytest
import torch
from support import (
    TINY_DEPTH,
    TINY_REDUCTION,
    assert_close_reordered,
    assert_lora_export_reproduces,
    perturb_lora_b,
)
from support import ode_sample as shared_ode_sample

from genalign.models.base import FlowPolicy
from genalign.models.diffusers_common import pack_2x2, unpack_2x2
from genalign.models.flux import FluxPolicy
from genalign.models.qwen_image import QwenImagePolicy
from genalign.models.tiny_random import QWEN_TEMPLATE, main
from genalign.sampling.trajectory import initial_noise

MAX_TOKENS = 24
PROMPTS = ['a red sign that says "hi"', "two cats"]
GUIDANCE = 3.5
"""FLUX.1-dev's embedded guidance (FluxPipeline's default guidance_scale)."""


@pytest.fixture(scope="module", params=["flux", "qwen_image"])
def family(request, tiny_flux_dir, tiny_qwen_image_dir):
    """(policy, pipeline loaded separately from the same directory, directory)."""
    from diffusers import FluxPipeline, QwenImagePipeline

    if request.param == "flux":
        policy = FluxPolicy.from_pretrained(tiny_flux_dir, max_sequence_length=MAX_TOKENS, embedded_guidance=GUIDANCE)
        return policy, FluxPipeline.from_pretrained(tiny_flux_dir), tiny_flux_dir
    policy = QwenImagePolicy.from_pretrained(tiny_qwen_image_dir, max_sequence_length=MAX_TOKENS)
    return policy, QwenImagePipeline.from_pretrained(tiny_qwen_image_dir), tiny_qwen_image_dir


def pipeline_kwargs(policy, cfg_scale: float) -> dict:
    """The pipeline arguments that mean what our (rollout.guidance_scale, model config) mean."""
    kwargs = dict(max_sequence_length=MAX_TOKENS)
    if policy.family == "flux":
        kwargs["guidance_scale"] = GUIDANCE
    if cfg_scale > 1:
        negative = " " if policy.family == "qwen_image" else ""  # qwen_image.NEGATIVE_PROMPT
        kwargs.update(true_cfg_scale=cfg_scale, negative_prompt=[negative] * len(PROMPTS))
    return kwargs


def noise(policy, height=64, width=64) -> torch.Tensor:
    return initial_noise([11, 12], [11, 12], policy.latent_shape(height, width))[0]  # [2, C, h, w]


def ode_sample(policy, cfg_scale: float, num_steps: int, height=64, width=64) -> tuple[torch.Tensor, torch.Tensor]:
    """Our sampler: velocity + the ODE kernel (noise_level 0) from the test noise."""
    cond = policy.encode_prompts(PROMPTS, with_negative=cfg_scale > 1)
    return shared_ode_sample(policy, cond, height, width, cfg_scale, num_steps)  # [2, C, h, w] each


@pytest.mark.parametrize("cfg_scale", [1.0, 4.0])
def test_ode_sampling_reproduces_the_pipeline(family, cfg_scale):
    policy, pipe, _ = family
    start, ours = ode_sample(policy, cfg_scale, num_steps=3, height=64, width=96)
    generator = torch.Generator().manual_seed(0)
    packed = pipe(
        PROMPTS,
        height=64,
        width=96,
        num_inference_steps=3,
        latents=pack_2x2(start),
        output_type="latent",
        generator=generator,
        **pipeline_kwargs(policy, cfg_scale),
    ).images  # [2, N, 4C]
    theirs = unpack_2x2(packed.reshape(2, -1, packed.shape[-1]), 8, 12)
    # the pipeline's loop vs ours: the same math in its own order, 3 steps, CFG gain |1 − w| + |w|
    assert_close_reordered(
        ours, theirs, length=TINY_REDUCTION, depth=3 * TINY_DEPTH, gain=abs(1 - cfg_scale) + cfg_scale
    )
    assert (ours - start).abs().max() > 0.1  # the sample moved: not a trivially equal pair
    images = pipe(
        PROMPTS,
        height=64,
        width=96,
        num_inference_steps=3,
        latents=pack_2x2(start),
        output_type="pt",
        **pipeline_kwargs(policy, cfg_scale),
    ).images  # [2, 3, 64, 96] in [0, 1]
    decoded = policy.decode(ours)
    assert decoded.dtype == torch.uint8 and decoded.shape == (2, 3, 64, 96)
    assert (decoded.float() - images * 255).abs().max() <= 1.0  # uint8 rounding of the same pixels


def test_schedule_is_the_pipelines_scheduler_for_the_resolution(family):
    policy, pipe, _ = family
    import numpy as np
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    for height, width, steps in [(64, 64, 4), (128, 256, 10)]:
        shape = policy.latent_shape(height, width)
        config = pipe.scheduler.config
        mu = calculate_shift(
            shape[1] * shape[2] // 4,
            config.base_image_seq_len,
            config.max_image_seq_len,
            config.base_shift,
            config.max_shift,
        )
        pipe.scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
        torch.testing.assert_close(policy.sigmas(steps, shape), pipe.scheduler.sigmas, rtol=0, atol=0)
    small, large = policy.latent_shape(64, 64), policy.latent_shape(512, 512)
    assert not torch.equal(policy.sigmas(4, small), policy.sigmas(4, large))  # more tokens, more shift


def test_loads_frozen_with_working_tokenizers(family):
    policy, pipe, _ = family
    assert isinstance(policy, FlowPolicy)
    for module in [policy.transformer, policy.vae, *policy.text_encoders]:
        assert not any(p.requires_grad for p in module.parameters())
    assert policy.vae.dtype == torch.float32
    tokenizers = [pipe.tokenizer, pipe.tokenizer_2] if policy.family == "flux" else [pipe.tokenizer]
    assert [len(t) for t in tokenizers] == ([514, 150] if policy.family == "flux" else [362])
    for tokenizer in tokenizers:
        ids = tokenizer("hello world", add_special_tokens=False).input_ids
        assert len(ids) >= 2 and (tokenizer.unk_token_id is None or tokenizer.unk_token_id not in ids)
    fresh = type(pipe).from_pretrained(family[2]).transformer.state_dict()
    for name, tensor in policy.transformer.state_dict().items():
        torch.testing.assert_close(tensor, fresh[name], rtol=0, atol=0)


def test_qwen_template_system_turn_is_the_34_dropped_tokens(tiny_qwen_image_dir):
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline.from_pretrained(tiny_qwen_image_dir)
    system_turn = QWEN_TEMPLATE.split("{}")[0]
    assert pipe.prompt_template_encode == QWEN_TEMPLATE
    assert len(pipe.tokenizer(system_turn).input_ids) == pipe.prompt_template_encode_start_idx == 34


def test_encode_prompts_shapes_and_negative(family):
    policy, _, _ = family
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    assert cond.negative_embeds.shape == cond.embeds.shape
    assert not torch.allclose(cond.embeds[0], cond.embeds[1])
    if policy.family == "qwen_image":  # padded to the longest prompt (the budget caps it); the mask marks real tokens
        lengths = cond.mask.sum(1)
        assert cond.mask.shape == cond.embeds.shape[:2] and 0 < lengths.min() < lengths.max() <= MAX_TOKENS
        assert cond.embeds.shape[1] == max(int(lengths.max()), int(cond.negative_mask.sum(1).max()))
        assert torch.all(cond.embeds[cond.mask == 0] == 0)
        assert int(cond.negative_mask[0].sum()) == 6  # " " + "<|im_end|>\n<|im_start|>assistant\n"
        alone = policy.encode_prompts(PROMPTS[:1], with_negative=False)  # a batch of its own: its own length
        assert alone.embeds.shape[1] == int(lengths[0])
    else:
        assert cond.embeds.shape[:2] == (2, MAX_TOKENS)
        assert cond.pooled.shape == (2, 16) and cond.mask is None
    plain = policy.encode_prompts(PROMPTS, with_negative=False)
    assert plain.negative_embeds is None
    torch.testing.assert_close(plain.embeds, cond.embeds)


def test_latent_shape_and_size_errors(family):
    policy, _, _ = family
    assert policy.latent_shape(64, 96) == (4, 8, 12)
    with pytest.raises(ValueError, match="multiples of 16"):
        policy.latent_shape(72, 64)


def test_split_cfg_equals_joint_and_detach_drops_the_unconditional_gradient(family):
    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora, has_adapter

    policy, _, _ = family
    if not has_adapter(policy.transformer):
        apply_lora(policy.transformer, LoraConfig(rank=2, alpha=4), policy.lora_target_modules)
    with torch.no_grad():
        for name, param in policy.transformer.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    cond = policy.encode_prompts(PROMPTS, with_negative=True)
    start, sigma = noise(policy), torch.tensor([0.8, 0.4])

    def run(cfg_batch, detach):
        policy.cfg_batch = cfg_batch
        policy.transformer.zero_grad(set_to_none=True)
        value = policy.velocity(start, sigma, cond, 4.0, detach_uncond=detach)
        # a fixed random projection: Qwen-Image's norm rescale makes ‖v‖² blind to v_u
        (value * torch.randn(value.shape, generator=torch.Generator().manual_seed(5))).sum().backward()
        # the last Qwen-Image block's text-stream output is discarded: its text LoRA gets no gradient
        return value.detach(), {
            n: (torch.zeros_like(p) if p.grad is None else p.grad.clone())
            for n, p in policy.transformer.named_parameters()
            if p.requires_grad
        }

    try:
        value, both = run("joint", False)
        detached, cond_only = run("joint", True)
        split, split_grads = run("split", True)
    finally:
        policy.cfg_batch = "joint"
        with torch.no_grad():
            for name, param in policy.transformer.named_parameters():
                if "lora_B" in name:
                    param.zero_()
    assert torch.equal(value, detached)
    assert any(not torch.allclose(both[n], cond_only[n]) for n in both)
    # split vs joint: the same math batched differently (rounding only), CFG gain |1 − w| + |w| at w = 4
    assert_close_reordered(split, value, length=TINY_REDUCTION, depth=TINY_DEPTH, gain=3.0 + 4.0)
    for name in cond_only:
        assert_close_reordered(
            split_grads[name], cond_only[name], length=TINY_REDUCTION, depth=2 * TINY_DEPTH, gain=3.0 + 4.0
        )


def test_flux_guidance_embedding_must_match_the_model(tiny_flux_dir):
    with pytest.raises(ValueError, match="model.embedded_guidance"):
        FluxPolicy.from_pretrained(tiny_flux_dir)  # dev form without a guidance value


def test_qwen_image_refuses_an_embedded_guidance(tiny_qwen_image_dir):
    with pytest.raises(ValueError, match="no guidance embedding"):
        QwenImagePolicy.from_pretrained(tiny_qwen_image_dir, embedded_guidance=3.5)


@pytest.mark.parametrize("name", ["flux", "qwen_image"])
def test_module_cli_writes_a_loadable_pipeline(name, tmp_path):
    assert main([name, str(tmp_path / name)]) == 0
    index = json.loads((tmp_path / name / "model_index.json").read_text())
    assert index["_class_name"] == {"flux": "FluxPipeline", "qwen_image": "QwenImagePipeline"}[name]


def test_exported_lora_loads_into_the_familys_pipeline_with_the_same_output(family, tmp_path):
    """Export with the shared exporter; `<Pipeline>.load_lora_weights` on a fresh pipeline gives
    a transformer whose velocity equals ours (alpha/r = 2 survives through the metadata)."""
    from genalign.models.config import LoraConfig
    from genalign.weights.lora import apply_lora

    policy, _, directory = family
    fresh = type(policy).from_pretrained(
        directory, max_sequence_length=MAX_TOKENS, embedded_guidance=policy.embedded_guidance
    )
    lora = LoraConfig(rank=4, alpha=8.0)
    apply_lora(fresh.transformer, lora, fresh.lora_target_modules)
    perturb_lora_b(fresh.transformer)
    import diffusers

    pipe = getattr(diffusers, fresh.diffusers_pipeline).from_pretrained(directory)
    loaded = type(policy)(
        pipe, torch.device("cpu"), torch.float32, MAX_TOKENS, embedded_guidance=policy.embedded_guidance
    )
    cond = fresh.encode_prompts(PROMPTS, with_negative=False)
    assert_lora_export_reproduces(
        fresh, lora, tmp_path / "lora", pipe, loaded, (noise(fresh), torch.tensor([0.7, 0.3]), cond, 1.0)
    )
    targeted = {name for name, _ in pipe.transformer.named_modules() if name.endswith(".lora_A")}
    assert any(name.startswith("single_transformer_blocks") for name in targeted) == (policy.family == "flux")


def test_flux_schnell_form_without_guidance_embedding_reproduces_its_pipeline(tmp_path):
    """FLUX.1-schnell's form: no guidance embedding (model.embedded_guidance=null), static
    shift 1 (no dynamic shifting); our ODE sample is the pipeline's."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline

    from genalign.models.flux.tiny import build_tiny_flux_pipeline

    built = build_tiny_flux_pipeline(seed=1, guidance_embeds=False)
    built.scheduler = FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    built.save_pretrained(tmp_path / "schnell")
    policy = FluxPolicy.from_pretrained(tmp_path / "schnell", max_sequence_length=MAX_TOKENS)
    with pytest.raises(ValueError, match="no guidance embedding"):
        FluxPolicy.from_pretrained(tmp_path / "schnell", embedded_guidance=3.5)
    torch.testing.assert_close(policy.sigmas(4, (4, 8, 8)), torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0]))
    start, ours = ode_sample(policy, 1.0, num_steps=2)
    pipe = FluxPipeline.from_pretrained(tmp_path / "schnell")
    packed = pipe(
        PROMPTS,
        height=64,
        width=64,
        num_inference_steps=2,
        latents=pack_2x2(start),
        output_type="latent",
        max_sequence_length=MAX_TOKENS,
    ).images
    assert_close_reordered(ours, unpack_2x2(packed, 8, 8), length=TINY_REDUCTION, depth=2 * TINY_DEPTH)  # 2 steps
